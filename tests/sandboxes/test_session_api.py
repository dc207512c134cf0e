"""The reference-shaped session surface: argv exec, file-like read/write, ls entries, rm,
running(), shutdown(), aclose(), and the reference-named errors."""

from __future__ import annotations

import io
import stat
from pathlib import Path

import pytest

from sandmem._errors import (
    ExecTimeoutError,
    ExecTransportError,
    SandboxError,
    SandboxPathError,
    UserError,
    WorkspaceArchiveReadError,
    WorkspaceArchiveWriteError,
    WorkspaceReadNotFoundError,
    WorkspaceWriteTypeError,
)
from sandmem.sandboxes import (
    EntryKind,
    LocalSnapshotSpec,
    Permissions,
    SandboxSession,
    UnixLocalSandboxClient,
)
from sandmem.sandboxes._session import build_argv

# -- exec ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "shell", "argv"),
    [
        (("echo hi | tr a-z A-Z",), True, ["bash", "-c", "echo hi | tr a-z A-Z"]),
        (("echo", "a b", "$HOME"), True, ["bash", "-c", "echo 'a b' '$HOME'"]),
        (("echo", "a b"), False, ["echo", "a b"]),
        (("ls", Path("sub dir")), False, ["ls", "sub dir"]),
        (("echo", "x"), ["sh", "-c"], ["sh", "-c", "echo x"]),
        ((["printf", "%s", "a b"],), True, ["printf", "%s", "a b"]),  # a list is an argv
    ],
)
def test_build_argv(command: tuple[object, ...], shell: object, argv: list[str]) -> None:
    assert build_argv(command, shell) == argv  # type: ignore[arg-type]


def test_build_argv_refuses_an_empty_command() -> None:
    for empty in ((), ([],)):
        with pytest.raises(UserError, match="empty"):
            build_argv(empty, True)  # type: ignore[arg-type]


async def test_exec_argv_forms(session: SandboxSession) -> None:
    joined = await session.exec("printf", "[%s]", "a b", "c")
    assert joined.stdout == b"[a b][c]" and joined.ok()
    direct = await session.exec("sh", "-c", 'echo "$1"', "sh", "one arg", shell=False)
    assert direct.stdout == b"one arg\n"
    script = await session.exec("echo one; echo two >&2; exit 3")
    assert (script.stdout, script.stderr, script.exit_code) == (b"one\n", b"two\n", 3)
    assert not script.ok()


async def test_exec_timeout_raises_with_the_partial_result(session: SandboxSession) -> None:
    with pytest.raises(ExecTimeoutError) as info:
        await session.exec("echo started; sleep 30", timeout=0.3)
    assert isinstance(info.value, SandboxError)
    assert info.value.result.stdout == b"started\n" and info.value.result.timed_out
    quiet = await session.exec("sleep 30", timeout=0.3, raise_on_timeout=False)
    assert quiet.timed_out and quiet.exit_code == 124


async def test_exec_of_a_missing_program_is_a_transport_error(session: SandboxSession) -> None:
    with pytest.raises(ExecTransportError, match="could not start"):
        await session.exec("no-such-program-sandmem", shell=False)


# -- files --------------------------------------------------------------------------------------


async def test_read_returns_a_file_object(session: SandboxSession) -> None:
    await session.write("notes/a.txt", b"bytes\n")
    handle = await session.read("notes/a.txt")
    assert handle.read() == b"bytes\n"
    assert (await session.read(Path("notes") / "a.txt")).read(3) == b"byt"


@pytest.mark.parametrize(
    "data",
    [b"payload", bytearray(b"payload"), "payload", io.BytesIO(b"payload"), io.StringIO("payload")],
)
async def test_write_accepts_bytes_str_and_file_objects(
    session: SandboxSession, data: object
) -> None:
    await session.write("out.txt", data)
    assert await session.read_bytes("out.txt") == b"payload"


async def test_write_accepts_an_open_host_file(session: SandboxSession, tmp_path: Path) -> None:
    source = tmp_path / "source.bin"
    source.write_bytes(b"\x00\x01 from the host")
    with source.open("rb") as fh:
        await session.write("copy.bin", fh)
    assert await session.read_bytes("copy.bin") == b"\x00\x01 from the host"


async def test_file_errors_have_the_reference_names(session: SandboxSession) -> None:
    with pytest.raises(WorkspaceReadNotFoundError) as missing:
        await session.read("missing.txt")
    assert isinstance(missing.value, FileNotFoundError) and missing.value.path == "missing.txt"
    await session.mkdir("adir")
    with pytest.raises(WorkspaceArchiveReadError):
        await session.read("adir")
    with pytest.raises(WorkspaceWriteTypeError, match="BytesIO") as wrong:
        await session.write("x.txt", 42)
    assert isinstance(wrong.value, UserError)
    await session.write("file", b"")
    with pytest.raises(WorkspaceArchiveWriteError):
        await session.write("file/child.txt", b"under a file")
    with pytest.raises(SandboxPathError):  # path errors keep their own class
        await session.read("../outside.txt")


