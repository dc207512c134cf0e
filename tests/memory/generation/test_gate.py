"""Phase one's request gate: adaptive by default (starts at ``phase_one_max_concurrency``,
halves when the server pushes back, grows again on success), pinned by
``phase_one_concurrency``. A 429 is sent again within the flush and never uses an attempt."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
from fake_openai import FakeOpenAIServer, FakeReply, FakeRequest
from memory_doubles import phase_two_model

from sandmem._errors import ModelRequestError
from sandmem.memory import MemoryGenerateConfig
from sandmem.memory.generation import _gate
from sandmem.memory.generation._attach import get_manager
from sandmem.memory.generation._gate import AdaptiveGate, FixedGate, pushback
from sandmem.memory.layout import MemoryPaths
from sandmem.models import OpenAIProvider
from sandmem.sandboxes import Manifest, SandboxSession, UnixLocalSandboxClient

PATHS = MemoryPaths("memories", "sessions")
SERVER_LIMIT = 6


def segment(rid: str, minute: int) -> str:
    return (
        json.dumps(
            {
                "updated_at": f"2026-05-01T10:{minute % 60:02d}:00+00:00",
                "rollout_id": rid,
                "input": [{"role": "user", "content": f"Task {rid}: fix the invoice total"}],
                "generated_items": [{"role": "assistant", "content": "Fixed."}],
                "terminal_metadata": {"terminal_state": "completed"},
            }
        )
        + "\n"
    )


def slow_extract(req: FakeRequest) -> FakeReply:
    reply = FakeReply.json(
        {
            "rollout_slug": "fix-invoice-total",
            "rollout_summary": "The agent fixed the invoice total.",
            "raw_memory": "- the invoice total was fixed",
        }
    )
    reply.delay_s = 0.05
    return reply


@pytest.fixture
async def sandbox(tmp_path: Path) -> AsyncIterator[SandboxSession]:
    client = UnixLocalSandboxClient()
    session = await client.create(manifest=Manifest(root=tmp_path / "ws"))
    await session.start()
    yield session
    await client.delete(session)


class StoppedClock:
    """The gate's clock, moved only by the test: in a test that is not about latency it stands
    still, so the latency signal (a request ``LATENCY_FACTOR`` times slower than the fastest)
    never fires on a busy machine's jitter (a 5 ms request can take 4 times as long there)."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now


async def flush(
    sandbox: SandboxSession,
    server: FakeOpenAIServer,
    count: int,
    handler: Callable[[FakeRequest], FakeReply] = slow_extract,
    **config: int,
) -> tuple[AdaptiveGate | FixedGate, dict[str, dict[str, object]]]:
    for index in range(count):
        await sandbox.write(PATHS.rollout_file(f"c-{index:03d}"), segment(f"c-{index}", index))
    server.handler = handler
    provider = OpenAIProvider(base_url=server.base_url, api_key="test", max_retries=0)
    manager = get_manager(
        sandbox,
        PATHS,
        MemoryGenerateConfig(
            phase_one_model="extract-model",
            phase_two_model=phase_two_model(),
            model_provider=provider,
            **config,
        ),
    )
    manager.detach_stop_hook()
    report = await manager.flush()
    assert not report.failed and len(report.processed) == count
    state = json.loads(await sandbox.read_bytes(PATHS.state_json))
    gate = manager.last_gate
    assert isinstance(gate, AdaptiveGate | FixedGate)
    return gate, state["rollouts"]


async def test_the_default_starts_wide(
    sandbox: SandboxSession, fake_openai: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_gate, "time", StoppedClock())

    def held(req: FakeRequest) -> FakeReply:
        """Replies wait until 12 requests were in flight at once (10 s at most): a gate that
        let fewer through fails the test, and a loaded machine sending slowly does not."""
        deadline = time.monotonic() + 10
        while fake_openai.max_in_flight < 12 and time.monotonic() < deadline:
            time.sleep(0.005)
        return slow_extract(req)

    gate, _ = await flush(sandbox, fake_openai, 16, held)
    assert isinstance(gate, AdaptiveGate)
    assert fake_openai.max_in_flight >= 12  # (some finish before the last is sent)
    assert len(fake_openai.requests) == 16
    assert gate.rejections == 0 and gate.limit == 16


