"""The host-filesystem layer under attack: a directory swapped for a symlink while files are
written into it, special files where regular files are expected, symlink loops, and the
``no_symlinks()`` mode of the memory pipeline. Every test that could hang has a timeout."""

from __future__ import annotations

import asyncio
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sandmem._errors import SandboxError, SandboxPathError
from sandmem.sandboxes import SandboxSession, _fdwalk, _hostfs
from sandmem.sandboxes._apply_patch import apply_patch
from sandmem.sandboxes._bwrap_host import probe_bwrap
from sandmem.sandboxes._paths import no_symlinks

#: every call that used to block on a FIFO must now answer within this many seconds
HANG_LIMIT_S = 10.0


#: a tight loop (its own process, so truly parallel) that keeps replacing the directory
#: ``d`` with a symlink to ``argv[1]`` and back, for ``argv[2]`` seconds
SWAPPER = """
import os, shutil, sys, time
target, end = sys.argv[1], time.monotonic() + float(sys.argv[2])
os.makedirs("d", exist_ok=True)
os.symlink(target, "d.lnk")
open("ready", "w").close()
def hold():
    stop = time.perf_counter() + 0.00001
    while time.perf_counter() < stop:
        pass
while time.monotonic() < end:
    try:
        os.rename("d", "d.real"); os.rename("d.lnk", "d")  # d is the symlink
        hold()
        os.rename("d", "d.lnk"); os.rename("d.real", "d")  # d is the directory again
        hold()
    except OSError:  # a write re-created d meanwhile: start over
        try:
            for name in ("d", "d.lnk"):
                if os.path.islink(name):
                    os.unlink(name)
            if os.path.isdir("d"):
                shutil.rmtree("d.real", ignore_errors=True)
            else:
                os.rename("d.real", "d")
            os.symlink(target, "d.lnk")
        except OSError:
            os.makedirs("d", exist_ok=True)
            if not os.path.lexists("d.lnk"):
                os.symlink(target, "d.lnk")
print("swapped until the end")
"""


def _wait_for(marker: Path) -> None:
    deadline = time.monotonic() + HANG_LIMIT_S
    while not marker.exists():
        assert time.monotonic() < deadline, "the swapper did not start"
        time.sleep(0.01)


def test_a_directory_swapped_for_a_symlink_never_redirects_a_write(tmp_path: Path) -> None:
    root = (tmp_path / "ws").resolve()
    root.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (root / "d").mkdir()
    swapper = subprocess.Popen([sys.executable, "-c", SWAPPER, str(outside), "30"], cwd=root)
    landed = refused = 0
    try:
        _wait_for(root / "ready")
        for i in range(3000):  # a bounded number of attempts
            for op in (_hostfs.write_atomic, _hostfs.append):
                try:
                    op(root, f"d/x{i}.txt", b"data")
                    landed += 1
                except SandboxError:
                    refused += 1
            try:
                _hostfs.mkdir(root, f"d/sub{i}")
            except SandboxError:
                refused += 1
            if i >= 300 and refused >= 10:
                break
    finally:
        swapper.kill()
        swapper.wait(timeout=HANG_LIMIT_S)
    assert list(outside.iterdir()) == []
    assert landed > 0 and refused > 0  # the race really ran both ways


@pytest.mark.skipif(probe_bwrap().error is not None, reason="bubblewrap cannot run here")
async def test_bwrap_command_racing_apply_patch_cannot_write_outside(tmp_path: Path) -> None:
    """Finding 1: a sandboxed command swaps ``d`` for a symlink to a host directory while
    many apply_patch calls add ``d/xN.txt`` concurrently (as parallel tool calls do)."""
    from sandmem.sandboxes._bubblewrap import BubblewrapSandboxClient

    outside = tmp_path / "host_dir"
    outside.mkdir()
    client = BubblewrapSandboxClient()
    session = await client.create()
    swap = shlex.join(["python3", "-c", SWAPPER, str(outside), "2"])
    async with session:
        await session.mkdir("d")
        command = asyncio.create_task(session.exec(swap, timeout=20))
        await asyncio.to_thread(_wait_for, session.root / "ready")

        async def add(i: int) -> None:
            patch = f"*** Begin Patch\n*** Add File: d/x{i}.txt\n+hi\n*** End Patch\n"
            try:
                await apply_patch(session, patch)
            except Exception:
                pass

        for batch in range(20):  # 20 turns of 30 parallel tool calls
            await asyncio.wait_for(
                asyncio.gather(*(add(batch * 30 + i) for i in range(30))), HANG_LIMIT_S
            )
        result = await asyncio.wait_for(command, 30)
    await client.delete(session)
    assert "swapped until the end" in result.output, result.output
    assert list(outside.iterdir()) == []


