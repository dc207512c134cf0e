"""What the bubblewrap sandbox keeps a command from doing: network, writes outside the
workspace, reading the host's home, seeing host processes or environment, and running away
with processes, memory or time."""

from __future__ import annotations

import asyncio
import os
import socket
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from sandmem.sandboxes import Manifest, SandboxSession
from sandmem.sandboxes._bubblewrap import BubblewrapSandboxClient
from sandmem.sandboxes._bwrap_host import probe_bwrap
from sandmem.sandboxes._process import TIMEOUT_EXIT_CODE

_PROBE = probe_bwrap()
pytestmark = pytest.mark.skipif(_PROBE.error is not None, reason=str(_PROBE.error))

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
async def sandbox() -> AsyncIterator[SandboxSession]:
    client = BubblewrapSandboxClient()
    session = await client.create()
    async with session:
        yield session
    await client.delete(session)


@pytest.fixture
def tcp_server() -> Iterator[int]:
    """A server listening on the host's 127.0.0.1; yields its port."""
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    try:
        yield server.getsockname()[1]
    finally:
        server.close()


def _host_pids() -> set[int]:
    return {int(name) for name in os.listdir("/proc") if name.isdigit()}


def _running_with(marker: str) -> list[int]:
    """Host pids of live (non-zombie) processes whose command line contains ``marker``."""
    found = []
    for pid in _host_pids():
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker.encode() in cmdline and state != "Z":
            found.append(pid)
    return found


async def test_no_network_unless_asked(tcp_server: int) -> None:
    connect = f"exec 3<>/dev/tcp/127.0.0.1/{tcp_server} && echo connected"
    client = BubblewrapSandboxClient()
    async with await client.create() as session:
        result = await session.exec(connect, timeout=10)
        assert result.exit_code != 0
        assert "connected" not in result.output
        interfaces = (await session.exec("cat /proc/net/dev")).output
        assert [line.split(":")[0].strip() for line in interfaces.splitlines()[2:]] == ["lo"]
    async with await BubblewrapSandboxClient(network=True).create() as shared:
        assert (await shared.exec(connect, timeout=10)).output == "connected\n"


async def test_writes_only_to_workspace_and_private_tmp(sandbox: SandboxSession) -> None:
    name = f"sandmem-probe-{uuid.uuid4().hex}"
    targets = ["/etc", "/usr", "/usr/local", str(Path.home()), str(REPO), "/", "/var"]
    script = "".join(f'echo x > {d}/{name} 2>/dev/null && echo "wrote {d}"; ' for d in targets) + (
        f"echo x > /tmp/{name} && echo x > /workspace/{name} && cat /tmp/{name}"
    )
    result = await sandbox.exec(script)
    assert result.exit_code == 0, result.output
    assert result.stdout == b"x\n"  # no "wrote ..." line: every write outside was refused
    for directory in [*targets, "/tmp"]:
        assert not (Path(directory) / name).exists(), directory
    assert (sandbox.root / name).read_text() == "x\n"
    # /tmp is private to each command
    assert (await sandbox.exec(f"test -e /tmp/{name}")).exit_code == 1


async def test_host_home_is_not_readable(sandbox: SandboxSession) -> None:
    secret = Path.home() / f".sandmem-test-secret-{uuid.uuid4().hex}"
    secret.write_text("top secret\n")
    try:
        result = await sandbox.exec(
            f"cat {secret}; ls -a {Path.home()}; test -e {REPO}/pyproject.toml && echo repo"
        )
        assert "top secret" not in result.output
        assert f"{secret}: No such file or directory" in result.output
        assert f"cannot access '{Path.home()}'" in result.output
        assert result.stdout == b""  # nothing listed, the repository is not there either
    finally:
        secret.unlink()


async def test_sees_only_its_own_processes(sandbox: SandboxSession) -> None:
    result = await sandbox.exec("ls /proc; echo; tr '\\0' ' ' < /proc/1/cmdline")
    listing, init = result.stdout.decode().split("\n\n")
    pids = {int(name) for name in listing.split() if name.isdigit()}
    assert len(pids) <= 5, pids  # bwrap's init, bash, ls (and pids being reaped)
    assert os.getpid() not in pids
    assert init.split()[0].endswith("bwrap")


