"""The apply_patch text format and its parser (pure: text in, operations out).

The format (the one OpenAI models are trained to emit)::

    *** Begin Patch
    *** Add File: path           then the new file's lines, each prefixed with "+"
    *** Delete File: path
    *** Update File: path
    *** Move to: new/path        optional, right after "Update File"
    @@ def handler():            a hunk; the optional header is a line to find first
     context line                (headers may be stacked: "@@ class A" then "@@ def f")
    -removed line
    +added line
    *** End of File              optional: the hunk ends at the end of the file
    *** End Patch

The parser is lenient where models commonly slip and strict elsewhere: the first hunk may omit
its ``@@`` line, a bare empty line in a hunk or an added file stands for an empty line (bare
empty lines just before the next operation are dropped), a unified-diff range
(``@@ -3,7 +3,8 @@``) counts as a header-less ``@@``; anything else unexpected is a
``PatchError`` naming the line.
"""

from __future__ import annotations

import posixpath
import re

from sandmem._errors import SandboxPathError
from sandmem.sandboxes._patch_ops import (
    AddFile,
    DeleteFile,
    Hunk,
    PatchError,
    PatchOp,
    UpdateFile,
)
from sandmem.sandboxes._unified_diff import looks_like_unified_diff, parse_unified_diff

__all__ = [
    "AddFile",
    "DeleteFile",
    "Hunk",
    "PatchError",
    "PatchOp",
    "UpdateFile",
    "parse_patch",
]

BEGIN = "*** Begin Patch"
END = "*** End Patch"
END_OF_FILE = "*** End of File"
ADD = "*** Add File: "
DELETE = "*** Delete File: "
UPDATE = "*** Update File: "
MOVE = "*** Move to: "
_OP_PREFIXES = (ADD, DELETE, UPDATE)
#: a unified-diff range ("@@ -3,7 +3,8 @@") carries no usable header; models sometimes emit one
_DIFF_RANGE = re.compile(r"^-\d+(,\d+)? \+\d+(,\d+)? @@")


def _patch_path(raw: str, line_no: int) -> str:
    path = raw.strip()
    if not path:
        raise PatchError(f"line {line_no}: the file path is empty", line=line_no)
    norm = posixpath.normpath(path)
    if norm == ".." or norm.startswith("../"):
        raise SandboxPathError(
            f"apply_patch: path {path!r} leaves the workspace; use a path relative to the "
            "workspace root",
            operation="apply_patch",
            path=path,
        )
    return norm


#: shown with every syntax error, so a model that wrote another form sees the one wanted
FORMAT_HINT = f"""The expected form (a standard unified diff with '--- a/path', '+++ b/path' and \
'@@ -3,7 +3,8 @@' lines is accepted too):
{BEGIN}
{UPDATE}src/app.py
@@ def greet():
-    print("hi")
+    print("hello")
{ADD}notes/todo.txt
+first line of the new file
{DELETE}old.txt
{END}"""


def parse_patch(text: str) -> list[PatchOp]:
    """Parse patch text into operations; raises ``PatchError`` naming the offending line and
    showing the expected form (``FORMAT_HINT``).

    Besides the native format, a standard unified diff is accepted (bare, or between the
    ``Begin``/``End`` lines), and so are a Markdown code fence around the patch and native
    operations without the ``Begin``/``End`` lines."""
    lines = [line.rstrip("\r") for line in text.strip().split("\n")]
    offset = 0
    if len(lines) >= 2 and lines[0].startswith("```") and lines[-1].strip() == "```":
        lines, offset = lines[1:-1], 1
    try:
        return _parse(lines, offset)
    except PatchError as exc:
        raise PatchError(
            f"{exc}\n{FORMAT_HINT}", path=exc.path, hunk=exc.hunk, line=exc.line
        ) from None


def _parse(lines: list[str], offset: int) -> list[PatchOp]:
    first = lines[0].strip() if lines else ""
    if first != BEGIN:
        if looks_like_unified_diff(lines):
            return parse_unified_diff(lines, offset + 1, _patch_path)
        if not _is_op_start(first):
            raise PatchError(f"the patch must start with a '{BEGIN}' line", line=offset + 1)
        # the operations without their Begin/End lines: read as if they were there
        lines = [BEGIN, *lines] if lines[-1].strip() == END else [BEGIN, *lines, END]
        offset -= 1
    try:
        end = next(i for i, line in enumerate(lines) if line.strip() == END)
    except StopIteration:
        raise PatchError(
            f"the patch must end with an '{END}' line", line=offset + len(lines)
        ) from None
    if any(line.strip() for line in lines[end + 1 :]):
        raise PatchError(f"line {offset + end + 2}: text after '{END}'", line=offset + end + 2)
    inner = lines[1:end]
    body = [line for line in inner if line.strip()]
    if body and not _is_op_start(body[0]) and looks_like_unified_diff(inner):
        return parse_unified_diff(inner, offset + 2, _patch_path)
    return _parse_native(lines, end, offset)


