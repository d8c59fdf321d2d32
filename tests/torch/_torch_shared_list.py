"""A torch Dataset kept in a SharedList (importable by DataLoader workers under spawn)."""

from __future__ import annotations

from typing import Iterable

import torch
from torch.utils.data import Dataset, get_worker_info

from easycore.common.parallel import SharedList


def make_records(n: int) -> list:
    return [{"id": i, "file": f"{i:06d}.jpg", "box": [i + 0.5, 2.0, 3.0, 4.0]} for i in range(n)]


class Records(Dataset):
    """Records in shared memory; an item is (worker id, record id, box as a tensor)."""

    def __init__(self, records: Iterable[dict]) -> None:
        self.records = SharedList(records)

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, index: int) -> tuple:
        record = self.records[index]
        info = get_worker_info()
        return (-1 if info is None else info.id, record["id"],
                torch.tensor(record["box"]))
