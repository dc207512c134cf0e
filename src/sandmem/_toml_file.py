"""Reading a settings file the user keeps (``sandmem.toml``, ``$SANDMEM_HOME/config.toml``) as
untrusted input: no link followed, a regular file only, at most 64 KiB, valid UTF-8 TOML."""

from __future__ import annotations

import os
import stat
import tomllib
from pathlib import Path
from typing import Any

from sandmem._errors import UserError

#: the largest settings file read
MAX_BYTES = 64 * 1024


def read_toml(path: Path) -> dict[str, Any] | None:
    """The TOML document at ``path``, or ``None`` when there is no file there; a link, a file
    that is not regular, over 64 KiB, not UTF-8 or not TOML is a ``UserError`` naming it."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise UserError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise UserError(f"{path} is not a regular file")
        data = os.read(fd, MAX_BYTES + 1)
    finally:
        os.close(fd)
    try:
        if len(data) > MAX_BYTES:
            raise ValueError("larger than 64 KiB")
        return tomllib.loads(data.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise UserError(f"{path} is not valid TOML ({exc})") from None