async def test_host_environment_is_absent(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SANDMEM_TEST_SECRET", "hunter2-host")
    client = BubblewrapSandboxClient(env={"CLIENT_TOKEN": "client-value-7"})
    session = await client.create(manifest=Manifest(env={"FROM_MANIFEST": "m"}))
    async with session:
        result = await session.exec("env", env={"FROM_CALL": "c"})
        argv = session._command_argv(["env"], session.root)  # type: ignore[attr-defined]
    env = dict(line.split("=", 1) for line in result.stdout.decode().splitlines())
    assert "SANDMEM_TEST_SECRET" not in env
    assert "hunter2-host" not in result.output
    assert env["HOME"] == "/workspace"
    assert env["PWD"] == "/workspace"
    assert env["PATH"].startswith("/usr/local/sbin:")
    assert (env["CLIENT_TOKEN"], env["FROM_MANIFEST"], env["FROM_CALL"]) == (
        "client-value-7",
        "m",
        "c",
    )
    assert not any("client-value-7" in part for part in argv)  # not visible in host `ps`


async def test_fork_bomb_is_contained() -> None:
    client = BubblewrapSandboxClient(max_processes=50)
    session = await client.create()
    marker = f"sandmem-bomb-{uuid.uuid4().hex[:12]}"  # in the command line of every fork
    peak = 0
    stop = threading.Event()

    def watch() -> None:
        nonlocal peak
        while not stop.is_set():
            peak = max(peak, len(_running_with(marker)))
            time.sleep(0.01)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        # the bomb keeps forking in the background until the timeout kills the sandbox
        result = await session.exec(
            f":(){{ :|:& }};:; sleep 30 # {marker}", timeout=2, raise_on_timeout=False
        )
    finally:
        stop.set()
        watcher.join()
    assert result.timed_out
    assert "Resource temporarily unavailable" in result.output  # forks were refused
    assert 10 < peak <= 50 + 2, peak  # + bwrap and its init, whose argv holds the marker
    for _ in range(60):
        if not _running_with(marker):
            break
        await asyncio.sleep(0.05)
    assert _running_with(marker) == []
    # the limit is per command: the next one runs normally
    assert (await session.exec("echo ok")).output == "ok\n"
    await client.delete(session)


_FORK_40 = """
import os, time
children = []
try:
    for _ in range(40):
        pid = os.fork()
        if pid == 0:
            time.sleep(5)
            os._exit(0)
        children.append(pid)
except OSError as exc:
    print("refused", exc.errno)
print(len(children))
for pid in children:
    os.kill(pid, 9)
"""


async def test_process_limit_refuses_forks_beyond_it() -> None:
    client = BubblewrapSandboxClient(max_processes=20)
    async with await client.create() as session:
        result = await session.exec(["python3", "-c", _FORK_40], timeout=10)
    refused, count = result.stdout.decode().split("\n")[:2]
    assert refused == "refused 11"  # EAGAIN
    assert 10 <= int(count) < 20, result.output


async def test_memory_hog_is_stopped() -> None:
    client = BubblewrapSandboxClient(memory_limit_mb=256)
    async with await client.create() as session:
        small = await session.exec(["python3", "-c", "b = bytearray(50 * 1024**2)"])
        assert small.exit_code == 0, small.output
        hog = await session.exec(["python3", "-c", "b = bytearray(2 * 1024**3)"], timeout=20)
    assert hog.exit_code != 0
    assert "MemoryError" in hog.output


async def test_timeout_kills_the_whole_tree(sandbox: SandboxSession) -> None:
    marker = f"sandmem-tree-{uuid.uuid4().hex[:12]}"
    result = await sandbox.exec(
        f"(exec -a {marker} sleep 60) & "
        f"setsid bash -c 'exec -a {marker} sleep 60' & "
        f"nohup bash -c 'exec -a {marker} sleep 60' >/dev/null 2>&1 & "
        "sleep 60",
        timeout=1,
        raise_on_timeout=False,
    )
    assert result.timed_out and result.exit_code == TIMEOUT_EXIT_CODE
    for _ in range(60):  # the kernel tears the pid namespace down asynchronously
        if not _running_with(marker):
            break
        await asyncio.sleep(0.05)
    assert _running_with(marker) == []


async def test_background_processes_end_with_the_command(sandbox: SandboxSession) -> None:
    marker = f"sandmem-bg-{uuid.uuid4().hex[:12]}"
    result = await sandbox.exec(f"(exec -a {marker} sleep 60) >/dev/null 2>&1 & echo started")
    assert result.output == "started\n" and not result.timed_out
    await asyncio.sleep(0.2)
    assert _running_with(marker) == []