async def test_a_pinned_concurrency_pins(
    sandbox: SandboxSession, fake_openai: FakeOpenAIServer
) -> None:
    fake_openai.limit_in_flight(SERVER_LIMIT)
    gate, _ = await flush(sandbox, fake_openai, 12, phase_one_concurrency=SERVER_LIMIT)
    assert isinstance(gate, FixedGate)
    assert fake_openai.max_in_flight == SERVER_LIMIT
    assert fake_openai.rate_limited == []


async def test_it_adapts_to_a_server_that_rejects_above_six(
    sandbox: SandboxSession, fake_openai: FakeOpenAIServer
) -> None:
    fake_openai.limit_in_flight(SERVER_LIMIT)
    gate, rollouts = await flush(sandbox, fake_openai, 64)
    assert isinstance(gate, AdaptiveGate)
    # every conversation extracted in this flush, no attempt used by a 429
    assert all(entry["status"] == "done" for entry in rollouts.values())
    assert all(entry["attempts"] == 0 for entry in rollouts.values())
    assert fake_openai.max_in_flight <= SERVER_LIMIT
    assert 1 <= gate.limit <= SERVER_LIMIT + 1
    # it adapted within the first burst: after the first 32 requests, few rejections
    late = sorted(r.received_at for r in fake_openai.requests)[32]
    assert len([t for t in fake_openai.rate_limited if t >= late]) <= 3


def _rejecting(state: dict[str, int], limit: int) -> object:
    async def call() -> str:
        state["in"] += 1
        try:
            if state["in"] > limit:
                raise ModelRequestError("HTTP 429", status_code=429, retryable=True)
            await asyncio.sleep(0.005)
            return "ok"
        finally:
            state["in"] -= 1

    return call


async def test_the_window_halves_once_per_burst_and_grows_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    gate = AdaptiveGate(16)
    state = {"in": 0}
    results = await asyncio.gather(*(gate.run(_rejecting(state, 6)) for _ in range(16)))  # type: ignore[arg-type]
    assert results == ["ok"] * 16
    assert 1 <= gate.rejections <= 3 and gate.limit <= 6
    assert gate.resends == gate.rejections
    # a server that takes everything: the window grows back to the ceiling in steps
    gate._cap = gate.ceiling  # (after PROBE_AFTER successes it would lift by one at a time)
    before = gate.limit
    monkeypatch.setattr(_gate, "time", StoppedClock())  # no request is "slow" (see the class)
    await asyncio.gather(*(gate.run(_rejecting({"in": 0}, 100)) for _ in range(40)))  # type: ignore[arg-type]
    assert before < gate.limit <= gate.ceiling


async def test_a_request_much_slower_than_the_fastest_narrows_the_window(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = StoppedClock()
    monkeypatch.setattr(_gate, "time", clock)

    def taking(seconds: float) -> Callable[[], Awaitable[str]]:
        async def call() -> str:
            clock.now += seconds
            return "ok"

        return call

    gate = AdaptiveGate(8)
    for _ in range(_gate.LATENCY_SAMPLES + 1):  # the fastest seen: 1 s
        await gate.run(taking(1.0))
    await gate.run(taking(_gate.LATENCY_FACTOR))  # as slow as allowed: no pushback
    assert gate.limit == 8
    await gate.run(taking(_gate.LATENCY_FACTOR + 0.5))  # slower: the server is pushing back
    assert gate.limit <= 4 and gate.rejections == 0


async def test_errors_that_are_not_pushback_fail_at_once() -> None:
    gate = AdaptiveGate(4)
    calls = 0

    async def bad_request() -> str:
        nonlocal calls
        calls += 1
        raise ModelRequestError("HTTP 400", status_code=400, retryable=False)

    with pytest.raises(ModelRequestError):
        await gate.run(bad_request)
    assert calls == 1 and gate.limit == 4 and gate.in_flight == 0

    async def down() -> str:
        nonlocal calls
        calls += 1
        raise ModelRequestError("could not reach the server", retryable=True)

    calls = 0
    with pytest.raises(ModelRequestError):
        await gate.run(down)
    assert calls == 3  # sent again twice, then an environment failure (no attempt used)
    assert gate.limit < 4 and gate.in_flight == 0
    assert pushback(ModelRequestError("x", status_code=503, retryable=True)) is None
