"""``sandmem mcp``: the memory server driven by the ``mcp`` SDK's own clients, over stdio (a
subprocess running ``sandmem mcp``) and Streamable HTTP, on both protocol eras: the
``initialize`` handshake (2024-11-05 to 2025-11-25) and the per-request envelope of
2026-07-28."""

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

from mcp import ClientSession  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402
from mcp.shared._httpx_utils import create_mcp_http_client  # noqa: E402
from mcp.shared.subscriptions import ResourcesListChanged, ResourceUpdated  # noqa: E402
from mcp_client import CLIENT, initialize_as, modern_client, stdio_session  # noqa: E402
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS  # noqa: E402

from sandmem.memory.mcp._tools import ToolRefused  # noqa: E402
from sandmem.sandboxes import Manifest, UnixLocalSandboxClient  # noqa: E402

SANDMEM = str(Path(sys.executable).with_name("sandmem"))
GENERATES = ("--engine", "extractive", "--allow-generate", "--create")
SECRET = "sk-proj-" + "Q7x" * 16
NOTE = "Always run the tests with make test-fast before every commit."
TOKEN = "t0ken-" + "a" * 32
HTTP_FLAGS = ("--token-env", "MCP_TEST_TOKEN", "--lock-timeout", "1")


def _text(result: Any) -> str:
    return "\n".join(block.text for block in result.content)


@asynccontextmanager
async def served(
    transport: str, workspace: Path, *args: str, **kwargs: Any
) -> AsyncIterator[ClientSession]:
    """A client session on ``sandmem mcp`` over ``transport`` ("stdio", or "http": a server
    process on a free loopback port with a bearer token, stopped afterwards)."""
    if transport == "stdio":
        async with stdio_session(["--workspace", str(workspace), *args], **kwargs) as session:
            yield session
        return
    port = _free_port()
    argv = [SANDMEM, "mcp", "-w", str(workspace), "--http", f"127.0.0.1:{port}", *args]
    argv += ["--token-env", "MCP_TEST_TOKEN"]
    env = {**os.environ, "MCP_TEST_TOKEN": TOKEN, "OPENAI_API_KEY": ""}
    proc = await anyio.to_thread.run_sync(_spawn, argv, env, port)
    try:
        async with http_session(f"http://127.0.0.1:{port}/mcp", **kwargs) as session:
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


class Heard:
    """The resource notifications a handshake-era client received."""

    def __init__(self) -> None:
        self.updated: list[str] = []
        self.list_changed = 0
        self.event = anyio.Event()

    async def __call__(self, message: Any) -> None:
        root = getattr(message, "root", message)
        if isinstance(root, mcp.types.ResourceUpdatedNotification):
            self.updated.append(str(root.params.uri))
        elif isinstance(root, mcp.types.ResourceListChangedNotification):
            self.list_changed += 1
        else:
            return
        if "memory://MEMORY.md" in self.updated and self.list_changed:
            self.event.set()


async def _subscribe(session: ClientSession, uri: str) -> None:
    with warnings.catch_warnings():  # a handshake-era client subscribes the old way
        warnings.simplefilter("ignore", mcp.MCPDeprecationWarning)
        await session.subscribe_resource(uri)


@TRANSPORTS
async def test_remember_generate_update_and_read_only(tmp_path: Path, transport: str) -> None:
    heard = Heard()
    async with served(transport, tmp_path, *GENERATES, message_handler=heard) as session:
        await session.list_resources()
        await _subscribe(session, "memory://MEMORY.md")
        result = await session.call_tool(
            "memory_remember", {"text": f"{NOTE} The key is {SECRET}.", "kind": "preference"}
        )
        assert not result.is_error, _text(result)
        report = json.loads(_text(await session.call_tool("memory_generate", {})))
        assert report["processed"] == ["mcp-notes"] and report["complete"]
        # extracted (a raw memory and a rollout summary), then consolidated into MEMORY.md
        raw = (tmp_path / "memories" / "raw_memories" / "mcp-notes.md").read_text()
        assert "make test-fast" in raw and SECRET not in raw
        summaries = list((tmp_path / "memories" / "rollout_summaries").glob("mcp-notes_*.md"))
        assert len(summaries) == 1
        memory = (tmp_path / "memories" / "MEMORY.md").read_text()
        assert "make test-fast" in memory and summaries[0].name in memory
        hits = _text(await session.call_tool("memory_search", {"query": "test-fast commit"}))
        assert "memories/MEMORY.md" in hits
        # the generation rewrote MEMORY.md and added a summary: both are told
        with anyio.fail_after(10):
            await heard.event.wait()
        listed = {str(r.uri) for r in (await session.list_resources()).resources}
        assert f"memory://rollout_summaries/{summaries[0].name}" in listed

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