async def test_ls_returns_entries_like_the_reference(session: SandboxSession) -> None:
    await session.write("sub/b.txt", b"12345")
    await session.mkdir("sub/inner")
    await session.exec("chmod 640 sub/b.txt && ln -s b.txt sub/link")
    entries = await session.ls("sub")
    assert [e.name for e in entries] == ["b.txt", "inner", "link"]
    by_name = {e.name: e for e in entries}
    assert by_name["b.txt"].path == f"{session.root}/sub/b.txt"
    assert by_name["b.txt"].kind is EntryKind.FILE and by_name["b.txt"].size == 5
    assert by_name["b.txt"].permissions == Permissions(owner=6, group=4, other=0)
    assert by_name["inner"].is_dir() and by_name["inner"].permissions.directory
    assert by_name["link"].kind is EntryKind.SYMLINK
    assert by_name["b.txt"].owner.isdigit() and by_name["b.txt"].group.isdigit()
    top = await session.ls()
    assert [e.path for e in top] == [f"{session.root}/sub"]
    assert await session.listdir("sub") == ["b.txt", "inner", "link"]


def test_permissions_round_trip_modes() -> None:
    for mode in (0o755, 0o644, 0o600, 0o000):
        assert Permissions.from_mode(mode).to_mode() == mode
    directory = Permissions.from_mode(stat.S_IFDIR | 0o750)
    assert directory.directory and str(directory) == "drwxr-x---"


async def test_rm(session: SandboxSession) -> None:
    await session.write("a/b/c.txt", b"x")
    await session.write("single.txt", b"x")
    await session.rm("single.txt")
    assert not await session.exists("single.txt")
    with pytest.raises(WorkspaceArchiveWriteError, match="not empty"):
        await session.rm("a")
    await session.rm("a", recursive=True)
    assert not await session.exists("a")
    await session.rm("a", recursive=True)  # recursive: a missing path is fine
    with pytest.raises(WorkspaceArchiveWriteError):
        await session.rm("a")


# -- lifecycle ----------------------------------------------------------------------------------


async def test_running_shutdown_and_aclose(
    client: UnixLocalSandboxClient, snapshot_spec: LocalSnapshotSpec
) -> None:
    session = await client.create(snapshot=snapshot_spec)
    assert not await session.running()
    await session.start()
    assert await session.running()
    hooks: list[str] = []

    async def hook() -> None:
        hooks.append("ran")

    session.register_pre_stop_hook(hook)
    await session.shutdown()  # teardown only: no hooks, no snapshot
    assert not await session.running()
    assert hooks == [] and not snapshot_spec.path_for(session.session_id).exists()

    await session.start()  # the workspace stayed: the session starts again
    await session.write("kept.txt", b"yes")
    await session.aclose()  # stop (hooks, snapshot), then shutdown
    assert not await session.running()
    assert hooks == ["ran"] and snapshot_spec.path_for(session.session_id).exists()
    assert (session.root / "kept.txt").read_bytes() == b"yes"  # the workspace stays
    await session.aclose()  # idempotent
    await client.delete(session)
    assert not session.root.exists()


async def test_async_with_is_aclose(client: UnixLocalSandboxClient) -> None:
    session = await client.create()
    async with session:
        assert await session.running()
    assert not await session.running()
    await client.delete(session)


# -- resume into the state's root ---------------------------------------------------------------


async def test_resume_restores_into_the_states_root(
    client: UnixLocalSandboxClient, snapshot_spec: LocalSnapshotSpec
) -> None:
    session = await client.create(snapshot=snapshot_spec)
    root = session.root  # what code written for the reference holds on to
    async with session:
        await session.write("memories/MEMORY.md", b"from run 1")
    (root / "memories/MEMORY.md").write_bytes(b"changed after the snapshot")
    (root / "stray.txt").write_bytes(b"not in the snapshot")
    resumed = await client.resume(session.state)
    assert resumed.root == root
    assert (root / "memories/MEMORY.md").read_bytes() == b"from run 1"
    assert not (root / "stray.txt").exists()
    async with resumed:
        await resumed.write("memories/MEMORY.md", b"from run 2")
    assert (root / "memories/MEMORY.md").read_bytes() == b"from run 2"
    assert sorted(p.name for p in root.parent.iterdir()) == [root.name]  # no staging left
    await client.delete(session)  # deleting the original leaves no workspace behind
    assert not root.exists()
    await client.delete(resumed)


async def test_resume_recreates_a_deleted_root(
    client: UnixLocalSandboxClient, snapshot_spec: LocalSnapshotSpec
) -> None:
    session = await client.create(snapshot=snapshot_spec)
    async with session:
        await session.write("a.txt", b"kept")
    state = session.state
    await client.delete(session, keep_snapshot=True)
    assert not session.root.exists()
    resumed = await client.resume(state)
    assert resumed.root == session.root
    assert await resumed.read_bytes("a.txt") == b"kept"
    await client.delete(resumed)
    assert not resumed.root.exists() and not snapshot_spec.path_for(state.session_id).exists()


async def test_resume_while_the_root_is_in_use_gets_a_fresh_workspace(
    client: UnixLocalSandboxClient, snapshot_spec: LocalSnapshotSpec
) -> None:
    session = await client.create(snapshot=snapshot_spec)
    async with session:
        await session.write("a.txt", b"v1")
    await session.start()  # running again: its root is in use
    await session.write("a.txt", b"live edit")
    resumed = await client.resume(session.state)
    assert resumed.root != session.root
    assert await resumed.read_bytes("a.txt") == b"v1"
    assert await session.read_bytes("a.txt") == b"live edit"  # untouched
    await client.delete(resumed)
    await client.delete(session)
    assert not resumed.root.exists() and not session.root.exists()
