"""SharedList as a DataLoader's data set and as a torch Dataset's storage.

Real DataLoader workers (2, under fork and spawn); ``no_leaks`` checks that no
worker, thread, descriptor or segment (``/dev/shm/ecp-<pid>-...``) is left.
"""

from __future__ import annotations

import multiprocessing

import pytest
import torch
from _torch_shared_list import Records, make_records
from torch.utils.data import DataLoader

from easycore.common.parallel import SharedList

pytestmark = pytest.mark.timeout(180)
METHODS = [m for m in ("fork", "spawn") if m in multiprocessing.get_all_start_methods()]
# The DataLoader forks its workers while the feeder threads of its previous
# iterator's queues still run (torch's own threads, not easycore's).
LOADER_METHODS = [pytest.param(m, marks=pytest.mark.forks_with_threads) if m == "fork" else m
                  for m in METHODS]


@pytest.mark.parametrize("method", LOADER_METHODS)
def test_a_dataloader_reads_a_shared_list_directly(no_leaks, method):
    records = make_records(300)
    with SharedList(records) as dataset:
        loader = DataLoader(dataset, batch_size=None, num_workers=2,
                            multiprocessing_context=method)
        assert list(loader) == records
        # batched: the default collate turns the dicts into a dict of batches
        loader = DataLoader(dataset[100:], batch_size=50, num_workers=2,
                            multiprocessing_context=method)
        ids = torch.cat([batch["id"] for batch in loader])
        assert ids.tolist() == list(range(100, 300))


@pytest.mark.parametrize("method", METHODS)
def test_a_dataset_keeps_its_records_in_a_shared_list(no_leaks, method):
    dataset = Records(make_records(200))
    try:
        loader = DataLoader(dataset, batch_size=8, shuffle=True, num_workers=2,
                            multiprocessing_context=method,
                            generator=torch.Generator().manual_seed(0))
        workers, ids, boxes = set(), [], []
        for worker, record_id, box in loader:
            workers.update(worker.tolist())
            ids += record_id.tolist()
            boxes.append(box)
        assert workers == {0, 1}  # read in the workers, not here
        assert sorted(ids) == list(range(200))
        assert torch.cat(boxes)[:, 0].sort().values.tolist() == [i + 0.5 for i in range(200)]
        assert dataset[7][1:2] == (7,)  # and here
    finally:
        dataset.records.close()
