"""The apply_patch engine: validate every change against the files, and only then write.

Three steps, so that a bad patch changes nothing:

- ``parse_patch(text)`` (in ``_patch_format``) — pure: text → ``PatchOp`` list, or
  ``PatchError`` naming the patch line;
- ``plan(ops, read)`` — pure: checks that every file exists or not as needed and that every
  hunk matches (searching forward from the previous hunk; exact first, then ignoring trailing
  whitespace) and returns the ``FileChange`` list; raises ``PatchError`` naming the file, the
  hunk and the expected lines;
- ``apply_patch(files, text)`` — reads every named path through the session primitives (whose
  path safety refuses escapes before anything is written), plans, then writes; a write that
  fails part-way is rolled back as far as possible.
"""

from __future__ import annotations

import contextlib
import posixpath
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal, Protocol

from sandmem.sandboxes._patch_format import (
    UPDATE,
    AddFile,
    DeleteFile,
    Hunk,
    PatchError,
    PatchOp,
    UpdateFile,
    parse_patch,
)

__all__ = [
    "AddFile",
    "DeleteFile",
    "FileChange",
    "Hunk",
    "PatchError",
    "PatchFiles",
    "PatchOp",
    "PatchResult",
    "UpdateFile",
    "apply_patch",
    "parse_patch",
    "plan",
]

_MAX_SHOWN_LINES = 30


@dataclass(frozen=True)
class FileChange:
    """One validated change. ``content`` is the new bytes (``None`` for a delete);
    ``original`` the bytes before (``None`` for an added file), used to roll back."""

    kind: Literal["add", "update", "delete", "move"]
    path: str
    content: bytes | None
    original: bytes | None
    move_to: str | None = None


#: ``read(path)`` → the file's bytes, or ``None`` when it does not exist
FileReader = Callable[[str], bytes | None]


def plan(ops: list[PatchOp], read: FileReader) -> list[FileChange]:
    """Validate every operation against the files and return the changes, in patch order.

    Later operations see the effect of earlier ones (a file added then updated works).
    Raises ``PatchError`` when a file is missing or already exists, or a hunk does not match.
    """
    pending: dict[str, bytes | None] = {}

    def current(path: str) -> bytes | None:
        return pending[path] if path in pending else read(path)

    changes: list[FileChange] = []
    for op in ops:
        if isinstance(op, AddFile):
            if current(op.path) is not None:
                raise PatchError(
                    f"cannot add '{op.path}': it already exists; use '{UPDATE}{op.path}' to "
                    "change it",
                    path=op.path,
                )
            data = "".join(line + "\n" for line in op.lines).encode("utf-8")
            changes.append(FileChange("add", op.path, data, None))
            pending[op.path] = data
            continue
        original = current(op.path)
        if original is None:
            verb = "delete" if isinstance(op, DeleteFile) else "update"
            raise PatchError(
                f"cannot {verb} '{op.path}': no such file in the workspace", path=op.path
            )
        if isinstance(op, DeleteFile):
            changes.append(FileChange("delete", op.path, None, original))
            pending[op.path] = None
            continue
        data = _apply_hunks(op.path, original, op.hunks) if op.hunks else original
        if op.move_to is not None and op.move_to != op.path:
            if current(op.move_to) is not None:
                raise PatchError(
                    f"cannot move '{op.path}' to '{op.move_to}': the destination exists",
                    path=op.path,
                )
            changes.append(FileChange("move", op.path, data, original, op.move_to))
            pending[op.path] = None
            pending[op.move_to] = data
        else:
            changes.append(FileChange("update", op.path, data, original))
            pending[op.path] = data
    return changes


def _apply_hunks(path: str, original: bytes, hunks: tuple[Hunk, ...]) -> bytes:
    try:
        text = original.decode("utf-8")
    except UnicodeDecodeError:
        raise PatchError(
            f"cannot update '{path}': it is not UTF-8 text; apply_patch edits text files only",
            path=path,
        ) from None
    eol = "\r\n" if "\r\n" in text else "\n"
    lines = text.split(eol)
    trailing_newline = lines[-1] == ""
    if trailing_newline:
        lines.pop()
    out: list[str] = []
    cursor = 0
    for number, hunk in enumerate(hunks, start=1):
        start, insert_at = _locate_headers(path, number, hunk, lines, cursor)
        old = hunk.old_lines
        if old:
            at = _find(lines, old, start, end_of_file=hunk.end_of_file)
            if at is None:
                raise _mismatch(path, number, hunk, lines, start)
        else:
            at = insert_at if hunk.headers and not hunk.end_of_file else len(lines)
            if hunk.insert_after is not None and not hunk.headers:
                at = max(cursor, min(hunk.insert_after, len(lines)))
        out.extend(lines[cursor:at])
        file_index = at
        for kind, patch_text in hunk.lines:
            if kind == "+":
                out.append(patch_text)
            else:
                if kind == " ":
                    out.append(lines[file_index])  # keep the file's own whitespace
                file_index += 1
        cursor = file_index
    out.extend(lines[cursor:])
    result = eol.join(out) + (eol if out and trailing_newline else "")
    return result.encode("utf-8")


def _locate_headers(
    path: str, number: int, hunk: Hunk, lines: list[str], cursor: int
) -> tuple[int, int]:
    """Find each ``@@`` header in turn; return where the hunk's search starts and where a
    hunk without context lines inserts (right after the last header)."""
    start, insert_at = cursor, cursor
    for header in hunk.headers:
        found = next((i for i in range(start, len(lines)) if lines[i].strip() == header), None)
        if found is None:
            found = next((i for i in range(start, len(lines)) if header in lines[i]), None)
        if found is None:
            raise PatchError(
                f"hunk {number} of '{path}': the '@@ {header}' line was not found (searched "
                f"from line {start + 1}). No file was changed; re-read the file and send a "
                "corrected patch.",
                path=path,
                hunk=number,
            )
        # the hunk's context may repeat the header line, so the search starts on it
        start, insert_at = found, found + 1
    return start, insert_at


