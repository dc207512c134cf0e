"""The operations an apply_patch text parses into, and the error a bad patch raises."""

from __future__ import annotations

from dataclasses import dataclass

from sandmem._errors import SandmemError


class PatchError(SandmemError):
    """A patch is malformed or does not fit the files; nothing was written.

    ``path`` names the file and ``hunk`` the 1-based hunk number when they apply; ``line`` is
    the 1-based line of the patch text for syntax errors.
    """

    def __init__(
        self,
        message: str,
        *,
        path: str | None = None,
        hunk: int | None = None,
        line: int | None = None,
    ) -> None:
        super().__init__(message)
        self.path = path
        self.hunk = hunk
        self.line = line


@dataclass(frozen=True)
class Hunk:
    """One ``@@`` section: header lines to find first, then ``(kind, text)`` lines where kind is
    ``" "`` (context), ``"-"`` (removed) or ``"+"`` (added)."""

    headers: tuple[str, ...]
    lines: tuple[tuple[str, str], ...]
    end_of_file: bool = False
    #: for a hunk of only added lines: the file line it goes after (a unified diff's range;
    #: ``None``: at the end, or after the headers)
    insert_after: int | None = None

    @property
    def old_lines(self) -> list[str]:
        return [text for kind, text in self.lines if kind != "+"]


@dataclass(frozen=True)
class AddFile:
    path: str
    lines: tuple[str, ...]


@dataclass(frozen=True)
class DeleteFile:
    path: str


@dataclass(frozen=True)
class UpdateFile:
    path: str
    hunks: tuple[Hunk, ...]
    move_to: str | None = None


PatchOp = AddFile | DeleteFile | UpdateFile