async def test_instructions_carry_the_summary_for_the_oldest_client(tmp_path: Path) -> None:
    """A client of the first protocol revision (2024-11-05) gets that revision, the
    instructions with the summary, and the tools and resources."""
    _seed(tmp_path)
    async with stdio_session(["-w", str(tmp_path)], protocol="2024-11-05") as session:
        assert session.protocol_version == "2024-11-05"
        init = session.initialize_result
        assert init is not None and init.instructions is not None
        summary = await session.read_resource("memory://memory_summary.md")
        hits = _text(await session.call_tool("memory_search", {"query": "deploy"}))
    assert "memory_search" in init.instructions
    assert "<memory_summary>\nThe user likes invoices rounded to cents.\n</memory_summary>" in (
        init.instructions
    )
    assert "rounded to cents" in summary.contents[0].text
    assert hits.startswith("memories/skills/deploy/SKILL.md:")


async def test_a_2026_07_28_client_hears_what_a_generation_rewrites(tmp_path: Path) -> None:
    """The 2026-07-28 client over stdio (``server/discover``, no handshake) remembers a note,
    generates, and hears on ``subscriptions/listen`` that the summary and ``MEMORY.md`` were
    rewritten and that the list of resources changed."""
    args = ["--workspace", str(tmp_path), *GENERATES]
    heard: list[object] = []
    async with modern_client(args) as client:
        assert client.protocol_version == "2026-07-28"
        async with client.listen(
            resources_list_changed=True,
            resource_subscriptions=["memory://MEMORY.md", "memory://memory_summary.md"],
        ) as events:
            result = await client.call_tool("memory_remember", {"text": NOTE, "kind": "fact"})
            assert not result.is_error, _text(result)
            report = json.loads(_text(await client.call_tool("memory_generate", {})))
            assert report["processed"] == ["mcp-notes"]
            with anyio.fail_after(10):
                async for event in events:
                    heard.append(event)
                    if len(heard) == 3:
                        break
        summary = await client.read_resource("memory://memory_summary.md")
    assert set(heard) == {
        ResourceUpdated(uri="memory://MEMORY.md"),
        ResourceUpdated(uri="memory://memory_summary.md"),
        ResourcesListChanged(),
    }
    assert summary.contents[0].text.strip()
    segment = json.loads((tmp_path / "sessions" / "mcp-notes.jsonl").read_text())
    assert segment["source"]["client"] == "sandmem-test 9.9"  # from the request envelope


async def test_a_stdio_client_may_vanish_mid_call(tmp_path: Path) -> None:
    """A client that goes away while its edit waits for the layout lock: the edit is applied
    whole or not at all, the lock is free afterwards, and the next client is served."""
    _seed(tmp_path)
    memory_md = tmp_path / "memories" / "MEMORY.md"
    before = memory_md.read_text()
    patch = (
        "*** Begin Patch\n*** Update File: memories/MEMORY.md\n@@\n # Memory\n"
        "+- Written while locked.\n*** End Patch\n"
    )
    args = ["-w", str(tmp_path), "--lock-timeout", "30"]
    sandbox = await UnixLocalSandboxClient().create(manifest=Manifest(root=tmp_path))
    async with sandbox:
        async with sandbox.lock("memories/.lock", timeout=5), stdio_session(args) as session:
            with anyio.move_on_after(0.5):  # the call is waiting for the lock: give up on it
                await session.call_tool("memory_update", {"patch": patch})
            # and go away: leaving the session closes the server's stdin
        edited = before.replace("# Memory\n", "# Memory\n- Written while locked.\n", 1)
        assert memory_md.read_text() in (before, edited)
        async with sandbox.lock("memories/.lock", timeout=5):
            pass  # nobody holds it any more
    async with stdio_session(args) as session:
        result = await session.call_tool("memory_update", {"patch": patch})
        assert not result.is_error, _text(result)
    assert memory_md.read_text().count("Written while locked.") in (1, 2)


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
async def http_session(
    url: str, *, protocol: str | None = None, **kwargs: Any
) -> AsyncIterator[ClientSession]:
    client = create_mcp_http_client(headers={"Authorization": f"Bearer {TOKEN}"})
    async with (
        client,
        streamable_http_client(url, http_client=client) as (read, write),
        ClientSession(read, write, client_info=CLIENT, **kwargs) as session,
    ):
        await initialize_as(session, protocol)
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


