"""Memory phases with a small model's habits, through the real openai client and the fake
server: JSON in fences or prose, one repair request, copies refused, max_tokens per phase."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from fake_openai import FakeOpenAIServer, FakeReply, FakeRequest

from sandmem.memory import MemoryGenerateConfig
from sandmem.memory._types import PhaseOneArtifacts
from sandmem.memory.generation._attach import get_manager
from sandmem.memory.generation.phase_one import (
    COPY_MIN_WORDS,
    copied_share,
    refuse_copies,
)
from sandmem.memory.layout import MemoryPaths
from sandmem.models import OpenAIProvider
from sandmem.sandboxes import Manifest, SandboxSession, UnixLocalSandboxClient

PATHS = MemoryPaths("memories", "sessions")
ARTIFACTS = {
    "rollout_slug": "fix-tests",
    "rollout_summary": "The agent fixed the failing test.",
    "raw_memory": "- run pytest -q before committing",
}
#: a long tool output, as a transcript holds (a file the agent read)
LOG_TEXT = " ".join(
    f"step {n} the deployment script copied bundle {n} to the staging host and checked it"
    for n in range(60)
)


@pytest.fixture
async def sandbox(tmp_path: Path) -> AsyncIterator[SandboxSession]:
    session = await UnixLocalSandboxClient().create(manifest=Manifest(root=tmp_path / "ws"))
    async with session:
        yield session


def segment(rid: str, tool_text: str = "3 passed") -> dict[str, Any]:
    return {
        "updated_at": "2026-01-01T00:00:00Z",
        "rollout_id": rid,
        "input": [{"role": "user", "content": "make the tests pass"}],
        "generated_items": [
            {"type": "function_call", "call_id": "c1", "name": "exec_command", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": tool_text},
            {"role": "assistant", "content": "done"},
        ],
        "terminal_metadata": {"terminal_state": "completed", "has_final_output": True},
    }


@pytest.fixture(params=["responses", "chat_completions"])
async def provider(
    request: pytest.FixtureRequest, fake_openai: FakeOpenAIServer
) -> AsyncIterator[OpenAIProvider]:
    provider = OpenAIProvider(base_url=fake_openai.base_url, api=request.param, max_retries=0)
    yield provider
    await provider.aclose()


def config(provider: OpenAIProvider, **fields: Any) -> MemoryGenerateConfig:
    return MemoryGenerateConfig(
        phase_one_model="small",
        phase_two_model="extractive",
        model_provider=provider,
        **fields,
    )


async def flush(session: SandboxSession, cfg: MemoryGenerateConfig, rid: str = "r1") -> Any:
    session._memory_managers.clear()  # type: ignore[attr-defined]
    manager = get_manager(session, PATHS, cfg)
    manager.detach_stop_hook()
    await manager.record(segment(rid))
    return await manager.flush()


@pytest.mark.parametrize(
    "answer",
    [
        f"```json\n{json.dumps(ARTIFACTS)}\n```",
        json.dumps(ARTIFACTS) + "\n\nI summarised the conversation above.",
        "Here is the JSON:\n" + json.dumps(ARTIFACTS, indent=2),
    ],
)
async def test_phase_one_json_in_a_fence_or_with_prose_is_parsed(
    sandbox: SandboxSession, provider: OpenAIProvider, fake_openai: FakeOpenAIServer, answer: str
) -> None:
    fake_openai.handler = lambda req: FakeReply(text=answer)
    report = await flush(sandbox, config(provider))
    assert report.processed == ["r1"] and not report.failed
    assert len(fake_openai.requests) == 1
    assert "pytest -q" in (sandbox.root / "memories/raw_memories/r1.md").read_text()


async def test_phase_one_repairs_once_then_fails(
    sandbox: SandboxSession, provider: OpenAIProvider, fake_openai: FakeOpenAIServer
) -> None:
    answers = iter(['{"rollout_slug": "fix-tests", "rollout_summary": ', json.dumps(ARTIFACTS)])
    fake_openai.handler = lambda req: FakeReply(text=next(answers))
    report = await flush(sandbox, config(provider))
    assert report.processed == ["r1"]
    first, second = fake_openai.requests
    repair = second.last_user_text()
    assert "could not be used" in repair and "not valid JSON" in repair
    # the repair request carries the malformed answer before it, as the model's own turn
    assert second.items[-2]["role"] == "assistant"
    assert second.json_schema() == first.json_schema()

    fake_openai.reset()
    fake_openai.handler = lambda req: FakeReply(text="I cannot produce JSON, sorry.")
    report = await flush(sandbox, config(provider, phase_one_fallback=False), "r2")
    assert "r2" in report.failed and "also after one repair request" in report.failed["r2"]
    assert len(fake_openai.requests) == 2


@pytest.mark.parametrize("where", ["rollout_summary", "raw_memory"])
async def test_phase_one_refuses_a_copy_of_the_transcript(
    sandbox: SandboxSession, provider: OpenAIProvider, fake_openai: FakeOpenAIServer, where: str
) -> None:
    def copying(req: FakeRequest) -> FakeReply:
        return FakeReply.json({**ARTIFACTS, where: "Summary: " + LOG_TEXT[:3000]})

    fake_openai.handler = copying
    sandbox._memory_managers.clear()  # type: ignore[attr-defined]
    manager = get_manager(sandbox, PATHS, config(provider, phase_one_fallback=False))
    manager.detach_stop_hook()
    await manager.record(segment("r1", LOG_TEXT))
    report = await manager.flush()
    assert "r1" in report.failed
    assert f"phase one's {where} for rollout r1 is mostly a copy" in report.failed["r1"]
    assert not (sandbox.root / "memories/raw_memories/r1.md").exists()


def _unusable_answers() -> dict[str, Any]:
    """Phase-one answers a small model gives that cannot be used, by kind."""
    return {
        "copy of the transcript": lambda req: FakeReply.json(
            {**ARTIFACTS, "raw_memory": "Summary: " + LOG_TEXT[:3000]}
        ),
        "no JSON at all": lambda req: FakeReply(text="I cannot produce JSON, sorry."),
        "half-empty fields": lambda req: FakeReply.json({**ARTIFACTS, "raw_memory": ""}),
        "a bad slug": lambda req: FakeReply.json({**ARTIFACTS, "rollout_slug": "Not A Slug!"}),
    }


@pytest.mark.parametrize("kind", list(_unusable_answers()))
async def test_an_unusable_phase_one_answer_falls_back_to_the_extractive_engine(
    sandbox: SandboxSession, provider: OpenAIProvider, fake_openai: FakeOpenAIServer, kind: str
) -> None:
    def handler(req: FakeRequest) -> FakeReply:
        if req.wants_json():
            reply: FakeReply = _unusable_answers()[kind](req)
            return reply
        return FakeReply(text="no consolidation from this model")

    fake_openai.handler = handler
    sandbox._memory_managers.clear()  # type: ignore[attr-defined]
    manager = get_manager(sandbox, PATHS, config(provider))
    manager.detach_stop_hook()
    await manager.record(segment("r1", LOG_TEXT))
    report = await manager.flush()
    assert report.processed == ["r1"] and not report.failed
    raw = (sandbox.root / "memories/raw_memories/r1.md").read_text()
    assert "make the tests pass" in raw  # the extractive engine's notes of the conversation
    (summary,) = (sandbox.root / "memories/rollout_summaries").glob("r1_*.md")
    assert "Extracted without a model: the model's answer could not be used" in (
        summary.read_text()
    )
    # memory is not blank for the next run: the consolidation (the model's, else the
    # extractive fallback's) has what phase one produced
    assert (sandbox.root / "memories/memory_summary.md").read_text().strip()


async def test_a_server_problem_in_phase_one_is_not_replaced_by_the_fallback(
    sandbox: SandboxSession, provider: OpenAIProvider, fake_openai: FakeOpenAIServer
) -> None:
    fake_openai.handler = lambda req: FakeReply.json(ARTIFACTS)
    fake_openai.inject(status=500, times=5, message="upstream down")
    sandbox._memory_managers.clear()  # type: ignore[attr-defined]
    manager = get_manager(sandbox, PATHS, config(provider))
    manager.detach_stop_hook()
    await manager.record(segment("r1"))
    report = await manager.flush()
    assert "r1" in report.failed  # retried at the next flush, by the model
    assert not (sandbox.root / "memories/raw_memories/r1.md").exists()


def test_the_copy_rule() -> None:
    summary = "The agent deployed bundles to staging; every copy was checked."
    ok = PhaseOneArtifacts(rollout_slug="s", rollout_summary=summary, raw_memory="- x")
    refuse_copies(ok, LOG_TEXT, "r")  # short and condensed: kept
    # a long summary quoting one line of the log is fine; one made of the log is not
    own = " ".join(f"learned point number {n} about the deploy" for n in range(20))
    quoted = own + " " + LOG_TEXT[:120]
    assert copied_share(quoted, LOG_TEXT) < 0.2
    assert copied_share(LOG_TEXT[:2000], LOG_TEXT) > 0.95
    assert copied_share(LOG_TEXT[:2000].upper(), LOG_TEXT) > 0.95  # case does not hide it
    short = " ".join(LOG_TEXT.split()[: COPY_MIN_WORDS - 1])
    assert copied_share(short, LOG_TEXT) == 0.0  # too short to judge
    copy = PhaseOneArtifacts(rollout_slug="s", rollout_summary=summary, raw_memory=LOG_TEXT)
    with pytest.raises(Exception, match="raw_memory for rollout r is mostly a copy"):
        refuse_copies(copy, LOG_TEXT, "r")


def limit_of(req: FakeRequest) -> Any:
    return req.body.get("max_output_tokens" if req.api == "responses" else "max_completion_tokens")


async def test_each_phase_sends_its_max_tokens(
    sandbox: SandboxSession, provider: OpenAIProvider, fake_openai: FakeOpenAIServer
) -> None:
    def handler(req: FakeRequest) -> FakeReply:
        if req.wants_json():
            return FakeReply.json(ARTIFACTS)
        if not req.tool_outputs():
            memory = "## Tests\n- pytest -q\nSources: rollout_summaries/r1_fix-tests.md\n"
            return FakeReply(
                tool_calls=[
                    ("write_file", {"path": "memories/MEMORY.md", "content": memory}, "w1"),
                    (
                        "write_file",
                        {"path": "memories/memory_summary.md", "content": "Run pytest -q."},
                        "w2",
                    ),
                ]
            )
        return FakeReply(text="done")

    fake_openai.handler = handler
    defaults = MemoryGenerateConfig.for_model("small", model_provider=provider)
    report = await flush(sandbox, defaults)
    assert report.phase_two == "done", report.phase_two_error
    limits = [(r.wants_json(), limit_of(r)) for r in fake_openai.requests]
    assert limits[0] == (True, 4096)  # phase one
    assert {limit for wants, limit in limits[1:]} == {16384}  # phase two's turns

    fake_openai.reset()
    chosen = MemoryGenerateConfig(
        phase_one_model="small",
        phase_two_model="small",
        phase_one_model_settings={"max_tokens": 600},
        phase_two_model_settings={"max_tokens": 900},
        model_provider=provider,
    )
    await flush(sandbox, chosen, "r2")
    limits = [(r.wants_json(), limit_of(r)) for r in fake_openai.requests]
    assert limits[0] == (True, 600)
    assert {limit for wants, limit in limits[1:]} == {900}
