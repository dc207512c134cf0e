"""File primitives: semantics, atomic writes, errors, and the cross-process lock."""

from __future__ import annotations

import asyncio
import os
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from sandmem._errors import SandboxError
from sandmem.sandboxes import SandboxSession
from sandmem.sandboxes._hostfs import (
    STALE_WRITE_TEMP_S,
    _temp_name,
    is_stale_write_temp,
    write_atomic,
)


async def test_write_read_append_ls_exists(session: SandboxSession) -> None:
    await session.write("notes/a.md", "héllo")  # parents are created
    await session.append("notes/a.md", b" world")
    await session.append("notes/new.log", "line\n")
    assert await session.read_bytes("notes/a.md") == "héllo world".encode()
    assert await session.listdir("notes") == ["a.md", "new.log"]
    assert await session.listdir() == ["notes"]
    assert await session.exists("notes/a.md")
    assert not await session.exists("notes/missing")
    assert await session.is_dir("notes")
    assert not await session.is_dir("notes/a.md")
    assert not await session.is_dir("notes/missing")
    assert await session.read_bytes(str(session.root / "notes/new.log")) == b"line\n"


async def test_mkdir_remove_rename(session: SandboxSession) -> None:
    await session.mkdir("a/b/c")
    await session.mkdir("a/b/c")  # existing directory: fine
    with pytest.raises(SandboxError):
        await session.mkdir("x/y", parents=False)
    await session.write("a/b/c/f.txt", b"1")
    with pytest.raises(SandboxError, match="recursive=True") as info:
        await session.remove("a")
    assert info.value.operation == "remove"
    assert info.value.path == "a"
    await session.rename("a/b/c/f.txt", "moved/f.txt")
    assert await session.read_bytes("moved/f.txt") == b"1"
    await session.remove("a", recursive=True)
    await session.remove("moved/f.txt")
    await session.remove("moved")
    assert await session.listdir() == []
    with pytest.raises(SandboxError, match="workspace root"):
        await session.remove(".", recursive=True)


async def test_errors_name_operation_and_path(session: SandboxSession) -> None:
    with pytest.raises(SandboxError, match="no such file") as info:
        await session.read_bytes("missing.txt")
    assert (info.value.operation, info.value.path) == ("read", "missing.txt")
    assert isinstance(info.value.__cause__, FileNotFoundError)
    await session.mkdir("d")
    with pytest.raises(SandboxError, match="is a directory"):
        await session.read_bytes("d")
    with pytest.raises(SandboxError):
        await session.listdir("missing")


async def test_atomic_write_keeps_mode_follows_inner_links_leaves_no_temp(
    session: SandboxSession,
) -> None:
    await session.write("run.sh", b"v1")
    os.chmod(session.root / "run.sh", 0o751)
    os.symlink("run.sh", session.root / "link")
    for i in range(20):
        await session.write("link", f"v{i}".encode())
    assert (session.root / "link").is_symlink()
    assert await session.read_bytes("run.sh") == b"v19"
    assert stat.S_IMODE((session.root / "run.sh").stat().st_mode) == 0o751
    assert await session.listdir() == ["link", "run.sh"]


