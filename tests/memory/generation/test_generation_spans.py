"""Spans of memory generation: a flush of several rollouts (concurrent phase one, a failure,
a model consolidation), and a memory-enabled run whose session stop generates memory."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from sandmem import (
    Filesystem,
    Memory,
    MemoryGenerateConfig,
    RunConfig,
    Runner,
    SandboxAgent,
    SandboxRunConfig,
    Shell,
    tracing,
)
from sandmem._usage import Usage
from sandmem.memory.generation._attach import get_manager
from sandmem.memory.layout import MemoryPaths
from sandmem.models._base import ModelRequest, ModelResponse
from sandmem.sandboxes import Manifest, UnixLocalSandboxClient
from sandmem.testing import FunctionModel, last_user_text, text, tool_call

ROLLOUTS = ["r-alpha", "r-beta", "r-bad", "r-gamma"]
SECRET = "sk-proj-" + "Mm3" * 16


def segment(rid: str, when: str) -> str:
    return json.dumps(
        {
            "updated_at": when,
            "rollout_id": rid,
            "input": [{"type": "message", "role": "user", "content": f"task of {rid} {SECRET}"}],
            "generated_items": [{"type": "message", "role": "assistant", "content": "ok"}],
            "final_output": "ok",
            "terminal_metadata": {
                "terminal_state": "completed",
                "exception_type": None,
                "exception_message": None,
                "has_final_output": True,
            },
        }
    )


def phase_one_model(started: list[str], everyone: asyncio.Event, count: int) -> FunctionModel:
    """Answers after every extraction has started (so they provably overlap); each rollout's
    tokens are distinct; ``r-bad`` fails."""

    async def fn(request: ModelRequest) -> ModelResponse:
        rid = next(r for r in ROLLOUTS if f"Rollout id: {r}\n" in last_user_text(request))
        started.append(rid)
        if len(started) == count:
            everyone.set()
        await asyncio.wait_for(everyone.wait(), timeout=10)
        if rid == "r-bad":
            raise RuntimeError("the extraction model is confused")
        index = ROLLOUTS.index(rid)
        artifacts = {
            "rollout_slug": f"task-{index}",
            "rollout_summary": f"# Task {rid}\nDone.",
            "raw_memory": f"- learned in {rid}",
        }
        return ModelResponse([text(json.dumps(artifacts))], Usage(1, 100 + index, 10 + index))

    return FunctionModel(fn, name="extractor")


#: cites every conversation, so the consolidation verifies as done
MEMORY_MD = "## All\n- x\nSources (rollout ids): r-alpha, r-beta, r-gamma\n"


def consolidation_model() -> FunctionModel:
    def fn(request: ModelRequest) -> Any:
        if any(i.get("type") == "function_call_output" for i in request.input):
            return ModelResponse([text("Consolidated.")], Usage(1, 50, 5))
        calls = [
            tool_call("write_file", {"path": "memories/MEMORY.md", "content": MEMORY_MD}),
            tool_call("write_file", {"path": "memories/memory_summary.md", "content": "x\n"}),
        ]
        return ModelResponse(calls, Usage(1, 40, 4))

    return FunctionModel(fn, name="consolidator")


def children(spans: Any, parent: Any) -> list[Any]:
    return [s for s in spans if s.parent is not None and s.parent.span_id == parent.context.span_id]


async def test_flush_of_several_rollouts(tmp_path: Path, otel_spans: Any) -> None:
    (tmp_path / "sessions").mkdir()
    for index, rid in enumerate(ROLLOUTS):
        when = f"2026-11-30T10:00:0{index}.000Z"
        (tmp_path / f"sessions/{rid}.jsonl").write_text(segment(rid, when) + "\n")
    started: list[str] = []
    config = MemoryGenerateConfig(
        phase_one_model=phase_one_model(started, asyncio.Event(), len(ROLLOUTS)),
        phase_two_model=consolidation_model(),
        phase_one_concurrency=4,
    )
    session = await UnixLocalSandboxClient().create(manifest=Manifest(root=tmp_path))
    async with session:
        manager = get_manager(session, MemoryPaths("memories", "sessions"), config)
        manager.detach_stop_hook()
        with tracing.span("caller"):
            report = await manager.flush()
    assert sorted(report.processed) == ["r-alpha", "r-beta", "r-gamma"]
    assert list(report.failed) == ["r-bad"] and report.phase_two == "done"
    spans = otel_spans.get_finished_spans()
    [caller] = [s for s in spans if s.name == "caller"]
    [flush] = [s for s in spans if s.name == "sandmem.memory.flush"]
    assert flush.parent.span_id == caller.context.span_id
    assert flush.attributes["sandmem.memory.memories_dir"] == "memories"
    ones = [s for s in spans if s.name == "sandmem.memory.phase_one"]
    assert sorted(s.attributes["sandmem.memory.rollout_id"] for s in ones) == sorted(ROLLOUTS)
    log = [
        json.loads(line)
        for line in (tmp_path / "memories/generation_log.jsonl").read_text().splitlines()
    ]
    logged = {r["rollouts"][0]: r for r in log if r["phase"] == "one"}
    for one in ones:
        rid = one.attributes["sandmem.memory.rollout_id"]
        assert one.parent.span_id == flush.context.span_id  # nested across the tasks
        [chat] = children(spans, one)
        assert chat.name == "chat extractor"
        assert one.attributes["sandmem.memory.outcome"] == logged[rid]["status"]
        if rid == "r-bad":
            assert one.status.status_code.name == "ERROR"
            assert one.attributes["error.type"] == "RuntimeError"
            assert chat.status.status_code.name == "ERROR"
            continue
        index = ROLLOUTS.index(rid)
        tokens = (one.attributes["gen_ai.usage.input_tokens"], 100 + index)
        assert tokens[0] == tokens[1] == chat.attributes["gen_ai.usage.input_tokens"]
        assert logged[rid]["input_tokens"] == tokens[0]
        assert one.attributes["gen_ai.usage.output_tokens"] == 10 + index
    assert len(started) == len(ROLLOUTS)  # every extraction ran at once (a barrier)
    [two] = [s for s in spans if s.name == "sandmem.memory.phase_two"]
    assert two.parent.span_id == flush.context.span_id
    attrs = dict(two.attributes)
    assert attrs["sandmem.memory.selected"] == attrs["sandmem.memory.added"] == 3
    assert attrs["sandmem.memory.retained"] == attrs["sandmem.memory.removed"] == 0
    assert attrs["sandmem.memory.outcome"] == "done"
    # the write turn ends the run (verified): no final-answer turn
    assert attrs["sandmem.memory.turns"] == report.phase_two_usage.requests == 1
    assert attrs["gen_ai.usage.input_tokens"] == report.phase_two_usage.input_tokens == 40
    [run] = children(spans, two)
    assert run.name == "invoke_agent memory-consolidation"
    below = children(spans, run)
    assert sorted(s.name for s in below) == [
        "chat consolidator",
        "execute_tool write_file",
        "execute_tool write_file",
    ]
    total_in = report.phase_one_usage.input_tokens + report.phase_two_usage.input_tokens
    assert flush.attributes["gen_ai.usage.input_tokens"] == total_in
    assert flush.attributes["sandmem.memory.processed"] == 3
    assert flush.attributes["sandmem.memory.failed"] == 1
    assert flush.attributes["sandmem.memory.phase_two.outcome"] == "done"
    # memory generation never records contents
    everything = repr([dict(s.attributes) for s in spans])
    assert SECRET not in everything and "task of r-alpha" not in everything


async def test_memory_enabled_run_and_its_flush(tmp_path: Path, otel_spans: Any) -> None:
    def agent_fn(request: ModelRequest) -> Any:
        if any(i.get("type") == "function_call_output" for i in request.input):
            return "Listed the files."
        return [tool_call("exec_command", {"cmd": "ls"})]

    started: list[str] = []
    extractor = phase_one_model(started, asyncio.Event(), 1)
    config = MemoryGenerateConfig(phase_one_model=extractor, phase_two_model="extractive")
    agent = SandboxAgent(
        name="dev",
        model=FunctionModel(agent_fn, name="agent-model"),
        capabilities=[Memory(generate=config), Filesystem(), Shell()],
    )
    session = await UnixLocalSandboxClient().create(manifest=Manifest(root=tmp_path))
    with tracing.span("caller"):
        async with session:
            result = await Runner.run(
                agent,
                "List the files.",
                conversation_id="r-alpha",
                run_config=RunConfig(
                    sandbox=SandboxRunConfig(session=session), workflow_name="listing"
                ),
            )
    spans = otel_spans.get_finished_spans()
    [caller] = [s for s in spans if s.name == "caller"]
    [run] = [s for s in spans if s.name == "invoke_agent dev"]
    [flush] = [s for s in spans if s.name == "sandmem.memory.flush"]
    assert run.parent.span_id == caller.context.span_id
    assert flush.parent.span_id == caller.context.span_id  # the session stopped in "caller"
    assert run.attributes["sandmem.workflow_name"] == "listing"
    assert run.attributes["gen_ai.usage.input_tokens"] == result.usage.input_tokens
    assert sorted(s.name for s in children(spans, run)) == [
        "chat agent-model",
        "chat agent-model",
        "execute_tool exec_command",
    ]
    chats = [s for s in children(spans, run) if s.name.startswith("chat")]
    assert sum(c.attributes["gen_ai.usage.output_tokens"] for c in chats) == (
        result.usage.output_tokens
    )
    [one] = children(spans, flush)[:1]
    assert one.name == "sandmem.memory.phase_one"
    assert one.attributes["sandmem.memory.rollout_id"] == "r-alpha"
    assert one.attributes["sandmem.memory.outcome"] == "done"
    assert one.attributes["gen_ai.usage.input_tokens"] == 100
    [two] = [s for s in children(spans, flush) if s.name == "sandmem.memory.phase_two"]
    assert two.attributes["sandmem.memory.outcome"] == "done"
    assert two.attributes["gen_ai.usage.input_tokens"] == 0  # the extractive engine