@pytest.mark.parametrize("operation", ["write", "append", "mkdir", "lock"])
def test_a_swap_at_the_worst_moment_cannot_redirect(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, operation: str
) -> None:
    """The deterministic form of the race: ``d`` is swapped for a symlink to a host directory
    right after the walk has opened it, before the file is created. The operation goes on in
    the directory that was opened (now ``d.real``), never in the symlink's target."""
    root = (tmp_path / "ws").resolve()
    (root / "d").mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    real_open_dir = _fdwalk._open_dir

    def open_then_swap(name: str, dir_fd: int, create: bool) -> int:
        fd = real_open_dir(name, dir_fd, create)
        if name == "d" and not (root / "d.real").exists():
            os.rename(root / "d", root / "d.real")
            os.symlink(outside, root / "d")
        return fd

    monkeypatch.setattr(_fdwalk, "_open_dir", open_then_swap)
    if operation == "write":
        _hostfs.write_atomic(root, "d/x.txt", b"data")
    elif operation == "append":
        _hostfs.append(root, "d/x.txt", b"data")
    elif operation == "mkdir":
        _hostfs.mkdir(root, "d/x.txt")
    else:
        os.close(_hostfs.open_lock_file(root, "d/x.txt"))
    assert list(outside.iterdir()) == []
    assert (root / "d.real" / "x.txt").exists()


def test_symlinks_inside_the_workspace_are_followed_but_never_out(tmp_path: Path) -> None:
    root = (tmp_path / "ws").resolve()
    (root / "a" / "b").mkdir(parents=True)
    (root / "a" / "b" / "f.txt").write_bytes(b"inner")
    (root / "link").symlink_to("a/b")
    (root / "up").symlink_to("a/b/../..")  # the workspace root itself
    (root / "a" / "b" / "esc").symlink_to("../../..")  # one level above the root
    (root / "loop").symlink_to("loop")
    assert _hostfs.read(root, "link/f.txt") == b"inner"
    assert _hostfs.read(root, "up/a/b/f.txt") == b"inner"
    with pytest.raises(SandboxPathError, match="outside"):
        _hostfs.read(root, "a/b/esc/x")
    with pytest.raises(SandboxPathError, match="outside"):
        _hostfs.ls(root, "a/b/esc")
    assert _hostfs.exists(root, "loop") is False
    with pytest.raises(SandboxError, match="symlinks"):
        _hostfs.read(root, "loop")


def test_dotdot_after_a_symlink_climbs_from_its_target(tmp_path: Path) -> None:
    """As the kernel resolves ``l/..``: from the directory the link points to, so a link to
    the root followed by ``..`` is outside, even though ``l/..`` looks lexically inside."""
    root = (tmp_path / "ws").resolve()
    (root / "a").mkdir(parents=True)
    (root / "a" / "b").symlink_to("..")  # a/b is the root
    (root / "c").symlink_to("a/b/..")  # the root's parent
    with pytest.raises(SandboxPathError, match="outside"):
        _hostfs.ls(root, "c")
    with pytest.raises(SandboxPathError, match="outside"):
        _hostfs.write_atomic(root, "c/pwned.txt", b"x")
    assert not (tmp_path / "pwned.txt").exists()


