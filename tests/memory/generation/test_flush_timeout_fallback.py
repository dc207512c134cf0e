"""Degrade, never go blank, when time runs out: a flush that hits ``flush_timeout_s`` while the
model consolidates (phase two) falls back to the extractive engine as a failed consolidation
does; one that runs out in phase one, with raw memories on disk and no summary yet, does too.
Through the real openai client and the fake server, whose consolidation requests hang."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import openai  # noqa: F401  (imported here: seconds on a busy machine, not inside a timed flush)
import pytest
from fake_openai import FakeOpenAIServer, FakeReply, FakeRequest

from sandmem.memory import MemoryGenerateConfig
from sandmem.memory.generation._attach import get_manager
from sandmem.memory.generation._degrade import FALLBACK_NOTE
from sandmem.memory.layout import MemoryPaths
from sandmem.memory.state import read_log
from sandmem.memory.views._status import memory_status
from sandmem.models import OpenAIProvider
from sandmem.sandboxes import Manifest, SandboxSession, UnixLocalSandboxClient

PATHS = MemoryPaths("memories", "sessions")
#: short enough for a fast test, long enough for phase one's quick answers on a busy machine
FLUSH_TIMEOUT_S = 2.0
#: the flush timeout of a flush whose requests do not hang
NO_HURRY_S = 120.0
#: how long a hanging request waits at most (the test releases it sooner)
HANG_S = 30.0


@pytest.fixture
async def sandbox(tmp_path: Path) -> AsyncIterator[SandboxSession]:
    session = await UnixLocalSandboxClient().create(manifest=Manifest(root=tmp_path / "ws"))
    async with session:
        yield session


@pytest.fixture
def release() -> Iterator[threading.Event]:
    """Set at the end of the test, so no request of the fake server hangs past it."""
    event = threading.Event()
    yield event
    event.set()


@pytest.fixture(params=["responses", "chat_completions"])
async def provider(
    request: pytest.FixtureRequest, fake_openai: FakeOpenAIServer
) -> AsyncIterator[OpenAIProvider]:
    provider = OpenAIProvider(
        base_url=fake_openai.base_url, api=request.param, max_retries=0, timeout=HANG_S * 2
    )
    yield provider
    await provider.aclose()


@pytest.fixture
async def chat_provider(fake_openai: FakeOpenAIServer) -> AsyncIterator[OpenAIProvider]:
    provider = OpenAIProvider(
        base_url=fake_openai.base_url, api="chat_completions", max_retries=0, timeout=HANG_S * 2
    )
    yield provider
    await provider.aclose()


def consolidating(req: FakeRequest) -> bool:
    """A phase-two request: the consolidation agent is offered ``write_file``."""
    return "write_file" in req.tool_names()


def memory_model(req: FakeRequest) -> FakeReply:
    """Both memory phases, done well: phase one names the rollout; the consolidation reads
    ``raw_memories.md``, then writes it, cited, into both files."""
    if req.wants_json():
        rid = re.search(r"Rollout id: (\S+)", req.last_user_text())
        return FakeReply.json(
            {
                "rollout_slug": "task",
                "rollout_summary": f"# Task of {rid and rid.group(1)}\nTests were fixed.",
                "raw_memory": f"- learned in conversation {rid and rid.group(1)}",
            }
        )
    outputs = req.tool_outputs()
    if not outputs:
        return FakeReply(tool_calls=[("read_file", {"path": "memories/raw_memories.md"}, "r")])
    if "w1" in outputs:
        return FakeReply(text="consolidated")
    raw = str(outputs["r"])
    raw += "\nSources: " + ", ".join(dict.fromkeys(re.findall(r"rollout_summaries/\S+?\.md", raw)))
    return FakeReply(
        tool_calls=[
            ("write_file", {"path": "memories/MEMORY.md", "content": raw}, "w1"),
            (
                "write_file",
                {"path": "memories/memory_summary.md", "content": "Summary:\n" + raw},
                "w2",
            ),
        ]
    )


def hanging(release: threading.Event, hang: Any = consolidating) -> Any:
    """``memory_model``, except that the requests ``hang`` picks wait for ``release`` (a
    model slower than the flush timeout)."""

    def handler(req: FakeRequest) -> FakeReply:
        if hang(req):
            release.wait(HANG_S)
        return memory_model(req)

    return handler


def segment(rid: str, task: str) -> dict[str, Any]:
    return {
        "updated_at": "2026-01-01T00:00:00Z",
        "rollout_id": rid,
        "input": [{"role": "user", "content": task}],
        "generated_items": [{"role": "assistant", "content": "ran pytest -q: 3 passed"}],
        "terminal_metadata": {"terminal_state": "completed", "has_final_output": True},
    }


def config(
    provider: OpenAIProvider,
    timeout_s: float = FLUSH_TIMEOUT_S,
    phase_one: str = "extractive",
    **fields: Any,
) -> MemoryGenerateConfig:
    """Phase one by ``phase_one`` (default the extractive engine: instant, so the flush
    timeout falls in phase two whatever the machine's load), phase two by the server."""
    return MemoryGenerateConfig(
        phase_one_model=phase_one,
        phase_two_model="small",
        model_provider=provider,
        flush_timeout_s=timeout_s,
        **fields,
    )


def phase_one_config(provider: OpenAIProvider, timeout_s: float = 4.0) -> MemoryGenerateConfig:
    """Both phases by the server; the timeout leaves time for the phase-one requests that do
    not hang, on a busy machine."""
    return config(provider, timeout_s, phase_one="small")


async def flush(session: SandboxSession, cfg: MemoryGenerateConfig, *rids: str) -> Any:
    session._memory_managers.clear()  # type: ignore[attr-defined]
    manager = get_manager(session, PATHS, cfg)
    manager.detach_stop_hook()
    for rid in rids:
        await manager.record(segment(rid, f"task of {rid}: make the tests pass"))
    return await manager.flush()


def summary_of(session: SandboxSession) -> str:
    path = session.root / "memories/memory_summary.md"
    return path.read_text() if path.exists() else ""


def cited(session: SandboxSession) -> set[str]:
    """The conversations ``MEMORY.md`` cites (by their rollout summaries' names)."""
    memory = (session.root / "memories/MEMORY.md").read_text()
    return set(re.findall(r"rollout_summaries/([a-z])_[\w.-]+\.md", memory))


async def phase_two_records(session: SandboxSession) -> list[dict[str, Any]]:
    return [r for r in await read_log(session, PATHS) if r.get("phase") == "two"]


async def test_a_consolidation_cut_short_by_the_flush_timeout_falls_back(
    sandbox: SandboxSession,
    provider: OpenAIProvider,
    fake_openai: FakeOpenAIServer,
    release: threading.Event,
) -> None:
    fake_openai.handler = hanging(release)
    report = await flush(sandbox, config(provider), "a")

    assert report.timed_out
    assert report.processed == ["a"] and not report.failed  # phase one finished
    assert any(consolidating(r) for r in fake_openai.requests)  # the model was asked
    assert report.phase_two == "fallback"
    assert "timed out" in (report.phase_two_error or "")
    summary = summary_of(sandbox)
    assert summary.startswith(FALLBACK_NOTE) and summary.strip() != FALLBACK_NOTE
    assert cited(sandbox) == {"a"}  # the conversation reached memory
    records = await phase_two_records(sandbox)
    assert records[-2]["status"] == "failed" and "timed out" in records[-2]["error"]
    assert records[-1]["status"] == "fallback" and records[-1]["engine"] == "extractive"
    status = await memory_status(sandbox, PATHS)
    assert status.last_consolidation is not None
    assert status.last_consolidation.status == "fallback"

    # the model is asked again at the next flush, and its consolidation replaces the fallback
    release.set()
    fake_openai.reset()
    retried = await flush(sandbox, config(provider, NO_HURRY_S))
    assert not retried.timed_out and retried.phase_two == "done"
    assert any(consolidating(r) for r in fake_openai.requests)
    summary = summary_of(sandbox)
    assert summary.startswith("Summary:") and FALLBACK_NOTE not in summary


async def test_a_timeout_in_the_first_consolidation_request_falls_back(
    sandbox: SandboxSession,
    chat_provider: OpenAIProvider,
    fake_openai: FakeOpenAIServer,
    release: threading.Event,
) -> None:
    """The first phase-two request never returns (no phase-two usage counted yet): still a
    consolidation cut short, not a flush that never reached phase two."""
    fake_openai.handler = hanging(release)
    report = await flush(sandbox, config(chat_provider), "a", "b")
    assert report.timed_out and sorted(report.processed) == ["a", "b"]
    assert not report.phase_two_usage.output_tokens  # no answer came back
    assert report.phase_two == "fallback"
    assert cited(sandbox) == {"a", "b"}


async def test_a_timeout_in_a_later_consolidation_turn_falls_back(
    sandbox: SandboxSession,
    chat_provider: OpenAIProvider,
    fake_openai: FakeOpenAIServer,
    release: threading.Event,
) -> None:
    """The model read its input (one phase-two request answered), then its writing turn
    hangs."""
    fake_openai.handler = hanging(release, lambda r: consolidating(r) and bool(r.tool_outputs()))
    report = await flush(sandbox, config(chat_provider), "a")
    assert report.timed_out and report.phase_two_usage.requests >= 2
    assert report.phase_two == "fallback"
    assert summary_of(sandbox).startswith(FALLBACK_NOTE)


async def test_a_phase_one_timeout_with_no_summary_yet_consolidates_what_finished(
    sandbox: SandboxSession,
    chat_provider: OpenAIProvider,
    fake_openai: FakeOpenAIServer,
    release: threading.Event,
) -> None:
    """Phase one finished ``a`` and hangs on ``b``; no summary exists: ``a`` reaches memory
    by the extractive engine, ``b`` stays pending for the next flush."""
    fake_openai.handler = hanging(
        release, lambda r: r.wants_json() and "Rollout id: b" in r.last_user_text()
    )
    report = await flush(sandbox, phase_one_config(chat_provider), "a", "b")
    assert report.timed_out
    assert report.processed == ["a"] and "b" in report.failed
    assert not any(consolidating(r) for r in fake_openai.requests)
    assert report.phase_two == "fallback"
    summary = summary_of(sandbox)
    assert summary.startswith(FALLBACK_NOTE)
    assert cited(sandbox) == {"a"}
    state = json.loads((sandbox.root / "memories/generation_state.json").read_text())
    assert state["rollouts"]["b"]["status"] == "pending"


async def test_a_phase_one_timeout_keeps_an_existing_summary(
    sandbox: SandboxSession,
    chat_provider: OpenAIProvider,
    fake_openai: FakeOpenAIServer,
    release: threading.Event,
) -> None:
    """Memory is not blank: the model's earlier consolidation stays; the new conversations
    wait for the next flush."""
    fake_openai.handler = memory_model
    first = await flush(sandbox, phase_one_config(chat_provider, NO_HURRY_S), "a")
    assert first.phase_two == "done"
    before = summary_of(sandbox)
    assert before.startswith("Summary:")

    fake_openai.handler = hanging(
        release, lambda r: r.wants_json() and "Rollout id: c" in r.last_user_text()
    )
    report = await flush(sandbox, phase_one_config(chat_provider), "b", "c")
    assert report.timed_out and "c" in report.failed
    assert report.phase_two == "not_run"
    assert summary_of(sandbox) == before


@pytest.mark.parametrize("how", ["switched off", "review mode"])
async def test_no_fallback_after_a_timeout_when_switched_off_or_in_review_mode(
    sandbox: SandboxSession,
    chat_provider: OpenAIProvider,
    fake_openai: FakeOpenAIServer,
    release: threading.Event,
    how: str,
) -> None:
    fake_openai.handler = hanging(release)
    fields = {"phase_two_fallback": False} if how == "switched off" else {"review": True}
    report = await flush(sandbox, config(chat_provider, **fields), "a")
    assert report.timed_out
    assert report.phase_two == "failed" and "timed out" in (report.phase_two_error or "")
    assert summary_of(sandbox).strip() == ""
    assert all(r["status"] != "fallback" for r in await phase_two_records(sandbox))