def _find(lines: list[str], old: list[str], start: int, *, end_of_file: bool) -> int | None:
    last = len(lines) - len(old)
    # "*** End of File" hunks try the end first, then anywhere after ``start`` like the rest
    orders = [range(last, last + 1)] if end_of_file and last >= start else []
    orders.append(range(start, last + 1))
    for candidates in orders:
        for same in (_exact, _same_rstripped):
            for at in candidates:
                if all(same(lines[at + k], line) for k, line in enumerate(old)):
                    return at
    return None


def _exact(a: str, b: str) -> bool:
    return a == b


def _same_rstripped(a: str, b: str) -> bool:
    return a.rstrip() == b.rstrip()


def _mismatch(path: str, number: int, hunk: Hunk, lines: list[str], start: int) -> PatchError:
    old = hunk.old_lines
    shown = [f"    {line}" for line in old[:_MAX_SHOWN_LINES]]
    if len(old) > _MAX_SHOWN_LINES:
        shown.append(f"    ... ({len(old) - _MAX_SHOWN_LINES} more lines)")
    where = f"from line {start + 1} on"
    if hunk.end_of_file:
        where += " (the hunk is marked '*** End of File')"
    hint = ""
    if _find(lines, old, 0, end_of_file=False) is not None:
        hint = " These lines appear earlier in the file: hunks must follow the file's order."
    return PatchError(
        f"hunk {number} of '{path}' does not match the file: these context and removed lines "
        f"were not found {where}:\n" + "\n".join(shown) + f"\nNo file was changed.{hint} "
        "Re-read the file and send a corrected patch.",
        path=path,
        hunk=number,
    )


class PatchFiles(Protocol):
    """The session primitives apply_patch needs (``SandboxSession`` provides them; ``write``
    creates missing parent directories)."""

    async def read_bytes(self, path: str) -> bytes: ...
    async def write(self, path: str, data: bytes | str) -> None: ...
    async def exists(self, path: str) -> bool: ...
    async def mkdir(self, path: str, parents: bool = True) -> None: ...
    async def remove(self, path: str, recursive: bool = False) -> None: ...
    async def rename(self, src: str, dst: str) -> None: ...


@dataclass
class PatchResult:
    """What a patch changed, for the tool's answer."""

    added: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    moved: list[tuple[str, str]] = field(default_factory=list)

    def render(self) -> str:
        lines = [f"A {p}" for p in self.added] + [f"M {p}" for p in self.updated]
        lines += [f"D {p}" for p in self.deleted] + [f"R {a} -> {b}" for a, b in self.moved]
        return "Patch applied. Changed files:\n" + "\n".join(lines)


async def apply_patch(files: PatchFiles, text: str) -> PatchResult:
    """Parse, validate against the workspace, then write. Raises ``PatchError`` (nothing
    written) or the session's own errors, e.g. ``SandboxPathError`` for a path outside the
    workspace (every path is checked before anything is written)."""
    ops = parse_patch(text)
    snapshot = await _read_all(files, ops)
    changes = plan(ops, snapshot.__getitem__)
    await _write_all(files, changes)
    result = PatchResult()
    for change in changes:
        if change.kind == "add":
            result.added.append(change.path)
        elif change.kind == "update":
            result.updated.append(change.path)
        elif change.kind == "delete":
            result.deleted.append(change.path)
        else:
            result.moved.append((change.path, change.move_to or ""))
    return result


async def _read_all(files: PatchFiles, ops: list[PatchOp]) -> dict[str, bytes | None]:
    """Every path the patch names, through the session (so its path safety checks them all
    first): the bytes of files to update or delete; for other paths only whether they exist
    (``b""`` stands for "exists")."""
    sources = {op.path for op in ops if not isinstance(op, AddFile)}
    paths = [op.path for op in ops]
    paths += [op.move_to for op in ops if isinstance(op, UpdateFile) and op.move_to]
    found: dict[str, bytes | None] = {}
    for path in dict.fromkeys(paths):
        if not await files.exists(path):
            found[path] = None
        else:
            found[path] = await files.read_bytes(path) if path in sources else b""
    return found


async def _write_all(files: PatchFiles, changes: list[FileChange]) -> None:
    done: list[FileChange] = []
    try:
        for change in changes:
            # recorded first: undoing a change that failed half-way (or not at all) is harmless
            done.append(change)
            if change.kind == "delete":
                await files.remove(change.path)
            elif change.kind == "move" and change.move_to is not None:
                await _ensure_parent(files, change.move_to)
                # rename first so the file keeps its mode, then write the new content
                await files.rename(change.path, change.move_to)
                if change.content != change.original and change.content is not None:
                    await files.write(change.move_to, change.content)
            elif change.content is not None:
                await files.write(change.path, change.content)  # creates missing parents
    except BaseException:
        await _roll_back(files, done)
        raise


async def _ensure_parent(files: PatchFiles, path: str) -> None:
    parent = posixpath.dirname(path)
    if parent and not await files.exists(parent):
        await files.mkdir(parent, parents=True)


async def _roll_back(files: PatchFiles, done: list[FileChange]) -> None:
    """Best effort: undo the changes already written, newest first."""
    for change in reversed(done):
        with contextlib.suppress(Exception):  # keep undoing; the original error is raised
            if change.kind == "move" and change.move_to is not None:
                await files.remove(change.move_to)
            if change.original is None:
                await files.remove(change.path)
            else:
                await files.write(change.path, change.original)