@pytest.mark.parametrize("protocol", HANDSHAKE_PROTOCOL_VERSIONS)
async def test_every_handshake_revision_is_served(
    http_server: tuple[str, Path], protocol: str
) -> None:
    url, _ = http_server
    async with http_session(url, protocol=protocol) as session:
        assert session.protocol_version == protocol
        assert {t.name for t in (await session.list_tools()).tools} >= {"memory_search"}
        summary = await session.read_resource("memory://memory_summary.md")
        assert "rounded to cents" in summary.contents[0].text
        page = _text(await session.call_tool("memory_read", {"path": "MEMORY.md", "limit": 2}))
        assert page.startswith("memories/MEMORY.md: lines 1-2 of ")


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


async def test_a_note_waits_for_the_sessions_lock(http_server: tuple[str, Path]) -> None:
    """``memory_remember`` appends under the sessions lock (a forget holds it) and gives up
    after ``--lock-timeout`` (1 s here) with a message, recording nothing."""
    url, workspace = http_server
    rollout = workspace / "sessions" / "mcp-notes.jsonl"
    before = rollout.read_bytes() if rollout.exists() else b""
    sandbox = await UnixLocalSandboxClient().create(manifest=Manifest(root=workspace))
    async with sandbox, sandbox.lock("sessions/.lock", timeout=5):
        async with http_session(url) as session:
            result = await session.call_tool("memory_remember", {"text": NOTE})
    assert result.is_error and "locked" in _text(result) and "not changed" in _text(result)
    assert (rollout.read_bytes() if rollout.exists() else b"") == before


def test_a_non_loopback_bind_needs_a_token(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "SANDMEM_MCP_TOKEN"}
    done = subprocess.run(
        [SANDMEM, "mcp", "-w", str(tmp_path), "--create", "--http", f"0.0.0.0:{_free_port()}"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert "not a loopback address, without a bearer token" in done.stderr


async def test_each_tool_call_is_a_genai_memory_span(tmp_path: Path, otel_spans: Any) -> None:
    """Spans follow the GenAI memory conventions: named by the operation (``search_memory``,
    ``create_memory``, ``update_memory``, ``upsert_memory`` for a consolidation,
    ``delete_memory``), with the store, the record and the MCP call."""
    from sandmem.memory import EXTRACTIVE, MemoryGenerateConfig, MemoryLayoutConfig
    from sandmem.memory.mcp import ServerOptions
    from sandmem.memory.mcp._tools import Caller, MemoryTools

    _seed(tmp_path)
    config = MemoryGenerateConfig(phase_one_model=EXTRACTIVE, phase_two_model=EXTRACTIVE)
    options = ServerOptions(
        str(tmp_path), MemoryLayoutConfig(), config, allow_forget=True, allow_generate=True
    )
    tools = MemoryTools(options)
    caller = Caller(client="probe", session="s-1", transport="http")
    await tools.call("memory_search", {"query": "invoice"}, caller)
    await tools.call("memory_remember", {"text": NOTE}, caller)
    patch = (
        "*** Begin Patch\n*** Update File: memories/MEMORY.md\n@@\n # Memory\n+- x\n*** End Patch\n"
    )
    await tools.call("memory_update", {"patch": patch}, caller)
    await tools.call("memory_generate", {}, caller)
    await tools.call("memory_forget", {"rollout_id": "mcp-notes"}, caller)
    with pytest.raises(ToolRefused):
        await tools.call("memory_read", {"path": "../outside"}, caller)
    spans = [s for s in otel_spans.get_finished_spans() if "gen_ai.tool.name" in s.attributes]
    by_tool = {s.attributes["gen_ai.tool.name"]: (s.name, dict(s.attributes)) for s in spans}
    assert {tool: name for tool, (name, _) in by_tool.items()} == {
        "memory_search": "search_memory",
        "memory_remember": "create_memory",
        "memory_update": "update_memory",
        "memory_generate": "upsert_memory",
        "memory_forget": "delete_memory",
        "memory_read": "search_memory",
    }
    for name, attributes in by_tool.values():
        assert attributes["gen_ai.operation.name"] == name
        assert attributes["gen_ai.memory.store.id"] == "memories"
        assert attributes["mcp.method.name"] == "tools/call"
        assert attributes["mcp.session.id"] == "s-1"
    assert by_tool["memory_search"][1]["gen_ai.memory.record.count"] >= 1
    assert by_tool["memory_remember"][1]["gen_ai.memory.record.id"] == "mcp-notes"
    assert by_tool["memory_forget"][1]["gen_ai.memory.record.id"] == "mcp-notes"
    assert by_tool["memory_read"][1]["error.type"] == "ToolRefused"
