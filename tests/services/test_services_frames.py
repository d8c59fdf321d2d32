"""The service's frame reader and writer speak ``multiprocessing.connection``'s format."""

from __future__ import annotations

import socket
import struct
from multiprocessing import connection

from easycore.common.parallel.connection.frames import FrameReader, FrameWriter


def test_frames_in_any_pieces():
    messages = [b"", b"a", b"x" * 100_000, bytes(range(256))]
    stream = b"".join(struct.pack("!i", len(m)) + m for m in messages)
    reader = FrameReader()
    got = []
    for i in range(len(stream)):  # one byte at a time
        got.extend(reader.feed(stream[i : i + 1]))
    assert got == messages and not reader.partial
    assert FrameReader().feed(stream) == messages  # all at once
    reader = FrameReader()
    assert reader.feed(stream[:10]) == [b"", b"a"] and reader.partial


def test_the_long_header_form():
    body = b"payload"
    data = struct.pack("!i", -1) + struct.pack("!Q", len(body)) + body
    assert FrameReader().feed(data) == [body]


def test_a_negative_length_is_refused():
    import pytest

    with pytest.raises(ValueError, match="bad frame header"):
        FrameReader().feed(struct.pack("!i", -5))


def test_the_writer_talks_to_a_connection():
    a, b = socket.socketpair()
    conn = connection.Connection(b.detach())
    try:
        writer = FrameWriter()
        for m in (b"one", b"y" * 200_000, b""):
            writer.put(m)
        a.setblocking(False)
        received = []
        while not writer.flush(a) or len(received) < 3:
            while conn.poll(0.01):
                received.append(conn.recv_bytes())
        while len(received) < 3:
            received.append(conn.recv_bytes())
        assert received == [b"one", b"y" * 200_000, b""] and writer.nbytes == 0
    finally:
        a.close()
        conn.close()
