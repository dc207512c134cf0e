"""exec: exit codes, environment, timeouts that kill the process group, bounded output."""

from __future__ import annotations

import asyncio
import functools
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from sandmem._errors import ExecTimeoutError, SandboxError, UserError
from sandmem.sandboxes import Manifest, SandboxSession, UnixLocalSandboxClient
from sandmem.sandboxes._process import TIMEOUT_EXIT_CODE

#: how long a call that must not hang may take before the test fails (a guard, not a bound)
HANG_GUARD_S = 60.0


def _alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie, which no init may reap in a container, is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


async def _wait_gone(pid: int, within: float = 3.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        await asyncio.sleep(0.02)
    return False


async def test_exit_code_stdout_stderr_and_cwd(session: SandboxSession) -> None:
    result = await session.exec("pwd; echo oops >&2; exit 3")
    assert result.exit_code == 3
    assert result.stdout == f"{session.root}\n".encode()
    assert result.stderr == b"oops\n"
    assert result.output == f"{session.root}\noops\n"
    assert not result.timed_out
    assert not result.truncated


async def test_argv_runs_without_a_shell_and_workdir_is_used(session: SandboxSession) -> None:
    await session.mkdir("sub/dir")
    result = await session.exec(["sh", "-c", 'pwd; echo "$0"', "$HOME"], workdir="sub/dir")
    assert result.stdout == f"{session.root}/sub/dir\n$HOME\n".encode()


async def test_bad_workdir_missing_program_and_empty_argv(session: SandboxSession) -> None:
    await session.write("file.txt", b"x")
    with pytest.raises(SandboxError, match="not a directory"):
        await session.exec("true", workdir="file.txt")
    with pytest.raises(SandboxError, match="could not start") as info:
        await session.exec(["definitely-not-a-program-xyz"])
    assert info.value.command == "definitely-not-a-program-xyz"
    with pytest.raises(UserError):
        await session.exec([])
    with pytest.raises(UserError):
        await session.exec("true", timeout=0)


async def test_env_layers_client_then_manifest_then_call() -> None:
    client = UnixLocalSandboxClient(env={"A": "client", "B": "client", "C": "client"})
    session = await client.create(manifest=Manifest(env={"B": "manifest", "C": "manifest"}))
    async with session:
        result = await session.exec('echo "$A $B $C"', env={"C": "call"})
    await client.delete(session)
    assert result.stdout == b"client manifest call\n"


async def test_timeout_kills_the_process_group(session: SandboxSession) -> None:
    # the command would run for ten minutes: returning within the guard is the timeout's doing
    with pytest.raises(ExecTimeoutError) as info:
        await asyncio.wait_for(
            session.exec("sleep 600 & echo $! > child.pid; wait", timeout=0.5), HANG_GUARD_S
        )
    assert info.value.timeout_s == 0.5 and isinstance(info.value, SandboxError)
    result = info.value.result
    assert result.timed_out
    assert result.exit_code == TIMEOUT_EXIT_CODE == 124
    child = int((await session.read_bytes("child.pid")).decode())
    assert await _wait_gone(child), f"child {child} survived the timeout"


async def test_cancelling_exec_kills_the_process_group(session: SandboxSession) -> None:
    task = asyncio.create_task(session.exec("sleep 30 & echo $! > child.pid; wait"))
    for _ in range(250):
        if await session.exists("child.pid") and await session.read_bytes("child.pid"):
            break
        await asyncio.sleep(0.02)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    child = int((await session.read_bytes("child.pid")).decode())
    assert await _wait_gone(child)


@pytest.mark.parametrize("how", ["cancelled", "timed out", "exited"])
async def test_exec_closes_its_transport_before_returning(
    tmp_path: Path, how: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A transport still open when exec returns is closed only by the loop's later callbacks;
    when the loop ends first, the garbage collector warns inside whatever code runs next (CI
    once failed an unrelated test that way, after a cancelled exec)."""
    from sandmem.sandboxes._process import run_command

    loop = asyncio.get_running_loop()
    transports: list[asyncio.BaseTransport] = []
    real_subprocess_exec = loop.subprocess_exec

    async def spy(*args: Any, **kwargs: Any) -> tuple[asyncio.BaseTransport, Any]:
        transport, protocol = await real_subprocess_exec(*args, **kwargs)
        transports.append(transport)
        return transport, protocol

    monkeypatch.setattr(loop, "subprocess_exec", spy)
    run = functools.partial(
        run_command, cwd=tmp_path, env={"PATH": os.defpath}, max_output_bytes=1024
    )
    if how == "cancelled":
        task = asyncio.create_task(run(["sleep", "30"], time_limit=60))
        for _ in range(500):  # cancel once the command runs, however slow the machine
            if transports:
                break
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    elif how == "timed out":
        assert (await run(["sleep", "30"], time_limit=0.2)).timed_out
    else:
        assert (await run(["true"], time_limit=10)).exit_code == 0
    assert [t.is_closing() for t in transports] == [True]


async def test_background_process_holding_the_pipe_does_not_block(session: SandboxSession) -> None:
    # the background process holds the output pipe for ten minutes; the guard only turns a
    # command that waits for it into a failure
    result = await asyncio.wait_for(session.exec("sleep 600 & echo $!"), HANG_GUARD_S)
    assert result.exit_code == 0
    pid = int(result.stdout.decode())
    try:
        assert _alive(pid)  # background processes outlive the command (local backend)
    finally:
        os.kill(pid, 9)


async def test_output_is_truncated_keeping_head_and_tail(session: SandboxSession) -> None:
    client = UnixLocalSandboxClient(max_output_bytes=1000)
    small = await client.create()
    result = await small.exec("seq 1 100000; seq 1 3 >&2")
    await client.delete(small)
    assert result.truncated
    assert result.stdout.startswith(b"1\n2\n3\n")
    assert result.stdout.endswith(b"99999\n100000\n")
    assert b"bytes omitted" in result.stdout
    assert len(result.stdout) < 1000 + 200
    assert result.stderr == b"1\n2\n3\n"


RSS_SCRIPT = textwrap.dedent(
    """
    import asyncio, json, resource
    from sandmem.sandboxes import UnixLocalSandboxClient

    def peak_kib():
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

    async def main():
        client = UnixLocalSandboxClient()
        session = await client.create()
        async with session:
            await session.exec("head -c 100000 /dev/zero")  # warm up
            before = peak_kib()
            result = await session.exec("head -c 52428800 /dev/zero", timeout=60)
            after = peak_kib()
        await client.delete(session)
        print(json.dumps({"growth_kib": after - before, "kept": len(result.stdout),
                          "truncated": result.truncated}))

    asyncio.run(main())
    """
)

#: bound on peak RSS growth while a command writes 50 MB (capture keeps 2 MiB per stream)
RSS_GROWTH_BOUND_KIB = 16 * 1024


def test_50mb_of_output_keeps_memory_bounded(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", RSS_SCRIPT],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "TMPDIR": str(tmp_path)},
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["truncated"]
    assert report["kept"] < 2 * 1024 * 1024 + 200
    assert report["growth_kib"] < RSS_GROWTH_BOUND_KIB, report
