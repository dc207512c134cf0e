"""Small value types of the session API: directory entries and permission bits.

Shaped like the reference SDK's (``FileEntry(path, permissions, owner, group, size, kind)``,
``Permissions(owner, group, other, directory)``, ``FileMode``), so code that inspects what
``session.ls`` returns, or sets ``File(permissions=...)``, works unchanged.
"""

from __future__ import annotations

import enum
import stat
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field


class FileMode(enum.IntFlag):
    """One permission triplet: read, write, execute."""

    NONE = 0
    EXEC = 1
    WRITE = 2
    READ = 4
    ALL = 7


class Permissions(BaseModel):
    """Permission bits as three triplets (``owner``, ``group``, ``other``, each 0-7) plus
    whether the entry is a directory. ``Permissions.from_mode(0o644).to_mode() == 0o644``."""

    model_config = ConfigDict(frozen=True)

    owner: int = Field(default=FileMode.ALL, ge=0, le=7)
    group: int = Field(default=0, ge=0, le=7)
    other: int = Field(default=0, ge=0, le=7)
    directory: bool = False

    def to_mode(self) -> int:
        """The permission bits (``0o755``), with ``S_IFDIR`` added for a directory."""
        mode = (int(self.owner) << 6) | (int(self.group) << 3) | int(self.other)
        return mode | stat.S_IFDIR if self.directory else mode

    @classmethod
    def from_mode(cls, mode: int) -> Permissions:
        return cls(
            owner=(mode >> 6) & 7,
            group=(mode >> 3) & 7,
            other=mode & 7,
            directory=stat.S_ISDIR(mode),
        )

    def __str__(self) -> str:
        """``drwxr-xr-x`` style, as ``ls -l`` shows it."""
        text = "d" if self.directory else "-"
        for triplet in (self.owner, self.group, self.other):
            text += "r" if triplet & 4 else "-"
            text += "w" if triplet & 2 else "-"
            text += "x" if triplet & 1 else "-"
        return text


class EntryKind(enum.StrEnum):
    DIRECTORY = "directory"
    FILE = "file"
    SYMLINK = "symlink"
    OTHER = "other"


@dataclass(frozen=True, kw_only=True)
class FileEntry:
    """One entry of ``session.ls(path)``. ``path`` is the entry's path as commands in the
    sandbox see it (the workspace root joined with the listed directory and the name).
    ``mtime_ns`` is the entry's modification time in nanoseconds where the backend knows it
    (the local backends), else ``None``."""

    path: str
    permissions: Permissions
    owner: str
    group: str
    size: int
    kind: EntryKind = EntryKind.FILE
    mtime_ns: int | None = None

    @property
    def name(self) -> str:
        return self.path.rstrip("/").rsplit("/", 1)[-1]

    def is_dir(self) -> bool:
        return self.kind == EntryKind.DIRECTORY


def entry_kind(mode: int) -> EntryKind:
    if stat.S_ISLNK(mode):
        return EntryKind.SYMLINK
    if stat.S_ISDIR(mode):
        return EntryKind.DIRECTORY
    if stat.S_ISREG(mode):
        return EntryKind.FILE
    return EntryKind.OTHER
