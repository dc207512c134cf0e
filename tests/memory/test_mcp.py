"""``sandmem mcp``: the memory server driven by the ``mcp`` SDK's own client, over stdio (a
subprocess running ``sandmem mcp``) and Streamable HTTP, on both protocol eras (the
handshake of 2025-11-25 and the per-request envelope of 2026-07-28)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import warnings
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

mcp = pytest.importorskip("mcp")

from mcp import ClientSession, StdioServerParameters, stdio_client  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402
from mcp.shared._httpx_utils import create_mcp_http_client  # noqa: E402

from sandmem.sandboxes import Manifest, UnixLocalSandboxClient  # noqa: E402

SANDMEM = str(Path(sys.executable).with_name("sandmem"))
SECRET = "sk-proj-" + "Q7x" * 16
NOTE = "Always run the tests with make test-fast before every commit."
TOKEN = "t0ken-" + "a" * 32
HTTP_FLAGS = ("--token-env", "MCP_TEST_TOKEN", "--lock-timeout", "1")


def _text(result: Any) -> str:
    return "\n".join(block.text for block in result.content)


def _client_info() -> Any:
    return mcp.types.Implementation(name="sandmem-test", version="9.9")


@asynccontextmanager
async def stdio_session(workspace: Path, *args: str) -> AsyncIterator[ClientSession]:
    params = StdioServerParameters(
        command=SANDMEM,
        args=["mcp", "--workspace", str(workspace), *args],
        env={**os.environ, "OPENAI_API_KEY": ""},
    )
    async with (
        stdio_client(params) as (read, write),
        ClientSession(read, write, client_info=_client_info()) as session,
    ):
        await session.initialize()
        yield session


@asynccontextmanager
async def served(transport: str, workspace: Path, *args: str) -> AsyncIterator[ClientSession]:
    """A client session on ``sandmem mcp`` over ``transport`` ("stdio", or "http": a server
    process on a free loopback port with a bearer token, stopped afterwards)."""
    if transport == "stdio":
        async with stdio_session(workspace, *args) as session:
            yield session
        return
    port = _free_port()
    argv = [SANDMEM, "mcp", "-w", str(workspace), "--http", f"127.0.0.1:{port}", *args]
    argv += ["--token-env", "MCP_TEST_TOKEN"]
    env = {**os.environ, "MCP_TEST_TOKEN": TOKEN, "OPENAI_API_KEY": ""}
    proc = await anyio.to_thread.run_sync(_spawn, argv, env, port)
    try:
        async with http_session(f"http://127.0.0.1:{port}/mcp") as session:
            yield session
    finally:
        proc.terminate()
        await anyio.to_thread.run_sync(proc.wait, 10)
        assert proc.stderr is not None
        proc.stderr.close()


TRANSPORTS = pytest.mark.parametrize("transport", ["stdio", "http"])


def _seed(workspace: Path, lines: int = 30) -> None:
    memories = workspace / "memories"
    (memories / "skills" / "deploy").mkdir(parents=True)
    (workspace / "sessions").mkdir()
    body = "\n".join(f"- fact number {n}" for n in range(1, lines + 1))
    (memories / "MEMORY.md").write_text(f"# Memory\n\n## Invoice totals\n{body}\n")
    (memories / "memory_summary.md").write_text("The user likes invoices rounded to cents.\n")
    (memories / "skills" / "deploy" / "SKILL.md").write_text("# Deploy\n\nRun make deploy.\n")


@TRANSPORTS
async def test_tools_resources_paging_and_confinement(tmp_path: Path, transport: str) -> None:
    _seed(tmp_path)
    (tmp_path / "outside.txt").write_text("not memory")
    async with served(transport, tmp_path) as session:
        names = {t.name for t in (await session.list_tools()).tools}
        assert names == {
            "memory_search",
            "memory_read",
            "memory_list",
            "memory_status",
            "memory_remember",
            "memory_update",
        }
        uris = {str(r.uri) for r in (await session.list_resources()).resources}
        assert {"memory://memory_summary.md", "memory://MEMORY.md"} <= uris
        assert "memory://skills/deploy/SKILL.md" in uris
        summary = await session.read_resource("memory://memory_summary.md")
        assert "rounded to cents" in summary.contents[0].text

        hits = _text(await session.call_tool("memory_search", {"query": "invoice totals"}))
        assert hits.startswith("memories/MEMORY.md:")

        first = _text(await session.call_tool("memory_read", {"path": "MEMORY.md", "limit": 5}))
        assert first.splitlines()[0] == (
            "memories/MEMORY.md: lines 1-5 of 33 (call memory_read with offset=6 for more)"
        )
        last = _text(
            await session.call_tool(
                "memory_read", {"path": "memories/MEMORY.md", "offset": 31, "limit": 5}
            )
        )
        assert last.splitlines()[0] == "memories/MEMORY.md: lines 31-33 of 33"
        assert last.splitlines()[-1].endswith("- fact number 30")

        for bad in ("../outside.txt", "/etc/passwd", "memories/../outside.txt", ".lock"):
            result = await session.call_tool("memory_read", {"path": bad})
            assert result.is_error and "not a memory file" in _text(result)
        with pytest.raises(mcp.MCPError):
            await session.read_resource("memory://../outside.txt")
        # a symlink planted in the layout is never followed
        (tmp_path / "memories" / "skills" / "evil").mkdir()
        (tmp_path / "memories" / "skills" / "evil" / "SKILL.md").symlink_to(
            tmp_path / "outside.txt"
        )
        result = await session.call_tool("memory_read", {"path": "skills/evil/SKILL.md"})
        assert result.is_error and "not memory" not in _text(result)
        with pytest.raises(mcp.MCPError):
            await session.read_resource("memory://skills/evil/SKILL.md")

        result = await session.call_tool("memory_read", {"path": "MEMORY.md", "limit": 0})
        assert result.is_error and "limit" in _text(result)
        result = await session.call_tool("memory_search", {"query": "x", "bogus": 1})
        assert result.is_error and "bogus" in _text(result)


@TRANSPORTS
async def test_remember_generate_update_and_read_only(tmp_path: Path, transport: str) -> None:
    args = ("--engine", "extractive", "--allow-generate")
    async with served(transport, tmp_path, *args) as session:
        result = await session.call_tool(
            "memory_remember", {"text": f"{NOTE} The key is {SECRET}.", "kind": "preference"}
        )
        assert not result.is_error, _text(result)
        report = json.loads(_text(await session.call_tool("memory_generate", {})))
        assert report["processed"] == ["mcp-notes"] and report["complete"]
        hits = _text(await session.call_tool("memory_search", {"query": "test-fast commit"}))
        assert "memories/MEMORY.md" in hits
        memory = (tmp_path / "memories" / "MEMORY.md").read_text()
        assert "make test-fast" in memory

        patch = (
            "*** Begin Patch\n*** Update File: memories/MEMORY.md\n@@\n # Memory\n"
            f"+- Deploys go through make ship (token {SECRET}).\n*** End Patch\n"
        )
        result = await session.call_tool("memory_update", {"patch": patch})
        assert not result.is_error, _text(result)
        edited = (tmp_path / "memories" / "MEMORY.md").read_text()
        assert "make ship" in edited and SECRET not in edited and "[REDACTED" in edited
        from sandmem.memory import log

        newest = (await log(tmp_path))[0]
        assert newest.kind == "mcp_write"
        assert newest.client is not None and newest.client.startswith("sandmem-test 9.9")

        outside = "*** Begin Patch\n*** Add File: notes.txt\n+hello\n*** End Patch\n"
        result = await session.call_tool("memory_update", {"patch": outside})
        assert result.is_error and "edits only" in _text(result)
        assert not (tmp_path / "notes.txt").exists()
        state = "*** Begin Patch\n*** Add File: memories/raw_memories/x.md\n+x\n*** End Patch\n"
        assert (await session.call_tool("memory_update", {"patch": state})).is_error

    rollout = (tmp_path / "sessions" / "mcp-notes.jsonl").read_text()
    segment = json.loads(rollout.splitlines()[0])
    assert segment["source"]["client"] == "sandmem-test 9.9"
    assert segment["source"]["via"] == f"MCP ({transport})"
    if transport == "http":  # the session the client was given is named too
        assert len(segment["source"]["session"]) >= 16
    assert SECRET not in rollout and NOTE in rollout

    async with served(transport, tmp_path, "--read-only") as session:
        init_text = (await session.list_tools()).tools
        assert {t.name for t in init_text} == {
            "memory_search",
            "memory_read",
            "memory_list",
            "memory_status",
        }
        result = await session.call_tool("memory_remember", {"text": "x"})
        assert result.is_error and "read-only" in _text(result)
        result = await session.call_tool("memory_update", {"patch": patch})
        assert result.is_error and "read-only" in _text(result)
    assert (tmp_path / "memories" / "MEMORY.md").read_text() == edited


async def test_instructions_carry_the_summary(tmp_path: Path) -> None:
    _seed(tmp_path)
    params = StdioServerParameters(command=SANDMEM, args=["mcp", "-w", str(tmp_path)])
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        init = await session.initialize()
    assert init.instructions is not None
    assert "memory_search" in init.instructions
    assert "<memory_summary>\nThe user likes invoices rounded to cents.\n</memory_summary>" in (
        init.instructions
    )


# ---------------------------------------------------------------- Streamable HTTP


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _spawn(argv: list[str], env: dict[str, str], port: int) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(argv, env=env, stderr=subprocess.PIPE)
    try:
        _wait_listening(port, proc)
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    return proc


def _wait_listening(port: int, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise AssertionError("sandmem mcp --http did not start listening")


@pytest.fixture(scope="module")
def http_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    workspace = tmp_path_factory.mktemp("mcp-http")
    _seed(workspace)
    port = _free_port()
    proc = subprocess.Popen(
        [SANDMEM, "mcp", "-w", str(workspace), "--http", f"127.0.0.1:{port}", *HTTP_FLAGS],
        env={**os.environ, "MCP_TEST_TOKEN": TOKEN},
        stderr=subprocess.PIPE,
    )
    try:
        _wait_listening(port, proc)
        yield f"http://127.0.0.1:{port}/mcp", workspace
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        assert proc.stderr is not None
        proc.stderr.close()


@asynccontextmanager
async def http_session(url: str, **kwargs: Any) -> AsyncIterator[ClientSession]:
    client = create_mcp_http_client(headers={"Authorization": f"Bearer {TOKEN}"})
    async with (
        client,
        streamable_http_client(url, http_client=client) as (read, write),
        ClientSession(read, write, client_info=_client_info(), **kwargs) as session,
    ):
        await session.initialize()
        yield session


async def test_http_needs_the_token(http_server: tuple[str, Path]) -> None:
    url, _ = http_server
    import httpx2

    async with httpx2.AsyncClient() as client:
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
        headers = {"accept": "application/json, text/event-stream"}
        refused = await client.post(url, json=body, headers=headers)
        wrong = await client.post(url, json=body, headers={**headers, "authorization": "Bearer x"})
    assert refused.status_code == wrong.status_code == 401


async def test_http_tools_and_resource_updates(http_server: tuple[str, Path]) -> None:
    url, workspace = http_server
    updates: list[str] = []
    got = anyio.Event()

    async def on_message(message: Any) -> None:
        root = getattr(message, "root", message)
        if isinstance(root, mcp.types.ResourceUpdatedNotification):
            updates.append(str(root.params.uri))
            got.set()

    async with http_session(url, message_handler=on_message) as session:
        assert session.protocol_version == "2025-11-25"
        hits = _text(await session.call_tool("memory_search", {"query": "invoice"}))
        assert "memories/MEMORY.md" in hits
        with warnings.catch_warnings():  # a handshake-era client subscribes the old way
            warnings.simplefilter("ignore", mcp.MCPDeprecationWarning)
            await session.subscribe_resource("memory://MEMORY.md")
        patch = (
            "*** Begin Patch\n*** Update File: memories/MEMORY.md\n@@\n # Memory\n"
            "+- Edited over HTTP.\n*** End Patch\n"
        )
        result = await session.call_tool("memory_update", {"patch": patch})
        assert not result.is_error, _text(result)
        with anyio.fail_after(10):
            await got.wait()
    assert updates == ["memory://MEMORY.md"]
    assert "Edited over HTTP." in (workspace / "memories" / "MEMORY.md").read_text()


async def test_http_2026_07_28_client(http_server: tuple[str, Path]) -> None:
    url, _ = http_server
    client = create_mcp_http_client(headers={"Authorization": f"Bearer {TOKEN}"})
    async with client, mcp.Client(streamable_http_client(url, http_client=client)) as modern:
        assert modern.protocol_version == "2026-07-28"
        assert modern.instructions is not None and "rounded to cents" in modern.instructions
        result = await modern.call_tool("memory_read", {"path": "skills/deploy/SKILL.md"})
        assert "make deploy" in _text(result)


async def test_a_write_waits_for_the_lock_and_a_client_may_vanish_mid_call(
    http_server: tuple[str, Path],
) -> None:
    url, workspace = http_server
    memory_md = workspace / "memories" / "MEMORY.md"
    before = memory_md.read_text()
    patch = (
        "*** Begin Patch\n*** Update File: memories/MEMORY.md\n@@\n # Memory\n"
        "+- Written while locked.\n*** End Patch\n"
    )
    sandbox = await UnixLocalSandboxClient().create(manifest=Manifest(root=workspace))
    async with sandbox, sandbox.lock("memories/.lock", timeout=5):
        async with http_session(url) as session:
            result = await session.call_tool("memory_update", {"patch": patch})
        assert result.is_error and "locked" in _text(result)
        assert memory_md.read_text() == before

        with anyio.move_on_after(0.5):  # the client goes away while the call waits
            async with http_session(url) as session:
                await session.call_tool("memory_update", {"patch": patch})
    # the abandoned call either goes on when the lock is free or is cancelled: the edit is
    # applied whole and once, or not at all (the server's lock wait ends after 1 s)
    edited = before.replace("# Memory\n", "# Memory\n- Written while locked.\n", 1)
    await anyio.sleep(1.5)
    assert memory_md.read_text() in (before, edited)
    async with http_session(url) as session:
        result = await session.call_tool("memory_read", {"path": "MEMORY.md", "limit": 3})
        assert not result.is_error and "lines 1-3" in _text(result)


def test_a_non_loopback_bind_needs_a_token(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "SANDMEM_MCP_TOKEN"}
    done = subprocess.run(
        [SANDMEM, "mcp", "-w", str(tmp_path), "--http", "0.0.0.0:1"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert "not a loopback address, without a bearer token" in done.stderr


async def test_each_tool_call_is_a_genai_memory_span(tmp_path: Path, otel_spans: Any) -> None:
    from sandmem.memory import MemoryGenerateConfig, MemoryLayoutConfig
    from sandmem.memory.mcp import ServerOptions
    from sandmem.memory.mcp._tools import Caller, MemoryTools

    _seed(tmp_path)
    options = ServerOptions(str(tmp_path), MemoryLayoutConfig(), MemoryGenerateConfig())
    tools = MemoryTools(options)
    caller = Caller(client="probe")
    await tools.call("memory_search", {"query": "invoice"}, caller)
    await tools.call("memory_remember", {"text": NOTE}, caller)
    patch = (
        "*** Begin Patch\n*** Update File: memories/MEMORY.md\n@@\n # Memory\n+- x\n*** End Patch\n"
    )
    await tools.call("memory_update", {"patch": patch}, caller)
    spans = {s.name: dict(s.attributes) for s in otel_spans.get_finished_spans()}
    assert set(spans) == {
        "search_memory memory_search",
        "create_memory memory_remember",
        "update_memory memory_update",
    }
    assert spans["create_memory memory_remember"]["gen_ai.operation.name"] == "create_memory"
    assert spans["search_memory memory_search"]["mcp.client.name"] == "probe"
