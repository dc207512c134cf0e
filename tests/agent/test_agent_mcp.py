"""Agents with MCP servers (``Agent(mcp_servers=[...])``) through the official ``mcp`` SDK: a
tiny server of our own (``tests/mcp_tool_server.py``) over stdio and over Streamable HTTP on
127.0.0.1. Tools are listed per run and filtered; results become tool outputs; cleanup ends
the server."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

from services import free_port

from sandmem import Agent, Runner, UserError
from sandmem.mcp import (
    MCPServerError,
    MCPServerStdio,
    MCPServerStreamableHttp,
    ToolFilterContext,
    create_static_tool_filter,
)
from sandmem.models._base import ModelRequest
from sandmem.testing import FunctionModel, tool_call, tool_outputs

SERVER = str(Path(__file__).parents[1] / "mcp_tool_server.py")


def stdio_server(tmp_path: Path, **kwargs: Any) -> MCPServerStdio:
    env = {"MCP_TEST_PID_FILE": str(tmp_path / "server.pid")}
    params = {"command": sys.executable, "args": [SERVER, "stdio"], "env": env}
    return MCPServerStdio(params, client_session_timeout_seconds=30, **kwargs)


def caller(*calls: tuple[str, dict[str, Any]]) -> FunctionModel:
    """Calls every tool of ``calls`` in one turn, then answers with their outputs as JSON."""

    def fn(request: ModelRequest) -> Any:
        outputs = tool_outputs(request)
        if not outputs:
            return [tool_call(name, args, f"c{n}") for n, (name, args) in enumerate(calls)]
        return json.dumps({o["call_id"]: o["output"] for o in outputs})

    return FunctionModel(fn)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def test_stdio_server_tools_are_listed_filtered_and_called(tmp_path: Path) -> None:
    blocked = create_static_tool_filter(blocked_tool_names=["wipe_disk"])
    model = caller(
        ("add", {"a": 2, "b": 3}),
        ("shout", {"text": "hi"}),
        ("pixel", {}),
        ("broken", {}),
        ("wipe_disk", {}),
    )
    server = stdio_server(tmp_path, tool_filter=blocked)
    async with server:
        agent = Agent(name="a", model=model, mcp_servers=[server])
        result = await Runner.run(agent, "use the tools")
        pid = int((tmp_path / "server.pid").read_text())
        assert _alive(pid)
    offered = [t.name for t in model.requests[0].tools]
    assert offered == ["add", "shout", "pixel", "weather", "broken"]  # the server's order
    assert model.requests[0].tools[0].params_json_schema["required"] == ["a", "b"]
    assert model.requests[0].tools[0].description == "Add two integers."
    outputs = json.loads(result.final_output)
    assert outputs["c0"] == "5" and outputs["c1"] == "HI"
    assert outputs["c2"][0]["image_url"].startswith("data:image/png;base64,iVBOR")
    assert "the broken tool broke" in outputs["c3"]  # the server's tool error, as output
    assert outputs["c4"].startswith("Error: UnknownTool")  # blocked: not there at all
    # cleanup ended (and reaped) the server process; the agent cannot run without a connection
    assert not _alive(pid)
    with pytest.raises(UserError, match="not connected"):
        await Runner.run(agent, "again")


@pytest.fixture
def http_url(tmp_path: Path) -> Iterator[str]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, SERVER, "http", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert proc.poll() is None and time.monotonic() < deadline, "server did not start"
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(timeout=15)


async def test_streamable_http_server_with_a_callable_filter_and_cached_list(
    http_url: str,
) -> None:
    seen: list[str] = []

    async def only_reads(context: ToolFilterContext, tool: Any) -> bool:
        seen.append(f"{context.agent.name}@{context.server_name}:{tool.name}")
        return tool.name in ("add", "weather")

    server = MCPServerStreamableHttp(
        {"url": http_url},
        name="weather-service",
        tool_filter=only_reads,
        use_structured_content=True,
        cache_tools_list=True,
    )
    model = caller(("weather", {"city": "Oslo"}), ("add", {"a": 1, "b": 1}))
    async with server:
        assert server.session is not None
        listed: list[int] = []
        real = server.session.list_tools

        async def counting(**kwargs: Any) -> Any:
            listed.append(1)
            return await real(**kwargs)

        server.session.list_tools = counting  # type: ignore[method-assign]
        agent = Agent(name="forecaster", model=model, mcp_servers=[server])
        first = await Runner.run(agent, "weather?")
        await Runner.run(agent, "weather again?")
        assert len(listed) == 1  # cached: asked once, filtered per run
        server.invalidate_tools_cache()
        await Runner.run(agent, "and again?")
        assert len(listed) == 2
    assert [t.name for t in model.requests[0].tools] == ["add", "weather"]
    assert "forecaster@weather-service:wipe_disk" in seen
    outputs = json.loads(first.final_output)
    assert json.loads(outputs["c0"]) == {"city": "Oslo", "celsius": 21}  # structured content
    assert json.loads(outputs["c1"]) == {"result": 2}


async def test_connection_failures_are_mcp_server_errors(tmp_path: Path) -> None:
    missing = MCPServerStdio({"command": str(tmp_path / "no-such-server")})
    with pytest.raises(MCPServerError, match="could not connect to MCP server 'stdio: "):
        await missing.connect()
    assert missing.session is None
    nobody = MCPServerStreamableHttp({"url": f"http://127.0.0.1:{free_port()}/mcp", "timeout": 2})
    with pytest.raises(MCPServerError) as info:
        async with nobody:
            pass
    assert info.value.server == nobody.name


def test_options_sandmem_lacks_are_refused() -> None:
    with pytest.raises(UserError, match="human-in-the-loop"):
        MCPServerStdio({"command": "x"}, require_approval="always")
    with pytest.raises(UserError, match="tool_input_guardrails"):
        MCPServerStdio({"command": "x"}, tool_input_guardrails=[object()])
    with pytest.raises(UserError, match="mcp_servers must be a list"):
        Agent(name="a", mcp_servers=["not a server"])  # type: ignore[list-item]
    with pytest.raises(UserError, match="include_server_in_tool_names"):
        Agent(name="a", mcp_config={"include_server_in_tool_names": True})  # type: ignore[typeddict-unknown-key]


async def test_without_the_extra_the_error_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "mcp", None)
    with pytest.raises(UserError, match=r"pip install 'sandmem\[mcp\]'"):
        await MCPServerStdio({"command": "x"}).connect()