def _parse_native(lines: list[str], end: int, offset: int) -> list[PatchOp]:
    ops: list[PatchOp] = []
    i = 1
    while i < end:
        line = lines[i]
        if line.startswith(ADD):
            path = _patch_path(line[len(ADD) :], offset + i + 1)
            i, body = _parse_added_lines(lines, i + 1, end)
            ops.append(AddFile(path, body))
        elif line.startswith(DELETE):
            ops.append(DeleteFile(_patch_path(line[len(DELETE) :], offset + i + 1)))
            i += 1
        elif line.startswith(UPDATE):
            path = _patch_path(line[len(UPDATE) :], offset + i + 1)
            i += 1
            move_to = None
            if i < end and lines[i].startswith(MOVE):
                move_to = _patch_path(lines[i][len(MOVE) :], offset + i + 1)
                i += 1
            i, hunks = _parse_hunks(lines, i, end, path)
            if not hunks and move_to is None:
                raise PatchError(f"'{UPDATE}{path}' has no hunks", path=path, line=offset + i)
            ops.append(UpdateFile(path, tuple(hunks), move_to))
        elif not line.strip():
            i += 1
        else:
            raise PatchError(
                f"line {offset + i + 1}: expected '{ADD}', '{UPDATE}', '{DELETE}' or '{END}', "
                f"got {line!r}",
                line=offset + i + 1,
            )
    if not ops:
        raise PatchError("the patch contains no file operations")
    return ops


def _is_op_start(line: str) -> bool:
    return line.startswith(_OP_PREFIXES)


def _parse_added_lines(lines: list[str], i: int, end: int) -> tuple[int, tuple[str, ...]]:
    body: list[str] = []
    while i < end and not _is_op_start(lines[i]):
        line = lines[i]
        if line.startswith("+"):
            body.append(line[1:])
        elif line == "":
            body.append("")  # a blank line the model sent without its "+"
        else:
            raise PatchError(
                f"line {i + 1}: every line of an added file must start with '+', got {line!r}",
                line=i + 1,
            )
        i += 1
    while body and body[-1] == "" and lines[i - 1] == "":
        body.pop()  # blank separator lines before the next operation
        i -= 1
    return _skip_blank(lines, i, end), tuple(body)


def _skip_blank(lines: list[str], i: int, end: int) -> int:
    while i < end and not lines[i].strip():
        i += 1
    return i


def _parse_hunks(lines: list[str], i: int, end: int, path: str) -> tuple[int, list[Hunk]]:
    hunks: list[Hunk] = []
    while i < end and not _is_op_start(lines[i]):
        headers: list[str] = []
        while i < end and lines[i].startswith("@@"):
            header = lines[i][2:].strip()
            if header and not _DIFF_RANGE.match(header):
                headers.append(header)
            i += 1
        body: list[tuple[str, str]] = []
        bare_blank: list[bool] = []
        end_of_file = False
        while i < end:
            line = lines[i]
            if line.startswith("@@") or _is_op_start(line):
                break
            i += 1
            if line.rstrip() == END_OF_FILE:
                end_of_file = True
                break
            if line[:1] in (" ", "-", "+"):
                body.append((line[0], line[1:]))
            elif line == "":
                body.append((" ", ""))  # an empty context line sent without its " "
            else:
                raise PatchError(
                    f"line {i}: hunk lines must start with ' ', '-' or '+' (in '{path}'), "
                    f"got {line!r}",
                    path=path,
                    hunk=len(hunks) + 1,
                    line=i,
                )
            bare_blank.append(line == "")
        while body and bare_blank[-1]:
            body.pop()
            bare_blank.pop()
        if not body:
            raise PatchError(
                f"hunk {len(hunks) + 1} of '{path}' has no lines", path=path, hunk=len(hunks) + 1
            )
        hunks.append(Hunk(tuple(headers), tuple(body), end_of_file))
        i = _skip_blank(lines, i, end)
    return i, hunks
