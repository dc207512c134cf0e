"""Opening a foreign transcript: never a blocking open, never a special file.

A transcript is named by another program (a hook's payload, a directory listing) and can be
swapped between the check and the read: a FIFO in its place would block an ordinary ``open``
until some writer came, hanging ``ingest`` (and a hook's detached process) for good. Every
read of a transcript opens it here: with ``O_NONBLOCK`` (a FIFO opens at once), then the
descriptor itself is checked (``fstat``) and anything but a regular file is refused before a
byte is read.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import BinaryIO


class NotRegularFile(OSError):
    """The path is a FIFO, socket, device or directory, not a transcript file."""


def open_regular(path: Path) -> BinaryIO:
    """``path`` opened for reading in binary, or ``NotRegularFile`` (checked on the open
    descriptor, so a file swapped after any earlier check is caught too)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotRegularFile(f"{path} is not a regular file (a FIFO, socket or device)")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular(path: Path, limit: int = -1) -> bytes:
    """Up to ``limit`` bytes (all when negative) of the regular file ``path``."""
    with open_regular(path) as stream:
        return stream.read(limit)
