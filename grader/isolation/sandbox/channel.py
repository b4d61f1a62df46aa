"""Messages between the judge and the subject: a JSON header and raw tensor bytes, nothing pickled.

One message is ``MAGIC``, the header's length and the blob's length (8 bytes each), the header
(UTF-8 JSON, an object) and the blob (tensors, :mod:`grader.common.wire`). Whatever the subject
sends, the judge only parses JSON and copies bytes, within the limits below.
"""
from __future__ import annotations

import json
import os
import select
import struct
import time

from grader.common.wire import ProtocolError

MAGIC = b"CTC1"
_LENGTHS = struct.Struct("<QQ")
MAX_HEADER_BYTES = 32 * 1024 ** 2
MAX_BLOB_BYTES = 1024 ** 3

__all__ = ["ProtocolError", "encode_message", "write_message", "read_message", "serve"]


def encode_message(header: dict, blob: bytes = b"") -> bytes:
    data = json.dumps(header, allow_nan=False).encode()
    return MAGIC + _LENGTHS.pack(len(data), len(blob)) + data + blob


def write_message(fd: int, header: dict, blob: bytes = b"") -> None:
    data = memoryview(encode_message(header, blob))
    while data:
        data = data[os.write(fd, data):]


def _read_exactly(fd: int, n: int, deadline_read) -> bytes:
    chunks, got = [], 0
    while got < n:
        chunk = deadline_read(fd, min(n - got, 1 << 20))
        if not chunk:
            raise EOFError("the other side closed the channel")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def deadline_reader(deadline: float):
    """An ``os.read`` for :func:`read_message` that raises ``TimeoutError`` at ``deadline``
    (``time.monotonic()``) instead of waiting for a process that does not answer."""
    def read(fd: int, n: int) -> bytes:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            raise TimeoutError("the process did not answer in time")
        return os.read(fd, n)
    return read


def read_message(fd: int, reader=os.read, max_blob: int = MAX_BLOB_BYTES) -> tuple[dict, bytes]:
    """One message from ``fd``: ``(header, blob)``. ``reader(fd, n)`` reads (a deadline-aware
    reader on the judge's side). Raises :class:`ProtocolError` for anything malformed or too
    large, ``EOFError`` when the channel closed."""
    head = _read_exactly(fd, len(MAGIC) + _LENGTHS.size, reader)
    if head[:len(MAGIC)] != MAGIC:
        raise ProtocolError("not a message of this protocol")
    n_header, n_blob = _LENGTHS.unpack(head[len(MAGIC):])
    if n_header > MAX_HEADER_BYTES or n_blob > max_blob:
        raise ProtocolError(f"a message of {n_header + n_blob} bytes is too large")
    try:
        header = json.loads(_read_exactly(fd, n_header, reader))
    except (ValueError, UnicodeDecodeError) as exc:
        raise ProtocolError(f"the header is not JSON ({exc})") from exc
    if not isinstance(header, dict):
        raise ProtocolError("the header is not an object")
    return header, _read_exactly(fd, n_blob, reader)


def serve(reply_fd: int, answer, done=lambda request: False) -> int:
    """The serve loop of the judge and of the subject alike: read each message from stdin,
    write ``answer(header, blob)`` (a ``(reply, blob)``) on ``reply_fd``, until stdin closes or
    ``done(header)`` says the message just answered was the last. Returns the exit status, 0."""
    while True:
        try:
            request, blob = read_message(0)
        except EOFError:
            return 0
        reply, out = answer(request, blob)
        write_message(reply_fd, reply, out)
        if done(request):
            return 0
