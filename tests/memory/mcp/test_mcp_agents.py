"""Interop: the OpenAI Agents SDK (``openai-agents``, a test-only dependency) runs with
``sandmem mcp`` as its stdio MCP server against the repo's fake OpenAI server. Run 1 remembers
a note through ``memory_remember``; memory is generated (the extractive engine); run 2, in a
new server process, finds the note with ``memory_search`` and answers from it."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

agents = pytest.importorskip("agents")
pytest.importorskip("mcp")

from agents import Agent, OpenAIChatCompletionsModel, RunConfig, Runner  # noqa: E402
from agents.mcp import MCPServerStdio  # noqa: E402
from fake_openai import FakeOpenAIServer, FakeReply, FakeRequest  # noqa: E402
from openai import AsyncOpenAI  # noqa: E402

from sandmem.memory import generate  # noqa: E402

SANDMEM = str(Path(sys.executable).with_name("sandmem"))
NOTE = "I prefer invoices rounded to whole cents, never to tenths."


def _server(workspace: Path) -> MCPServerStdio:
    return MCPServerStdio(
        params={"command": SANDMEM, "args": ["mcp", "--workspace", str(workspace), "--create"]},
        client_session_timeout_seconds=30,
    )


def handler(req: FakeRequest) -> FakeReply:
    outputs = req.tool_outputs()
    if "remember" in req.last_user_text():
        if not outputs:
            args = {"text": NOTE, "kind": "preference"}
            return FakeReply(tool_calls=[("memory_remember", args, "call_remember")])
        return FakeReply(text="Noted.")
    if not outputs:
        return FakeReply(tool_calls=[("memory_search", {"query": "invoices rounded"}, "call_s")])
    found = str(outputs["call_s"])
    return FakeReply(text="From memory: " + found)


async def test_agents_sdk_remembers_and_finds_a_note(
    tmp_path: Path, fake_openai: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_AGENTS_DISABLE_TRACING", "1")
    fake_openai.handler = handler
    client = AsyncOpenAI(api_key="test", base_url=fake_openai.base_url)
    model = OpenAIChatCompletionsModel(model="fake-model", openai_client=client)
    config = RunConfig(tracing_disabled=True)

    async with _server(tmp_path) as memory:
        agent = Agent(name="assistant", model=model, mcp_servers=[memory])
        first = await Runner.run(agent, "Please remember how I want invoices.", run_config=config)
    assert first.final_output == "Noted."
    rollout = (tmp_path / "sessions" / "mcp-notes.jsonl").read_text()
    segment = json.loads(rollout.splitlines()[0])
    assert NOTE in segment["input"][0]["content"]
    assert segment["source"]["client"].startswith("mcp")  # the Agents SDK's client name

    report = await generate(tmp_path, engine="extractive")
    assert report.complete and report.processed == ["mcp-notes"]

    async with _server(tmp_path) as memory:
        agent = Agent(name="assistant", model=model, mcp_servers=[memory])
        second = await Runner.run(agent, "How should invoices be rounded?", run_config=config)
    answer = str(second.final_output)
    assert answer.startswith("From memory: ") and "whole cents" in answer
    assert "memories/" in answer  # a search hit: path:line and the text
    tools_offered: list[Any] = [r.tool_names() for r in fake_openai.requests]
    assert all("memory_search" in names for names in tools_offered)
