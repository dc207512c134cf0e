"""The apply_patch engine: parsing, planning (pure) and applying through session primitives."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandmem._errors import SandboxError, SandboxPathError, SandmemError
from sandmem.sandboxes import SandboxSession
from sandmem.sandboxes._apply_patch import (
    AddFile,
    DeleteFile,
    Hunk,
    PatchError,
    UpdateFile,
    apply_patch,
    parse_patch,
    plan,
)

APP = "".join(f"line {n}\n" for n in range(1, 21)).encode()


def patch(*body: str) -> str:
    return "\n".join(["*** Begin Patch", *body, "*** End Patch"]) + "\n"


def apply_pure(files: dict[str, bytes], text: str) -> dict[str, bytes | None]:
    """Plan ``text`` against ``files`` and return the resulting file map (None = deleted)."""
    result: dict[str, bytes | None] = dict(files)
    for change in plan(parse_patch(text), files.get):
        if change.kind == "move":
            assert change.move_to is not None
            result[change.path] = None
            result[change.move_to] = change.content
        else:
            result[change.path] = change.content
    return result


# --- parsing -------------------------------------------------------------------------------


def test_parse_all_operations() -> None:
    ops = parse_patch(
        patch(
            "*** Add File: new.txt",
            "+hello",
            "+",
            "*** Update File: src/app.py",
            "*** Move to: src/main.py",
            "@@ class A",
            "@@ def f():",
            " context",
            "-old",
            "+new",
            "*** End of File",
            "*** Delete File: gone.txt",
        )
    )
    assert ops == [
        AddFile("new.txt", ("hello", "")),
        UpdateFile(
            "src/app.py",
            (Hunk(("class A", "def f():"), ((" ", "context"), ("-", "old"), ("+", "new")), True),),
            "src/main.py",
        ),
        DeleteFile("gone.txt"),
    ]


def test_parse_tolerates_missing_first_header_and_bare_blank_lines() -> None:
    (op,) = parse_patch(patch("*** Update File: a.py", " x", "", "-y", "+z", ""))
    assert isinstance(op, UpdateFile)
    assert op.hunks[0].lines == ((" ", "x"), (" ", ""), ("-", "y"), ("+", "z"))


def test_parse_ignores_unified_diff_ranges_and_crlf() -> None:
    text = patch("*** Update File: a.py", "@@ -1,2 +1,2 @@", "-a", "+b").replace("\n", "\r\n")
    (op,) = parse_patch(text)
    assert isinstance(op, UpdateFile)
    assert op.hunks[0] == Hunk((), (("-", "a"), ("+", "b")))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "must start with a '*** Begin Patch' line"),
        ("Please change x to y in a", "must start with a '*** Begin Patch'"),
        ("*** Begin Patch\n*** Delete File: a\n", "must end with an '*** End Patch'"),
        (patch("*** Delete File: a") + "more", "text after '*** End Patch'"),
        (patch(), "no file operations"),
        (patch("*** Frobnicate File: a"), "line 2: expected '*** Add File: '"),
        (patch("*** Add File: a", "no plus"), "line 3: every line of an added file"),
        (patch("*** Update File: a", "@@", "?x"), "line 4: hunk lines must start with"),
        (patch("*** Update File: a"), "'*** Update File: a' has no hunks"),
        (patch("*** Update File: a", "@@ def f():"), "hunk 1 of 'a' has no lines"),
        (patch("*** Delete File:   "), "line 2: the file path is empty"),
    ],
)
def test_malformed_patch_is_a_clear_patch_error(text: str, message: str) -> None:
    with pytest.raises(PatchError) as info:
        parse_patch(text)
    assert message in str(info.value)
    assert isinstance(info.value, SandmemError)
    assert "The expected form" in str(info.value)  # every syntax error shows an example
    assert "*** Update File: src/app.py" in str(info.value)


def test_parse_refuses_paths_that_leave_the_workspace() -> None:
    with pytest.raises(SandboxPathError, match="leaves the workspace"):
        parse_patch(patch("*** Add File: ../x", "+evil"))
    with pytest.raises(SandboxPathError):
        parse_patch(patch("*** Update File: a", "*** Move to: sub/../../x", "@@", "-a", "+b"))


# --- planning (pure) -----------------------------------------------------------------------


def test_update_with_two_hunks() -> None:
    text = patch(
        "*** Update File: app.txt",
        "@@",
        " line 2",
        "-line 3",
        "+line three",
        " line 4",
        "@@",
        " line 16",
        "-line 17",
        "+line seventeen",
        "+line seventeen and a half",
        " line 18",
    )
    expected = APP.replace(b"line 3\n", b"line three\n").replace(
        b"line 17\n", b"line seventeen\nline seventeen and a half\n"
    )
    assert apply_pure({"app.txt": APP}, text)["app.txt"] == expected


def test_hunks_search_forward_from_the_previous_hunk() -> None:
    source = b"x = 1\nsep\nx = 1\n"
    text = patch("*** Update File: f", "@@", "-x = 1", "+x = 2", "@@", "-x = 1", "+x = 3")
    assert apply_pure({"f": source}, text)["f"] == b"x = 2\nsep\nx = 3\n"


def test_header_locates_the_hunk() -> None:
    source = b"def a():\n    return 1\n\ndef b():\n    return 1\n"
    text = patch("*** Update File: m.py", "@@ def b():", "-    return 1", "+    return 2")
    assert apply_pure({"m.py": source}, text)["m.py"] == source.replace(
        b"b():\n    return 1", b"b():\n    return 2"
    )


def test_header_repeated_as_context_and_insert_after_header() -> None:
    source = b"class A:\n    x = 1\n"
    repeated = patch(
        "*** Update File: m.py", "@@ class A:", " class A:", "-    x = 1", "+    x = 2"
    )
    assert apply_pure({"m.py": source}, repeated)["m.py"] == b"class A:\n    x = 2\n"
    insert = patch("*** Update File: m.py", "@@ class A:", "+    doc = 'A'")
    assert apply_pure({"m.py": source}, insert)["m.py"] == b"class A:\n    doc = 'A'\n    x = 1\n"


def test_end_of_file_hunk_and_pure_append() -> None:
    source = b"a\nb\na\nb\n"
    eof = patch("*** Update File: f", "@@", " a", "-b", "+c", "*** End of File")
    assert apply_pure({"f": source}, eof)["f"] == b"a\nb\na\nc\n"
    append = patch("*** Update File: f", "@@", "+tail")
    assert apply_pure({"f": source}, append)["f"] == source + b"tail\n"


def test_trailing_whitespace_tolerance_keeps_the_files_own_lines() -> None:
    source = b"keep   \nold\t\n"
    text = patch("*** Update File: f", "@@", " keep", "-old", "+new")
    assert apply_pure({"f": source}, text)["f"] == b"keep   \nnew\n"


def test_crlf_and_missing_final_newline_are_preserved() -> None:
    text = patch("*** Update File: f", "@@", " a", "-b", "+c")
    assert apply_pure({"f": b"a\r\nb\r\n"}, text)["f"] == b"a\r\nc\r\n"
    assert apply_pure({"f": b"a\nb"}, text)["f"] == b"a\nc"


def test_add_then_update_in_one_patch_and_move_with_edit() -> None:
    text = patch(
        "*** Add File: n.txt",
        "+one",
        "*** Update File: n.txt",
        "@@",
        "-one",
        "+two",
        "*** Update File: app.txt",
        "*** Move to: moved/app.txt",
        "@@",
        "-line 1",
        "+line 0",
    )
    out = apply_pure({"app.txt": APP}, text)
    assert out["n.txt"] == b"two\n"
    assert out["app.txt"] is None
    assert out["moved/app.txt"] == APP.replace(b"line 1\n", b"line 0\n", 1)


def test_mismatched_context_names_file_hunk_and_expected_lines() -> None:
    text = patch(
        "*** Update File: app.txt",
        "@@",
        "-line 1",
        "+line one",
        "@@",
        " line 5",
        "-line 99",
        "+line ninety-nine",
    )
    with pytest.raises(PatchError) as info:
        plan(parse_patch(text), {"app.txt": APP}.get)
    err = info.value
    assert (err.path, err.hunk) == ("app.txt", 2)
    assert "hunk 2 of 'app.txt' does not match" in str(err)
    assert "    line 5\n    line 99" in str(err)
    assert "No file was changed" in str(err)


def test_hunks_out_of_order_get_a_hint() -> None:
    text = patch("*** Update File: app.txt", "@@", "-line 9", "+9", "@@", "-line 2", "+2")
    with pytest.raises(PatchError, match="appear earlier in the file"):
        plan(parse_patch(text), {"app.txt": APP}.get)


@pytest.mark.parametrize(
    ("body", "files", "message"),
    [
        (["*** Add File: app.txt", "+x"], {"app.txt": APP}, "cannot add 'app.txt': it already"),
        (["*** Update File: nope", "@@", "-a", "+b"], {}, "cannot update 'nope': no such file"),
        (["*** Delete File: nope"], {}, "cannot delete 'nope': no such file"),
        (
            ["*** Update File: app.txt", "*** Move to: b", "@@", "-line 1", "+x"],
            {"app.txt": APP, "b": b""},
            "destination exists",
        ),
        (["*** Update File: bin", "@@", "-a", "+b"], {"bin": b"\xff\xfe\x00"}, "not UTF-8"),
        (["*** Update File: f", "@@ def nowhere():", "-a", "+b"], {"f": b"a\n"}, "was not found"),
    ],
)
def test_plan_errors(body: list[str], files: dict[str, bytes], message: str) -> None:
    with pytest.raises(PatchError, match=message):
        plan(parse_patch(patch(*body)), files.get)


# --- applying on a real local session ------------------------------------------------------


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` (relative path → bytes)."""
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def names(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


async def test_add_update_delete_move(session: SandboxSession, workspace: Path) -> None:
    (workspace / "app.txt").write_bytes(APP)
    (workspace / "old.txt").write_bytes(b"bye\n")
    (workspace / "tool.sh").write_bytes(b"echo 1\n")
    (workspace / "tool.sh").chmod(0o755)
    result = await apply_patch(
        session,
        patch(
            "*** Add File: docs/new.md",
            "+# Title",
            "*** Update File: app.txt",
            "@@",
            " line 1",
            "-line 2",
            "+line two",
            " line 3",
            "@@ line 10",
            "-line 11",
            "+line eleven",
            "*** Delete File: old.txt",
            "*** Update File: tool.sh",
            "*** Move to: bin/tool.sh",
            "@@",
            "-echo 1",
            "+echo 2",
        ),
    )
    assert snapshot(workspace) == {
        "app.txt": APP.replace(b"line 2\n", b"line two\n").replace(b"line 11\n", b"line eleven\n"),
        "bin/tool.sh": b"echo 2\n",
        "docs/new.md": b"# Title\n",
    }
    assert (workspace / "bin/tool.sh").stat().st_mode & 0o777 == 0o755  # moved file keeps mode
    assert result.added == ["docs/new.md"]
    assert result.updated == ["app.txt"]
    assert result.deleted == ["old.txt"]
    assert result.moved == [("tool.sh", "bin/tool.sh")]
    assert result.render().splitlines()[1:] == [
        "A docs/new.md",
        "M app.txt",
        "D old.txt",
        "R tool.sh -> bin/tool.sh",
    ]


async def test_update_keeps_the_file_mode(session: SandboxSession, workspace: Path) -> None:
    (workspace / "run.sh").write_bytes(b"echo old\n")
    (workspace / "run.sh").chmod(0o750)
    await apply_patch(session, patch("*** Update File: run.sh", "@@", "-echo old", "+echo new"))
    assert (workspace / "run.sh").read_bytes() == b"echo new\n"
    assert (workspace / "run.sh").stat().st_mode & 0o777 == 0o750


async def test_mismatch_in_second_file_writes_nothing(
    session: SandboxSession, workspace: Path
) -> None:
    (workspace / "one.txt").write_bytes(b"1\n")
    (workspace / "two.txt").write_bytes(APP)
    before = snapshot(workspace)
    text = patch(
        "*** Update File: one.txt",
        "@@",
        "-1",
        "+one",
        "*** Add File: three.txt",
        "+3",
        "*** Update File: two.txt",
        "@@",
        "-line 1",
        "+line one",
        "@@",
        " line 4",
        "-not there",
        "+x",
    )
    with pytest.raises(PatchError) as info:
        await apply_patch(session, text)
    assert (info.value.path, info.value.hunk) == ("two.txt", 2)
    assert "    line 4\n    not there" in str(info.value)
    assert snapshot(workspace) == before


async def test_add_of_existing_file_fails_and_changes_nothing(
    session: SandboxSession, workspace: Path
) -> None:
    (workspace / "a.txt").write_bytes(b"original\n")
    with pytest.raises(PatchError, match="already exists"):
        await apply_patch(session, patch("*** Add File: b.txt", "+b", "*** Add File: a.txt", "+x"))
    assert snapshot(workspace) == {"a.txt": b"original\n"}


@pytest.mark.parametrize(
    "body",
    [
        ["*** Add File: ../x", "+evil"],
        ["*** Add File: ok.txt", "+fine", "*** Add File: ../x", "+evil"],
        ["*** Update File: a.txt", "*** Move to: ../x", "@@", "-a", "+b"],
        ["*** Update File: a.txt", "@@", "-a", "+b", "*** Add File: {outside}/x", "+evil"],
        ["*** Update File: a.txt", "@@", "-a", "+b", "*** Add File: link/x", "+evil"],
        ["*** Update File: a.txt", "@@", "-a", "+b", "*** Delete File: link/victim"],
    ],
)
async def test_escaping_paths_are_refused_before_any_write(
    session: SandboxSession, workspace: Path, tmp_path: Path, body: list[str]
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim").write_bytes(b"keep\n")
    (workspace / "a.txt").write_bytes(b"a\n")
    (workspace / "link").symlink_to(outside)
    text = patch(*(line.replace("{outside}", str(outside)) for line in body))
    with pytest.raises(SandboxPathError):
        await apply_patch(session, text)
    assert (workspace / "a.txt").read_bytes() == b"a\n"
    assert names(workspace) == ["a.txt", "link"]
    assert snapshot(outside) == {"victim": b"keep\n"}
    assert names(tmp_path) == ["outside", "ws"]


class FlakyFiles:
    """In-memory primitives whose write of ``fail_on`` fails, to test the rollback."""

    def __init__(self, files: dict[str, bytes], fail_on: str) -> None:
        self.files = dict(files)
        self.fail_on = fail_on

    async def read_bytes(self, path: str) -> bytes:
        return self.files[path]

    async def write(self, path: str, data: bytes | str) -> None:
        if path == self.fail_on:
            raise SandboxError("disk full", operation="write", path=path)
        self.files[path] = data.encode() if isinstance(data, str) else data

    async def exists(self, path: str) -> bool:
        return path in self.files or any(p.startswith(path + "/") for p in self.files)

    async def mkdir(self, path: str, parents: bool = True) -> None:
        pass

    async def remove(self, path: str, recursive: bool = False) -> None:
        del self.files[path]

    async def rename(self, src: str, dst: str) -> None:
        self.files[dst] = self.files.pop(src)


async def test_failed_write_rolls_back_earlier_writes() -> None:
    original = {"a.txt": b"a\n", "gone.txt": b"g\n", "m.txt": b"m\n"}
    files = FlakyFiles(original, fail_on="z.txt")
    text = patch(
        "*** Update File: a.txt",
        "@@",
        "-a",
        "+b",
        "*** Delete File: gone.txt",
        "*** Update File: m.txt",
        "*** Move to: sub/m.txt",
        "*** Add File: new.txt",
        "+n",
        "*** Add File: z.txt",
        "+z",
    )
    with pytest.raises(SandboxError, match="disk full"):
        await apply_patch(files, text)
    assert files.files == original


async def test_move_whose_write_fails_after_the_rename_is_undone() -> None:
    files = FlakyFiles({"a.txt": b"a\n"}, fail_on="b.txt")
    text = patch("*** Update File: a.txt", "*** Move to: b.txt", "@@", "-a", "+b")
    with pytest.raises(SandboxError, match="disk full"):
        await apply_patch(files, text)
    assert files.files == {"a.txt": b"a\n"}