def test_no_symlinks_mode_follows_nothing(tmp_path: Path) -> None:
    root = (tmp_path / "ws").resolve()
    (root / "src").mkdir(parents=True)
    (root / "src" / "app.py").write_bytes(b"app")
    (root / "README.md").write_bytes(b"readme")
    (root / "memories" / "skills").mkdir(parents=True)
    (root / "memories" / "skills" / "evil").symlink_to("../../src")
    (root / "memories" / "MEMORY.md").symlink_to("../README.md")
    with no_symlinks():
        with pytest.raises(SandboxPathError, match="symlink"):
            _hostfs.write_atomic(root, "memories/skills/evil/app.py", b"pwned")
        with pytest.raises(SandboxError, match="symlink"):
            _hostfs.read(root, "memories/MEMORY.md")
        assert _hostfs.exists(root, "memories/MEMORY.md") is False
        assert _hostfs.is_dir(root, "memories/skills/evil") is False
        assert _hostfs.read_many(root, ["memories/MEMORY.md"]) == {"memories/MEMORY.md": None}
        _hostfs.write_atomic(root, "memories/MEMORY.md", b"# memory\n")  # replaces the link
    assert (root / "src" / "app.py").read_bytes() == b"app"
    assert (root / "README.md").read_bytes() == b"readme"
    assert not (root / "memories" / "MEMORY.md").is_symlink()
    # outside the mode, inner links are followed as before
    assert _hostfs.read(root, "memories/skills/evil/app.py") == b"app"


# -- special files ------------------------------------------------------------------------------


@pytest.fixture
async def fifo_session(session: SandboxSession) -> SandboxSession:
    os.mkfifo(session.root / "pipe")
    return session


@pytest.mark.parametrize(
    "call",
    [
        lambda s: s.read("pipe"),
        lambda s: s.append("pipe", b"x"),
        lambda s: s.read_many(["pipe"]),
    ],
    ids=["read", "append", "read_many"],
)
async def test_a_fifo_is_refused_at_once(fifo_session: SandboxSession, call: object) -> None:
    with pytest.raises(SandboxError, match="FIFO"):
        await asyncio.wait_for(call(fifo_session), HANG_LIMIT_S)  # type: ignore[operator]


async def test_a_fifo_lock_file_is_refused(fifo_session: SandboxSession) -> None:
    async def take() -> None:
        async with fifo_session.lock("pipe", timeout=1):
            pass

    with pytest.raises(SandboxError, match="FIFO"):
        await asyncio.wait_for(take(), HANG_LIMIT_S)


async def test_a_fifo_is_replaced_by_a_write_and_skipped_by_strict_reads(
    fifo_session: SandboxSession,
) -> None:
    with no_symlinks():
        found = await asyncio.wait_for(fifo_session.read_many(["pipe"]), HANG_LIMIT_S)
    assert found == {"pipe": None}
    await asyncio.wait_for(fifo_session.write("pipe", b"now a file"), HANG_LIMIT_S)
    assert await fifo_session.read_bytes("pipe") == b"now a file"


def test_a_unix_socket_is_refused(tmp_path: Path) -> None:
    import socket

    root = (tmp_path / "ws").resolve()
    root.mkdir()
    server = socket.socket(socket.AF_UNIX)
    try:
        server.bind(str(root / "sock"))
        server.listen()
        with pytest.raises(SandboxError, match="socket"):
            _hostfs.read(root, "sock")
        with pytest.raises(SandboxError, match="socket"):
            _hostfs.append(root, "sock", b"x")
    finally:
        server.close()


def test_deep_trees_are_walked_and_removed_without_recursion(tmp_path: Path) -> None:
    root = (tmp_path / "ws").resolve()
    root.mkdir()
    deep = "/".join(["d"] * 1200)
    _hostfs.mkdir(root, deep)
    _hostfs.write_atomic(root, deep + "/f", b"x")
    assert sum(1 for _ in _hostfs.walk_tree(root)) == 1201
    _hostfs.remove(root, "d", recursive=True)
    assert os.listdir(root) == []
