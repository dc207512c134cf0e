"""Figure 13: adaptive phase-one concurrency against the fake server at 300 ms a request.

Two parts, both with the real pipeline (``manager.flush()``, ``bench_flush.flush_once``):

- a flush of 16 rollouts with the default (adaptive) concurrency against the same flush
  pinned at ``phase_one_concurrency=16``, median of ``REPEAT`` each;
- a flush of 64 rollouts with the default concurrency against a server that answers HTTP 429
  to any request arriving while 6 are in flight (``FakeOpenAIServer.limit_in_flight(6)``;
  the provider's own retries off, ``max_retries=0``, so every 429 reaches the gate): its time,
  the 429s in all and after the first 32 requests, and the attempts used (from
  ``generation_state.json``).
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from bench_common import Figure, fake_server, median, secs, table, workspace
from bench_flush import PATHS, MemoryModel, flush_once

from sandmem.memory import MemoryGenerateConfig
from sandmem.memory.generation._attach import get_manager
from sandmem.memory.generation._gate import AdaptiveGate
from sandmem.models import OpenAIProvider

DELAY_S = 0.3
REPEAT = 3
SERVER_LIMIT = 6
TARGET_RATIO = 1.2


async def _limited(server: Any, provider: OpenAIProvider, n: int) -> dict[str, Any]:
    from bench_common import corpus

    texts = list(corpus().items())
    config = MemoryGenerateConfig(model_provider=provider)
    async with workspace() as session:
        for i in range(n):
            name, text = texts[i % len(texts)]
            await session.write(PATHS.rollout_file(f"{name}-{i:03d}"), text)
        manager = get_manager(session, PATHS, config)
        manager.detach_stop_hook()
        await manager.prepare()
        server.reset()
        server.limit_in_flight(SERVER_LIMIT)
        started = time.perf_counter()
        report = await manager.flush()
        elapsed = time.perf_counter() - started
        server.limit_in_flight(None)
        state = json.loads(await session.read_bytes(PATHS.state_json))
    requests = sorted(r.received_at for r in server.requests)
    late = requests[32] if len(requests) > 32 else float("inf")
    gate = manager.last_gate
    return {
        "n": n,
        "seconds": elapsed,
        "processed": len(report.processed),
        "failed": len(report.failed),
        "attempts": sum(int(e.get("attempts") or 0) for e in state["rollouts"].values()),
        "requests": len(requests),
        "rejected": len(server.rate_limited),
        "rejected_late": len([t for t in server.rate_limited if t >= late]),
        "peak": server.max_in_flight,
        "limit": gate.limit if isinstance(gate, AdaptiveGate) else None,
    }


async def _measure(n: int, big: int, repeat: int) -> dict[str, Any]:
    handler = MemoryModel()
    with fake_server(handler) as server:
        provider = OpenAIProvider(base_url=server.base_url, api_key="bench", timeout=60.0)
        strict = OpenAIProvider(
            base_url=server.base_url, api_key="bench", timeout=60.0, max_retries=0
        )
        try:
            await flush_once(server, provider, 2, 2)  # warm-up
            handler.delay_s = DELAY_S
            default = [await flush_once(server, provider, n, 0) for _ in range(repeat)]
            pinned = [await flush_once(server, provider, n, n) for _ in range(repeat)]
            limited = await _limited(server, strict, big)
        finally:
            await provider.aclose()
            await strict.aclose()
    return {
        "default": median([c["seconds"] for c in default]),
        "default_peak": max(c["peak"] for c in default),
        "pinned": median([c["seconds"] for c in pinned]),
        "pinned_peak": max(c["peak"] for c in pinned),
        "limited": limited,
    }


def run(n: int = 16, big: int = 64, repeat: int = REPEAT) -> Figure:
    r = asyncio.run(_measure(n, big, repeat))
    lim = r["limited"]
    ratio = r["default"] / r["pinned"] if r["pinned"] else 0.0
    rows = [
        [f"{n} rollouts, default (adaptive)", secs(r["default"]), r["default_peak"], "-", "-"],
        [
            f"{n} rollouts, `phase_one_concurrency={n}`",
            secs(r["pinned"]),
            r["pinned_peak"],
            "-",
            "-",
        ],
        [
            f"{big} rollouts, default, server 429s above {SERVER_LIMIT} in flight",
            secs(lim["seconds"]),
            lim["peak"],
            f"{lim['rejected']} ({lim['rejected_late']} after the first 32 requests)",
            lim["attempts"],
        ],
    ]
    body = (
        f"The fake OpenAI server answers each request after {DELAY_S * 1000:.0f} ms. Medians of "
        f"{repeat} flushes for the first two rows, one flush for the third (see the module "
        "docstring).\n\n"
        + table(["flush", "time", "peak in flight", "HTTP 429s", "attempts used"], rows)
    )
    meaning = (
        f"By default phase one starts at `phase_one_max_concurrency` and sends all {n} "
        f"extractions at once: {ratio:.2f}x the pinned time. Against a server that takes "
        f"{SERVER_LIMIT} at a time, the gate halved on the first burst of 429s and settled at "
        f"{lim['limit']:.1f} in flight; all {lim['processed']} of {big} rollouts were extracted "
        f"in the one flush ({lim['failed']} failed), {lim['requests']} requests in all, and no "
        "429 used an attempt."
    )
    ok_ratio = ratio <= TARGET_RATIO
    ok_limited = lim["processed"] == big and lim["attempts"] == 0 and lim["rejected_late"] <= 3
    status = (
        f"default flush of {n} within {TARGET_RATIO}x of pinned {n}: {ratio:.2f}x, "
        f"{'met' if ok_ratio else '**MISSED**'}; flush of {big} against a 429 server completes "
        f"with no attempt used and at most 3 429s after adapting: "
        f"{'met' if ok_limited else '**MISSED**'}"
    )
    return Figure("adaptive", 13, "Adaptive phase-one concurrency", body, meaning, status, dict(r))
