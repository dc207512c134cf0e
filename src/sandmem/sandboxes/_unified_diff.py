"""A standard unified diff (``diff -u``, ``git diff``) as apply_patch operations (pure).

Models that were not trained on the ``*** Begin Patch`` format write the diff they know::

    --- a/src/app.py             (``/dev/null`` here: a new file)
    +++ b/src/app.py             (``/dev/null`` here: a deleted file)
    @@ -3,7 +3,8 @@ def main():
     context line
    -removed line
    +added line

``git diff`` header lines (``diff --git``, ``index``, ``new file mode``, ...) are skipped,
``a/`` and ``b/`` prefixes and a trailing timestamp are dropped from the paths, a different
new path moves the file, and ``\\ No newline at end of file`` is ignored. A hunk is found in the
file by its lines, as the native format's are; the range only places a hunk that has no
context or removed lines (an insertion). A hunk ends at the next ``@@``, the next file's
``---``/``+++`` pair, or a ``diff`` line.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable

from sandmem.sandboxes._patch_ops import (
    AddFile,
    DeleteFile,
    Hunk,
    PatchError,
    PatchOp,
    UpdateFile,
)

_RANGE = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_GIT_HEADERS = (
    "diff ",
    "index ",
    "new file mode",
    "deleted file mode",
    "old mode",
    "new mode",
    "similarity index",
    "dissimilarity index",
    "rename from",
    "rename to",
    "copy from",
    "copy to",
    "Binary files",
)
NULL_PATH = "/dev/null"


def looks_like_unified_diff(lines: list[str]) -> bool:
    """Whether ``lines`` hold a unified diff: a ``---`` line followed by a ``+++`` line."""
    return any(a.startswith("--- ") and b.startswith("+++ ") for a, b in itertools.pairwise(lines))


def _diff_path(raw: str) -> str | None:
    """The path of a ``---``/``+++`` line's value (``None`` for ``/dev/null``)."""
    value = raw.split("\t", 1)[0].strip()
    if value.startswith('"') and value.endswith('"') and len(value) > 1:
        value = value[1:-1]
    if value == NULL_PATH:
        return None
    if value.startswith(("a/", "b/")):
        value = value[2:]
    return value


def _is_file_start(lines: list[str], i: int) -> bool:
    return (
        lines[i].startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ ")
    ) or lines[i].startswith("diff ")


def parse_unified_diff(
    lines: list[str], first_line: int, check_path: Callable[[str, int], str]
) -> list[PatchOp]:
    """The operations of a unified diff; ``first_line`` is the 1-based number of ``lines[0]``
    in the patch text (for error messages); ``check_path`` validates a path."""
    ops: list[PatchOp] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.strip() or line.startswith(_GIT_HEADERS):
            i += 1
            continue
        if not (line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ ")):
            raise PatchError(
                f"line {first_line + i}: a unified diff names each file with a '--- a/path' "
                f"line then a '+++ b/path' line, got {line!r}",
                line=first_line + i,
            )
        old = _diff_path(line[4:])
        new = _diff_path(lines[i + 1][4:])
        i, hunks = _hunks(lines, i + 2, first_line, new or old or "?")
        ops.append(_operation(old, new, hunks, first_line + i, check_path))
    if not ops:
        raise PatchError("the diff contains no files")
    return ops


def _operation(
    old: str | None,
    new: str | None,
    hunks: list[Hunk],
    line_no: int,
    check_path: Callable[[str, int], str],
) -> PatchOp:
    if old is None and new is None:
        raise PatchError(f"line {line_no}: both paths of a file are /dev/null", line=line_no)
    if old is None:
        assert new is not None
        added = [text for hunk in hunks for kind, text in hunk.lines if kind != "-"]
        return AddFile(check_path(new, line_no), tuple(added))
    if new is None:
        return DeleteFile(check_path(old, line_no))
    path = check_path(old, line_no)
    target = check_path(new, line_no)
    move_to = target if target != path else None
    if not hunks and move_to is None:
        raise PatchError(f"the diff of '{path}' has no hunks", path=path, line=line_no)
    return UpdateFile(path, tuple(hunks), move_to)


def _hunks(lines: list[str], i: int, first_line: int, path: str) -> tuple[int, list[Hunk]]:
    hunks: list[Hunk] = []
    while i < len(lines) and not _is_file_start(lines, i):
        line = lines[i]
        if not line.strip():
            i += 1
            continue
        match = _RANGE.match(line)
        if match is None:
            raise PatchError(
                f"line {first_line + i}: expected a hunk range such as '@@ -3,7 +3,8 @@' in "
                f"the diff of '{path}', got {line!r}",
                path=path,
                line=first_line + i,
            )
        old_start = int(match.group(1))
        i += 1
        body: list[tuple[str, str]] = []
        while i < len(lines) and not lines[i].startswith("@@") and not _is_file_start(lines, i):
            text = lines[i]
            i += 1
            if text.startswith("\\"):
                continue  # "\ No newline at end of file"
            if text[:1] in (" ", "-", "+"):
                body.append((text[0], text[1:]))
            elif text == "":
                body.append((" ", ""))
            else:
                raise PatchError(
                    f"line {first_line + i - 1}: hunk lines must start with ' ', '-' or '+' "
                    f"(in '{path}'), got {text!r}",
                    path=path,
                    hunk=len(hunks) + 1,
                    line=first_line + i - 1,
                )
        while body and body[-1] == (" ", ""):
            body.pop()  # blank separator lines before the next file
        if not body:
            raise PatchError(
                f"hunk {len(hunks) + 1} of '{path}' has no lines", path=path, hunk=len(hunks) + 1
            )
        hunks.append(Hunk((), tuple(body), insert_after=old_start))
    return i, hunks
