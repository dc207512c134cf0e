"""apply_patch accepts a standard unified diff, and the lenient shapes small models write."""

from __future__ import annotations

import pytest

from sandmem._errors import SandboxPathError
from sandmem.sandboxes._apply_patch import (
    AddFile,
    DeleteFile,
    PatchError,
    UpdateFile,
    parse_patch,
    plan,
)

APP = "".join(f"line {n}\n" for n in range(1, 11)).encode()


def apply(files: dict[str, bytes], text: str) -> dict[str, bytes | None]:
    result: dict[str, bytes | None] = dict(files)
    for change in plan(parse_patch(text), files.get):
        if change.kind == "move":
            assert change.move_to is not None
            result[change.path] = None
            result[change.move_to] = change.content
        else:
            result[change.path] = change.content
    return result


def diff(*lines: str) -> str:
    return "\n".join(lines) + "\n"


def test_a_git_diff_updates_a_file() -> None:
    text = diff(
        "diff --git a/app.txt b/app.txt",
        "index 3b18e51..a9c2f4e 100644",
        "--- a/app.txt",
        "+++ b/app.txt",
        "@@ -2,3 +2,3 @@",
        " line 2",
        "-line 3",
        "+line three",
        " line 4",
        "@@ -8,2 +8,3 @@ some section",
        " line 8",
        "+line 8.5",
        " line 9",
    )
    out = apply({"app.txt": APP}, text)
    expected = APP.replace(b"line 3\n", b"line three\n").replace(b"line 8\n", b"line 8\nline 8.5\n")
    assert out["app.txt"] == expected


def test_diff_u_paths_with_timestamps_and_no_prefix() -> None:
    text = diff(
        "--- app.txt\t2026-12-06 07:00:00.000000000 +0000",
        "+++ app.txt\t2026-12-06 07:01:00.000000000 +0000",
        "@@ -1 +1 @@",
        "-line 1",
        "+first",
        "\\ No newline at end of file",
    )
    assert apply({"app.txt": APP}, text)["app.txt"] == APP.replace(b"line 1\n", b"first\n")


def test_new_and_deleted_files_and_a_rename() -> None:
    text = diff(
        "--- /dev/null",
        "+++ b/docs/new.md",
        "@@ -0,0 +1,2 @@",
        "+# New",
        "+text",
        "--- a/old.txt",
        "+++ /dev/null",
        "@@ -1 +0,0 @@",
        "-bye",
        "--- a/app.txt",
        "+++ b/moved.txt",
        "@@ -1,1 +1,1 @@",
        "-line 1",
        "+one",
    )
    ops = parse_patch(text)
    assert ops[0] == AddFile("docs/new.md", ("# New", "text"))
    assert ops[1] == DeleteFile("old.txt")
    assert isinstance(ops[2], UpdateFile) and ops[2].move_to == "moved.txt"
    out = apply({"app.txt": APP, "old.txt": b"bye\n"}, text)
    assert out["docs/new.md"] == b"# New\ntext\n"
    assert out["old.txt"] is None
    assert out["app.txt"] is None and out["moved.txt"] == APP.replace(b"line 1\n", b"one\n")


def test_a_pure_insertion_goes_where_its_range_says() -> None:
    text = diff("--- a/app.txt", "+++ b/app.txt", "@@ -3,0 +4,1 @@", "+inserted")
    out = apply({"app.txt": APP}, text)
    assert out["app.txt"] == APP.replace(b"line 3\n", b"line 3\ninserted\n")


def test_a_unified_diff_inside_begin_and_end_lines() -> None:
    # what a small model wrote: the native wrapper around the diff it knows
    text = diff(
        "*** Begin Patch",
        "--- a/app.txt",
        "+++ b/app.txt",
        "@@ -5,1 +5,1 @@",
        "-line 5",
        "+five",
        "*** End Patch",
    )
    assert apply({"app.txt": APP}, text)["app.txt"] == APP.replace(b"line 5\n", b"five\n")


def test_native_operations_without_begin_end_and_inside_a_fence() -> None:
    bare = diff("*** Add File: a.txt", "+hello")
    assert parse_patch(bare) == [AddFile("a.txt", ("hello",))]
    fenced = diff("```diff", "*** Begin Patch", "*** Delete File: b.txt", "*** End Patch", "```")
    assert parse_patch(fenced) == [DeleteFile("b.txt")]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (diff("--- a/x", "+++ b/x", "nonsense"), "expected a hunk range such as '@@ -3,7"),
        (diff("--- a/x", "+++ b/x", "@@ -1 +1 @@", "?bad"), "hunk lines must start with"),
        (diff("--- a/x", "+++ b/x"), "the diff of 'x' has no hunks"),
        (diff("--- /dev/null", "+++ /dev/null", "@@ -0,0 +1 @@", "+x"), "both paths"),
        (diff("garbage", "--- a/x", "+++ b/x", "@@ -1 +1 @@", "-a", "+b"), "'--- a/path'"),
    ],
)
def test_malformed_diffs_say_what_and_show_the_form(text: str, message: str) -> None:
    with pytest.raises(PatchError) as info:
        parse_patch(text)
    assert message in str(info.value)
    assert "The expected form" in str(info.value)
    assert "*** Begin Patch" in str(info.value)


def test_a_diff_cannot_leave_the_workspace() -> None:
    with pytest.raises(SandboxPathError):
        parse_patch(diff("--- /dev/null", "+++ b/../../etc/x", "@@ -0,0 +1 @@", "+x"))


def test_a_diff_whose_context_is_missing_fails_without_writing() -> None:
    text = diff("--- a/app.txt", "+++ b/app.txt", "@@ -1 +1 @@", "-no such line", "+x")
    with pytest.raises(PatchError):
        apply({"app.txt": APP}, text)


def test_the_observed_malformed_patch_now_shows_the_form() -> None:
    # the 1.5B model's repeated call: a Begin line, then a bare path line
    with pytest.raises(PatchError) as info:
        parse_patch(diff("*** Begin Patch", "hello.py", "+print('hi')", "*** End Patch"))
    text = str(info.value)
    assert text.startswith("line 2: expected '*** Add File: '")
    assert "*** Add File: notes/todo.txt" in text