async def test_failed_write_keeps_old_content_and_no_temp(
    session: SandboxSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    await session.write("memory.md", b"old")

    def broken_replace(src: object, dst: object, **_: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(SandboxError, match="no space left"):
        await session.write("memory.md", b"new")
    monkeypatch.undo()
    assert await session.read_bytes("memory.md") == b"old"
    assert await session.listdir() == ["memory.md"]


HOLDER = textwrap.dedent(
    """
    import fcntl, pathlib, sys, time
    fd = open(sys.argv[1], "a")
    fcntl.flock(fd, fcntl.LOCK_EX)
    print("locked", flush=True)
    time.sleep(float(sys.argv[2]))
    pathlib.Path(sys.argv[3]).write_text("released")  # written before it lets go
    fcntl.flock(fd, fcntl.LOCK_UN)
    """
)

PROBE = textwrap.dedent(
    """
    import fcntl, sys
    fd = open(sys.argv[1], "a")
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        sys.exit(1)
    """
)


def _probe(path: Path) -> int:
    return subprocess.run([sys.executable, "-c", PROBE, str(path)], timeout=10).returncode


async def test_lock_excludes_another_process(session: SandboxSession) -> None:
    lock_file = session.root / "memories" / ".lock"
    async with session.lock("memories/.lock"):
        assert await asyncio.to_thread(_probe, lock_file) == 1
    assert await asyncio.to_thread(_probe, lock_file) == 0

    released = session.root / "released"
    holder = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        HOLDER,
        str(lock_file),
        "1.0",
        str(released),
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        assert holder.stdout is not None
        assert await asyncio.wait_for(holder.stdout.readline(), 10) == b"locked\n"
        with pytest.raises(SandboxError, match="still held") as info:
            async with session.lock("memories/.lock", timeout=0.2):
                pass
        assert info.value.operation == "lock"
        async with session.lock("memories/.lock", timeout=10):
            assert released.exists()  # it waited for the holder to let go
    finally:
        if holder.returncode is None:
            holder.kill()
        await holder.wait()


async def test_lock_excludes_another_task_without_blocking_the_loop(
    session: SandboxSession,
) -> None:
    events: list[str] = []

    async def worker(name: str) -> None:
        async with session.lock("state.lock"):
            events.append(f"{name} in")
            await asyncio.sleep(0.1)
            events.append(f"{name} out")

    await asyncio.gather(worker("a"), worker("b"))
    assert events in (["a in", "a out", "b in", "b out"], ["b in", "b out", "a in", "a out"])


async def test_tasks_of_one_process_queue_on_an_in_process_lock_in_order(
    session: SandboxSession,
) -> None:
    """Waiters in this process queue on an asyncio lock per path (first come, first served)
    in front of the flock, so none of them polls the file lock; other paths are not held up."""
    inside: list[int] = []
    order: list[int] = []

    held = asyncio.Event()
    release = asyncio.Event()

    async def worker(n: int) -> None:
        async with session.lock("sessions/.lock"):
            inside.append(n)
            assert len(inside) == 1, "two holders at once"
            order.append(n)
            if n == 0:
                held.set()
                await release.wait()
            await asyncio.sleep(0)
            inside.remove(n)

    first = asyncio.create_task(worker(0))
    await held.wait()  # worker 0 holds the lock; the rest queue up behind it
    rest = [asyncio.create_task(worker(n)) for n in range(1, 16)]
    await asyncio.sleep(0.01)
    async with session.lock("memories/.lock", timeout=1):  # another path is free meanwhile
        pass
    release.set()
    await asyncio.gather(first, *rest)
    assert order == list(range(16))


async def test_a_lock_held_in_this_process_times_out_with_a_sandbox_error(
    session: SandboxSession,
) -> None:
    async with session.lock("sessions/.lock"):
        with pytest.raises(SandboxError, match="still held") as info:
            async with session.lock("sessions/./.lock", timeout=0.1):  # the same path
                pass
    assert info.value.operation == "lock"
    async with session.lock("sessions/.lock", timeout=1):  # released by the holder and the
        pass  # timed-out waiter alike


async def test_read_many_reads_a_batch_and_maps_missing_to_none(tmp_path: Path) -> None:
    from sandmem import SandboxPathError
    from sandmem.sandboxes import Manifest, UnixLocalSandboxClient

    session = await UnixLocalSandboxClient().create(manifest=Manifest(root=tmp_path / "ws"))
    async with session:
        await session.write("a.txt", b"A")
        await session.write("d/b.txt", b"B")
        found = await session.read_many(["a.txt", "missing.txt", "d/b.txt"])
        assert found == {"a.txt": b"A", "missing.txt": None, "d/b.txt": b"B"}
        with pytest.raises(SandboxPathError):
            await session.read_many(["a.txt", "../outside"])


def test_a_write_temp_is_stale_only_when_its_writer_is_gone_or_it_is_old(
    tmp_path: Path, dead_pid: int
) -> None:
    now = time.time()
    mine = _temp_name("generation_state.json")
    assert mine.startswith(f".generation_state.json.{os.getpid()}.")
    assert not is_stale_write_temp(mine)  # a write in flight in this process
    assert is_stale_write_temp(mine, now=now + STALE_WRITE_TEMP_S + 1)  # pid reused, or hung
    fresh = f"{int(now):x}.0123abcd"
    assert is_stale_write_temp(f".MEMORY.md.{dead_pid}.{fresh}.tmp")  # killed writer
    assert not is_stale_write_temp(f".MEMORY.md.1.{fresh}.tmp")  # pid 1 is alive
    for name in ("MEMORY.md", ".MEMORY.md.tmp", "notes.tmp", f".MEMORY.md.1.{fresh.upper()}.tmp"):
        assert not is_stale_write_temp(name, now=now + 10**6)
    write_atomic(tmp_path, "a/b.txt", b"x")
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == ["b.txt"]


async def test_stat_many_reports_size_and_mtime_without_reading(session: SandboxSession) -> None:
    from sandmem import SandboxPathError
    from sandmem.sandboxes._session import FileStat

    await session.write("a.txt", b"12345")
    await session.mkdir("d")
    os.utime(session.root / "a.txt", ns=(1_000_000_123, 2_000_000_456))
    found = await session.stat_many(["a.txt", "missing.txt", "d"])
    assert found == {"a.txt": FileStat(5, 2_000_000_456), "missing.txt": None, "d": None}
    # the default built on read_many, for backends without their own: the size only
    default = await SandboxSession.stat_many(session, ["a.txt", "missing.txt"])
    assert default == {"a.txt": FileStat(5), "missing.txt": None}
    with pytest.raises(SandboxPathError):
        await session.stat_many(["../outside"])
