"""Memory end to end through the real ``openai`` client and the local fake server."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fake_openai import FakeOpenAIServer, FakeReply, FakeRequest
from memory_doubles import phase_two_model

from sandmem import RunConfig, Runner, SandboxAgent, SandboxRunConfig
from sandmem.capabilities import Filesystem, Shell
from sandmem.capabilities.memory import Memory
from sandmem.memory import MemoryGenerateConfig
from sandmem.memory.layout import parse_header
from sandmem.models import OpenAIProvider
from sandmem.sandboxes import File, LocalSnapshotSpec, Manifest, UnixLocalSandboxClient
from sandmem.testing import FunctionModel

MANIFEST = Manifest(entries={"notes.txt": File(content=b"invoice totals are wrong\n")})
SUMMARY = "User prefers pytest -q. notes.txt describes the invoice bug."


def agent_turn(req: FakeRequest) -> FakeReply:
    if not req.tool_outputs():
        return FakeReply(tool_calls=[("exec_command", {"cmd": "cat notes.txt"}, "call_1")])
    return FakeReply(text="notes.txt says invoice totals are wrong.")


def phase_one_turn(req: FakeRequest) -> FakeReply:
    assert req.tool_names() == [], "phase one offers no tools"
    schema = req.json_schema()
    assert schema is not None and schema.get("strict") is True
    return FakeReply.json(
        {
            "rollout_slug": "read-invoice-notes",
            "rollout_summary": "The agent read notes.txt about the invoice bug.",
            "raw_memory": "- notes.txt describes the invoice bug (rollout x)",
        }
    )


MEMORY_MD = "## Invoice\nSources: rollout_summaries/notes-1_read-invoice-notes.md\n"


def phase_two_turn(req: FakeRequest) -> FakeReply:
    assert "exec_command" not in req.tool_names(), "consolidation has no shell"
    if not req.tool_outputs():
        return FakeReply(
            tool_calls=[
                ("read_file", {"path": "memories/raw_memories.md"}, "c1"),
                ("write_file", {"path": "memories/MEMORY.md", "content": MEMORY_MD}, "c2"),
                ("write_file", {"path": "memories/memory_summary.md", "content": SUMMARY}, "c3"),
            ]
        )
    return FakeReply(text="MEMORY.md and memory_summary.md written.")


def handler(req: FakeRequest) -> FakeReply:
    if req.wants_json():
        return phase_one_turn(req)
    if "write_file" in req.tool_names():
        return phase_two_turn(req)
    return agent_turn(req)


def memory_agent(provider: OpenAIProvider, model: str = "agent-model") -> tuple[SandboxAgent, Any]:
    config = MemoryGenerateConfig(
        phase_one_model="extract-model",
        phase_two_model="consolidate-model",
        model_provider=provider,
    )
    agent = SandboxAgent(
        name="reviewer",
        model=model,
        capabilities=[Memory(generate=config), Filesystem(), Shell()],
    )
    return agent, config


@pytest.mark.parametrize("api", ["responses", "chat_completions"])
async def test_memory_end_to_end_through_openai_client(
    fake_openai: FakeOpenAIServer, tmp_path: Path, api: str
) -> None:
    fake_openai.handler = handler
    provider = OpenAIProvider(base_url=fake_openai.base_url, api_key="test", api=api)  # type: ignore[arg-type]
    agent, _ = memory_agent(provider)
    client = UnixLocalSandboxClient()
    sandbox = await client.create(
        manifest=MANIFEST, snapshot=LocalSnapshotSpec(base_path=tmp_path / "snap")
    )
    async with sandbox:
        run = RunConfig(sandbox=SandboxRunConfig(session=sandbox), model_provider=provider)
        result = await Runner.run(
            agent, "What do the notes say?", run_config=run, conversation_id="notes-1"
        )
        assert result.final_output == "notes.txt says invoice totals are wrong."
    root = sandbox.root
    models = [r.model for r in fake_openai.requests]
    assert models.count("extract-model") == 1
    # one turn: the writes are verified and the run ends without a final-answer turn
    assert models.count("consolidate-model") == 1
    rollout = [json.loads(x) for x in (root / "sessions/notes-1.jsonl").read_text().splitlines()]
    assert len(rollout) == 1
    raw_fields, _ = parse_header((root / "memories/raw_memories/notes-1.md").read_text())
    assert set(raw_fields) >= {
        "rollout_id",
        "updated_at",
        "rollout_path",
        "rollout_summary_file",
        "terminal_state",
    }
    summary = root / "memories/rollout_summaries/notes-1_read-invoice-notes.md"
    assert list(parse_header(summary.read_text())[0]) == [
        "session_id",
        "updated_at",
        "rollout_path",
        "terminal_state",
    ]
    assert "notes.txt describes" in (root / "memories/raw_memories.md").read_text()
    assert (root / "memories/MEMORY.md").read_text() == MEMORY_MD
    assert (root / "memories/memory_summary.md").read_text() == SUMMARY
    selection = json.loads((root / "memories/phase_two_selection.json").read_text())
    assert selection["selected"][0]["rollout_id"] == "notes-1"

    fake_openai.reset()
    resumed = await client.resume(sandbox.state)
    agent2, _ = memory_agent(provider)
    async with resumed:
        run = RunConfig(sandbox=SandboxRunConfig(session=resumed), model_provider=provider)
        await Runner.run(agent2, "Add a regression test", run_config=run)
    first = fake_openai.requests[0]
    assert first.model == "agent-model"
    assert f"<memory_summary>\n{SUMMARY}\n</memory_summary>" in (first.instructions or "")


async def _record_rollouts(sandbox: Any, config: MemoryGenerateConfig, count: int) -> None:
    agent = SandboxAgent(
        name="quick",
        model=FunctionModel(lambda r: "ok"),
        capabilities=[Memory(generate=config), Filesystem(), Shell()],
    )
    run = RunConfig(sandbox=SandboxRunConfig(session=sandbox))
    for index in range(count):
        await Runner.run(
            agent, f"task number {index}", run_config=run, conversation_id=f"task-{index}"
        )


async def test_phase_one_concurrency_keeps_four_in_flight(fake_openai: FakeOpenAIServer) -> None:
    def slow_extract(req: FakeRequest) -> FakeReply:
        reply = phase_one_turn(req)
        reply.delay_s = 0.3
        return reply

    fake_openai.handler = slow_extract
    provider = OpenAIProvider(base_url=fake_openai.base_url, api_key="test")
    config = MemoryGenerateConfig(
        phase_one_model="extract-model",
        phase_two_model=phase_two_model(),
        model_provider=provider,
        phase_one_concurrency=4,
    )
    client = UnixLocalSandboxClient()
    sandbox = await client.create(manifest=MANIFEST)
    async with sandbox:
        await _record_rollouts(sandbox, config, 8)
    assert len(fake_openai.requests) == 8
    assert fake_openai.max_in_flight == 4
    assert len(list((sandbox.root / "memories/raw_memories").iterdir())) == 8


async def test_failing_phase_one_stays_pending_and_next_stop_processes_it(
    fake_openai: FakeOpenAIServer,
) -> None:
    fake_openai.handler = phase_one_turn
    provider = OpenAIProvider(base_url=fake_openai.base_url, api_key="test", max_retries=0)
    config = MemoryGenerateConfig(
        phase_one_model="extract-model",
        phase_two_model=phase_two_model(),
        model_provider=provider,
    )
    client = UnixLocalSandboxClient()
    sandbox = await client.create(manifest=MANIFEST)
    fake_openai.inject(status=500, times=3)
    async with sandbox:
        await _record_rollouts(sandbox, config, 3)
    root = sandbox.root
    state = json.loads((root / "memories/generation_state.json").read_text())
    assert {rid: e["status"] for rid, e in state["rollouts"].items()} == {
        "task-0": "pending",
        "task-1": "pending",
        "task-2": "pending",
    }
    assert all("500" in e["last_error"] for e in state["rollouts"].values())
    assert not any((root / "memories/raw_memories").iterdir())

    resumed = await client.resume(sandbox.state)
    async with resumed:
        await _record_rollouts(resumed, config, 0)
        await Runner.run(
            SandboxAgent(
                name="q",
                model=FunctionModel(lambda r: "ok"),
                capabilities=[Memory(generate=config), Filesystem(), Shell()],
            ),
            "one more",
            run_config=RunConfig(sandbox=SandboxRunConfig(session=resumed)),
            conversation_id="task-3",
        )
    state = json.loads((resumed.root / "memories/generation_state.json").read_text())
    assert {e["status"] for e in state["rollouts"].values()} == {"done"}
    assert len(list((resumed.root / "memories/raw_memories").iterdir())) == 4
