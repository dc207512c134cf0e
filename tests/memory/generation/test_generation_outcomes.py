"""Issue 14 (1)-(3): every outcome true — verified consolidation, honest token accounting,
environment failures that never use up a rollout's attempts."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from fake_openai import FakeOpenAIServer, FakeReply, FakeRequest
from memory_doubles import phase_one_model, phase_two_model

from sandmem import SandboxSession
from sandmem._errors import ModelRequestError
from sandmem.cli._memory_cmd import status_lines
from sandmem.cli._output import report_lines
from sandmem.memory import MemoryGenerateConfig
from sandmem.memory.api import generation_report as api_report
from sandmem.memory.generation._attach import get_manager
from sandmem.memory.layout import MemoryPaths
from sandmem.memory.state import read_log
from sandmem.memory.views._status import memory_status
from sandmem.models import OpenAIProvider
from sandmem.models._base import ModelRequest
from sandmem.sandboxes import Manifest, UnixLocalSandboxClient
from sandmem.testing import FunctionModel, last_user_text, tool_call, tool_outputs

PATHS = MemoryPaths("memories", "sessions")


@pytest.fixture
async def sandbox(tmp_path: Path) -> AsyncIterator[SandboxSession]:
    session = await UnixLocalSandboxClient().create(manifest=Manifest(root=tmp_path / "ws"))
    async with session:
        yield session


def segment(rid: str, task: str, at: str = "2026-01-01T00:00:00Z") -> dict[str, Any]:
    return {
        "updated_at": at,
        "rollout_id": rid,
        "input": [{"role": "user", "content": task}],
        "generated_items": [{"role": "assistant", "content": "done"}],
        "terminal_metadata": {"terminal_state": "completed", "has_final_output": True},
    }


async def flush(session: SandboxSession, config: MemoryGenerateConfig, **kw: Any) -> Any:
    manager = get_manager(session, PATHS, config)
    manager.detach_stop_hook()
    return await manager.flush(**kw)


def lazy_consolidator(requests: list[ModelRequest]) -> FunctionModel:
    """Answers at once without writing anything (MEMORY.md keeps its old content)."""

    def fn(request: ModelRequest) -> str:
        requests.append(request)
        return "nothing to change"

    return FunctionModel(fn, name="lazy")


async def test_a_consolidation_that_leaves_a_conversation_out_is_incomplete(
    sandbox: SandboxSession,
) -> None:
    good = MemoryGenerateConfig(
        phase_one_model=phase_one_model(), phase_two_model=phase_two_model()
    )
    manager = get_manager(sandbox, PATHS, good)
    await manager.record(segment("first", "first task"))
    assert (await flush(sandbox, good)).phase_two == "done"
    before = (sandbox.root / "memories/MEMORY.md").read_text()
    assert "first" in before

    seen: list[ModelRequest] = []
    # without the extractive fallback (tests/memory/generation/test_phase_two_fallback.py has it on)
    lazy = good.model_copy(
        update={"phase_two_model": lazy_consolidator(seen), "phase_two_fallback": False}
    )
    sandbox._memory_managers.clear()
    manager = get_manager(sandbox, PATHS, lazy)
    await manager.record(segment("second", "second task", "2026-01-02T00:00:00Z"))
    report = await flush(sandbox, lazy)

    # one run, then exactly one follow-up turn naming what is missing
    assert len(seen) == 2
    follow_up = last_user_text(seen[1])
    assert "fold in second" in follow_up and "rollout_summaries/second_fix-the-bug.md" in follow_up
    assert "first" not in follow_up.split("fold in", 1)[1]
    assert "every added conversation must be cited" in (seen[0].instructions or "")
    # incomplete: what was there is kept, the conversation stays pending for consolidation
    assert report.phase_two == "incomplete" and report.phase_two_missing == ["second"]
    assert (sandbox.root / "memories/MEMORY.md").read_text() == before
    selection = json.loads((sandbox.root / "memories/phase_two_selection.json").read_text())
    assert [s["rollout_id"] for s in selection["selected"]] == ["first"]
    [last] = [r for r in await read_log(sandbox, PATHS) if r.get("phase") == "two"][-1:]
    assert last["status"] == "incomplete" and last["missing"] == ["second"]
    assert last["requests"] == 2
    status = await memory_status(sandbox, PATHS)
    assert status.last_consolidation is not None
    assert status.last_consolidation.status == "incomplete"
    assert status.last_consolidation.missing == ["second"]
    assert "  pending for the next consolidation: second" in status_lines(status)
    generated = api_report(report)
    assert generated.phase_two == "incomplete" and not generated.complete
    assert generated.phase_two_missing == ["second"]
    assert "  pending for the next consolidation: second" in report_lines(generated)

    # the next flush sees it as added again and a working consolidator folds it in
    sandbox._memory_managers.clear()
    again = await flush(sandbox, good)
    assert again.phase_two == "done" and again.phase_two_missing == []
    memory = (sandbox.root / "memories/MEMORY.md").read_text()
    assert "second task" in memory and "first task" in memory


async def test_the_follow_up_turn_can_complete_the_consolidation(sandbox: SandboxSession) -> None:
    turns: list[int] = []

    def fn(request: ModelRequest) -> Any:
        turns.append(len(tool_outputs(request)))
        if "fold in r1" not in last_user_text(request):
            return (
                [
                    tool_call(
                        "write_file", {"path": "memories/MEMORY.md", "content": "## x\n- y\n"}
                    ),
                    tool_call("write_file", {"path": "memories/memory_summary.md", "content": "s"}),
                ]
                if not tool_outputs(request)
                else "done"
            )
        if len(tool_outputs(request)) == 2:
            memory = "## x\n- y\nSources: rollout_summaries/r1_fix-the-bug.md\n"
            return [tool_call("write_file", {"path": "memories/MEMORY.md", "content": memory})]
        return "fixed"

    config = MemoryGenerateConfig(
        phase_one_model=phase_one_model(), phase_two_model=FunctionModel(fn)
    )
    await get_manager(sandbox, PATHS, config).record(segment("r1", "task"))
    report = await flush(sandbox, config)
    assert report.phase_two == "done", report.phase_two_error
    assert (
        "rollout_summaries/r1_fix-the-bug.md" in (sandbox.root / "memories/MEMORY.md").read_text()
    )
    # write turn, a final answer (not yet complete), then the follow-up's write turn, after
    # which the run ends at once (verified: no final-answer turn)
    assert report.phase_two_usage.requests == len(turns) == 3


async def test_a_failed_follow_up_turn_keeps_the_written_result_as_incomplete(
    sandbox: SandboxSession,
) -> None:
    # the consolidator writes both files without citing r1, stops, then its follow-up request
    # fails: the written files stand (incomplete), and r1 stays pending
    def fn(request: ModelRequest) -> Any:
        if "fold in r1" in last_user_text(request):
            raise ModelRequestError("the server went away", retryable=True)
        if tool_outputs(request):
            return "done"
        return [
            tool_call("write_file", {"path": "memories/MEMORY.md", "content": "## x\n- y\n"}),
            tool_call("write_file", {"path": "memories/memory_summary.md", "content": "s"}),
        ]

    config = MemoryGenerateConfig(
        phase_one_model=phase_one_model(),
        phase_two_model=FunctionModel(fn),
        phase_two_fallback=False,
    )
    await get_manager(sandbox, PATHS, config).record(segment("r1", "task"))
    report = await flush(sandbox, config)
    assert report.phase_two == "incomplete" and report.phase_two_missing == ["r1"]
    assert (sandbox.root / "memories/MEMORY.md").read_text() == "## x\n- y\n"
    assert (sandbox.root / "memories/memory_summary.md").read_text() == "s"
    assert report.phase_two_usage.requests == 3  # write turn, final answer, failed follow-up


async def test_tokens_are_counted_when_consolidation_fails(sandbox: SandboxSession) -> None:
    def busy(request: ModelRequest) -> Any:
        return [tool_call("list_files", {"path": "memories"})]

    config = MemoryGenerateConfig(
        phase_one_model=phase_one_model(),
        phase_two_model=FunctionModel(busy),
        phase_two_max_turns=3,
        phase_two_fallback=False,
    )
    await get_manager(sandbox, PATHS, config).record(segment("r1", "task"))
    report = await flush(sandbox, config)
    assert report.phase_two == "failed" and "turn limit" in (report.phase_two_error or "")
    assert report.phase_two_usage.requests == 3 and report.phase_two_usage.input_tokens > 0
    data = api_report(report).model_dump(mode="json")["usage"]["phase_two"]
    assert data == {
        "requests": 3,
        "input_tokens": report.phase_two_usage.input_tokens,
        "output_tokens": report.phase_two_usage.output_tokens,
    }
    [record] = [r for r in await read_log(sandbox, PATHS) if r.get("phase") == "two"]
    assert record["requests"] == 3 and record["input_tokens"] == report.phase_two_usage.input_tokens
    tokens = (await memory_status(sandbox, PATHS)).tokens.phase_two
    assert tokens.requests == 3 and tokens.input_tokens > 0 and tokens.failed_runs == 1
    assert api_report(report).usage.phase_two.requests == 3


async def test_tokens_are_counted_when_phase_one_output_is_invalid(
    sandbox: SandboxSession, fake_openai: FakeOpenAIServer
) -> None:
    fake_openai.handler = lambda req: FakeReply(text='{"rollout_slug": "x"}')
    provider = OpenAIProvider(base_url=fake_openai.base_url, api_key="test", max_retries=0)
    config = MemoryGenerateConfig(
        phase_one_model="m",
        phase_two_model=phase_two_model(),
        model_provider=provider,
        phase_one_fallback=False,
    )
    await get_manager(sandbox, PATHS, config).record(segment("r1", "task"))
    report = await flush(sandbox, config)
    assert report.failure_kinds == {"r1": "rollout"}
    # the answer, then one repair request: both counted
    assert report.phase_one_usage.requests == 2 and report.phase_one_usage.input_tokens > 0
    [record] = [r for r in await read_log(sandbox, PATHS) if r.get("phase") == "one"]
    assert record["input_tokens"] == report.phase_one_usage.input_tokens > 0


def extractor(fake_openai: FakeOpenAIServer) -> None:
    def handler(req: FakeRequest) -> FakeReply:
        text = req.last_user_text()
        rid = text.split("Rollout id: ", 1)[1].split("\n", 1)[0]
        return FakeReply.json(
            {"rollout_slug": "task", "rollout_summary": f"s {rid}", "raw_memory": f"- {rid}"}
        )

    fake_openai.handler = handler


def outage(fake_openai: FakeOpenAIServer) -> None:
    fake_openai.reset()
    fake_openai.inject(status=503, times=10_000)


async def test_an_outage_uses_no_attempts_and_recovery_needs_no_retry_failed(
    sandbox: SandboxSession, fake_openai: FakeOpenAIServer
) -> None:
    extractor(fake_openai)
    outage(fake_openai)
    provider = OpenAIProvider(base_url=fake_openai.base_url, api_key="test", max_retries=0)
    config = MemoryGenerateConfig(
        phase_one_model="m",
        phase_two_model=phase_two_model(),
        model_provider=provider,
        max_attempts=2,
    )
    manager = get_manager(sandbox, PATHS, config)
    for rid in ("a", "b", "c"):
        await manager.record(segment(rid, f"task {rid}"))
    first = await flush(sandbox, config)
    assert sorted(first.failed) == ["a", "b", "c"]
    assert set(first.failure_kinds.values()) == {"environment"}
    state = json.loads((sandbox.root / "memories/generation_state.json").read_text())
    for entry in state["rollouts"].values():
        assert entry["status"] == "pending" and entry["attempts"] == 0
        assert entry["failure_kind"] == "environment" and entry["next_retry_at"]
    status = await memory_status(sandbox, PATHS)
    assert {r.failure_kind for r in status.pending} == {"environment"}
    assert all(r.next_retry_at for r in status.pending)
    assert "next retry " in "\n".join(status_lines(status))
    assert "(environment)" in "\n".join(status_lines(status))

    # still down: a flush at stop sends one probe, the others wait for their retry time
    outage(fake_openai)
    for _ in range(3):
        still = await flush(sandbox, config)
        assert len(still.pending) == 1 and len(still.deferred) == 2
    assert len(fake_openai.requests) == 3
    # an explicit generation retries everything at once, still without using attempts
    await flush(sandbox, config, wait_backoff=False)
    await flush(sandbox, config, wait_backoff=False)
    state = json.loads((sandbox.root / "memories/generation_state.json").read_text())
    assert {e["attempts"] for e in state["rollouts"].values()} == {0}
    assert {e["status"] for e in state["rollouts"].values()} == {"pending"}

    # back up: the next flush (a session stop) processes all, no --retry-failed needed
    fake_openai.reset()
    recovered = await flush(sandbox, config)
    assert sorted(recovered.processed) == ["a", "b", "c"] and recovered.failed == {}
    status = await memory_status(sandbox, PATHS)
    assert status.counts.done == 3 and status.counts.failed == 0


async def test_a_rollout_caused_failure_still_counts(sandbox: SandboxSession) -> None:
    def refuses(request: ModelRequest) -> str:
        raise ModelRequestError("HTTP 400: context_length_exceeded", status_code=400)

    config = MemoryGenerateConfig(
        phase_one_model=FunctionModel(refuses), phase_two_model=phase_two_model(), max_attempts=2
    )
    await get_manager(sandbox, PATHS, config).record(segment("r1", "task"))
    await flush(sandbox, config)
    report = await flush(sandbox, config)
    assert report.failure_kinds == {"r1": "rollout"}
    [failed] = (await memory_status(sandbox, PATHS)).failed
    assert failed.attempts == 2 and failed.failure_kind == "rollout"
