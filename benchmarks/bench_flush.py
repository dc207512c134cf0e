"""Figure 1: the default flush, through the real OpenAI model classes, against the fake server.

Each repetition builds a fresh workspace with N pending rollouts (the corpus files, cycled) and
times ``MemoryGenerationManager.flush()`` with the **default** ``MemoryGenerateConfig`` except
``model_provider`` (an ``OpenAIProvider`` pointed at the repo's fake OpenAI server, so both
phases go through ``OpenAIResponsesModel`` and the real ``openai`` client). Phase one asks the
model once per rollout; phase two runs the consolidation agent with its tools. The server
answers as ``bench_model.MemoryModel`` scripts it, after a fixed delay per request.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

from bench_common import Figure, corpus, fake_server, median, secs, table, workspace
from bench_model import MemoryModel, is_phase_one, request_tokens

from sandmem.memory import MemoryGenerateConfig
from sandmem.memory.generation._attach import get_manager
from sandmem.memory.layout import MemoryPaths
from sandmem.models import OpenAIProvider

PATHS = MemoryPaths("memories", "sessions")
SIZES = (1, 4, 16, 64)
DELAYS = (0.0, 0.3)
REPEAT = 5
#: repetitions of cells whose flush takes longer than SLOW_CELL_S
SLOW_REPEAT = 3
SLOW_CELL_S = 3.0
#: the key of the default cells: phase one's adaptive concurrency (``phase_one_concurrency``
#: unset), which starts at ``phase_one_max_concurrency``
DEFAULT_CONCURRENCY = 0
CEILING = MemoryGenerateConfig().phase_one_max_concurrency

Cell = dict[str, Any]


async def flush_once(server: Any, provider: OpenAIProvider, n: int, concurrency: int) -> Cell:
    """One timed flush of ``n`` pending rollouts: seconds, requests and tokens by phase."""
    texts = list(corpus().items())
    config = MemoryGenerateConfig(
        model_provider=provider, phase_one_concurrency=concurrency or None
    )
    async with workspace() as session:
        for i in range(n):
            name, text = texts[i % len(texts)]
            await session.write(PATHS.rollout_file(f"{name}-{i:03d}"), text)
        manager = get_manager(session, PATHS, config)
        await manager.prepare()
        server.reset()
        started = time.perf_counter()
        report = await manager.flush()
        elapsed = time.perf_counter() - started
        requests = list(server.requests)
    if len(report.processed) != n or report.phase_two != "done":
        raise RuntimeError(
            f"flush of {n} rollouts did not complete: processed {len(report.processed)}, "
            f"failed {report.failed}, phase two {report.phase_two} {report.phase_two_error}"
        )
    one = [r for r in requests if is_phase_one(r)]
    two = [r for r in requests if not is_phase_one(r)]
    first_two = min((r.received_at for r in two), default=started + elapsed)
    return {
        "seconds": elapsed,
        "p1_requests": len(one),
        "p2_requests": len(two),
        "p1_tokens": sum(request_tokens(r) for r in one),
        "p2_tokens": sum(request_tokens(r) for r in two),
        # phase one ends when phase two's first request leaves (plus the plan in between)
        "phase_two_s": started + elapsed - first_two,
        "peak": server.max_in_flight,
    }


def _concurrencies(n: int) -> list[int]:
    return [DEFAULT_CONCURRENCY] if n <= 1 else [DEFAULT_CONCURRENCY, n]


async def _measure(
    sizes: Sequence[int], delays: Sequence[float], repeat: int, slow_repeat: int
) -> dict[tuple[float, int, int], Cell]:
    handler = MemoryModel()
    cells: dict[tuple[float, int, int], Cell] = {}
    with fake_server(handler) as server:
        provider = OpenAIProvider(base_url=server.base_url, api_key="bench", timeout=60.0)
        try:
            await flush_once(server, provider, 2, 2)  # warm-up: imports, client, prompts
            for delay in delays:
                handler.delay_s = delay
                for n in sizes:
                    for c in _concurrencies(n):
                        runs = [await flush_once(server, provider, n, c)]
                        reps = slow_repeat if runs[0]["seconds"] > SLOW_CELL_S else repeat
                        runs += [await flush_once(server, provider, n, c) for _ in range(reps - 1)]
                        cell = {k: median([r[k] for r in runs]) for k in runs[0]}
                        cell["peak"] = max(r["peak"] for r in runs)
                        cell["runs"] = reps
                        cells[(delay, n, c)] = cell
        finally:
            await provider.aclose()
    return cells


def _row(delay: float, n: int, c: int, cell: Cell) -> list[object]:
    c_label = "adaptive (default)" if c == DEFAULT_CONCURRENCY else f"{c} (= N)"
    requests = int(cell["p1_requests"] + cell["p2_requests"])
    return [
        f"{delay * 1000:.0f} ms",
        n,
        c_label,
        f"{secs(cell['seconds'])} ({int(cell['runs'])} runs)",
        secs(cell["seconds"] - cell["phase_two_s"]),
        secs(cell["phase_two_s"]),
        f"{int(cell['p1_requests'])} + {int(cell['p2_requests'])} = {requests}",
        f"{'yes' if requests <= n + 1 else 'no'}",
        f"{int(cell['p1_tokens']):,} + {int(cell['p2_tokens']):,}",
    ]


def run(
    sizes: Sequence[int] = SIZES,
    delays: Sequence[float] = DELAYS,
    repeat: int = REPEAT,
    slow_repeat: int = SLOW_REPEAT,
) -> Figure:
    cells = asyncio.run(_measure(sizes, delays, repeat, slow_repeat))
    headers = [
        "delay per request",
        "N rollouts",
        "phase_one_concurrency",
        "flush (median)",
        "phase one",
        "phase two",
        "requests (phase one + two)",
        "<= N + 1",
        "request tokens (one + two)",
    ]
    rows = [_row(d, n, c, cell) for (d, n, c), cell in cells.items()]
    body = (
        "Median wall time of `manager.flush()` with the default `MemoryGenerateConfig` (only "
        "`model_provider` set: `OpenAIProvider(base_url=<fake server>)`, Responses API, the "
        "real `openai` client), over the runs marked. Each run flushes N new rollouts (the 12 "
        "corpus files, 2.5-207 KB, cycled) in a fresh local workspace. The fake server "
        "(`tests/fake_openai.py`) holds every reply for the delay shown, then answers as "
        '`benchmarks/bench_model.py` scripts a capable model (see its docstring). "phase two" '
        "runs from the server's receipt of the first consolidation request to the end of the "
        'flush; "phase one" is the rest (pending scan, extraction, selection). Requests and '
        "tokens are counted at the server (tokens = request body bytes / 4).\n\n"
        + table(headers, rows)
    )
    meaning = _meaning(cells)
    return Figure(
        "flush",
        1,
        "The default flush against the fake OpenAI server",
        body,
        meaning,
        _status(cells),
        {"cells": cells},
    )


def _meaning(cells: dict[tuple[float, int, int], Cell]) -> str:
    parts = []
    slow = {k: v for k, v in cells.items() if k[0] > 0}
    for (delay, n, c), cell in sorted(slow.items()):
        if n <= 1 or c != DEFAULT_CONCURRENCY:
            continue
        waves = -(-n // min(n, CEILING)) + int(cell["p2_requests"])
        parts.append(
            f"at N = {n}, adaptive concurrency: {waves} request waves x {delay * 1000:.0f} ms = "
            f"{secs(waves * delay)} of waiting, measured {secs(cell['seconds'])}"
        )
    fixed = [
        f"N = {n}: {secs(cell['seconds'])}"
        for (delay, n, c), cell in sorted(cells.items())
        if delay == 0 and c == _concurrencies(n)[-1]
    ]
    text = (
        "A flush waits for ceil(N / concurrency) phase-one request waves plus phase two's "
        "requests; everything else is the fixed cost, shown by the rows at 0 ms"
    )
    if fixed:
        text += " (" + "; ".join(fixed) + ")"
    text += "."
    if parts:
        text += " Waiting against measured: " + "; ".join(parts) + "."
    return text


_TARGETS = (
    ((1, DEFAULT_CONCURRENCY), 0.70, "flush of 1 rollout"),
    ((16, DEFAULT_CONCURRENCY), 1.8, "flush of 16 rollouts at default concurrency"),
    ((16, 16), 0.75, "flush of 16 rollouts at concurrency 16"),
)


def _status(cells: dict[tuple[float, int, int], Cell]) -> str | None:
    lines = []
    for (n, c), target, what in _TARGETS:
        cell = cells.get((0.3, n, c))
        if cell is None:
            continue
        verdict = "met" if cell["seconds"] <= target else "MISSED"
        lines.append(
            f"{what} at 300 ms per request: {secs(cell['seconds'])} (target <= "
            f"{target:.2f} s): **{verdict}**"
        )
    default, pinned = cells.get((0.3, 16, DEFAULT_CONCURRENCY)), cells.get((0.3, 16, 16))
    if default is not None and pinned is not None:
        ratio = default["seconds"] / pinned["seconds"]
        verdict = "met" if ratio <= 1.2 else "MISSED"
        lines.append(
            f"default (adaptive) flush of 16 against pinned `phase_one_concurrency=16`: "
            f"{ratio:.2f}x (target <= 1.2x): **{verdict}**"
        )
    counted = [
        (n, int(cell["p1_requests"] + cell["p2_requests"])) for (_, n, _), cell in cells.items()
    ]
    if lines:
        worst = max(req - n for n, req in counted)
        verdict = "met" if worst <= 1 else "MISSED"
        lines.append(
            f"model requests per flush: at most N + {worst} over every cell (target <= N + 1): "
            f"**{verdict}**"
        )
    return "; ".join(lines) + "." if lines else None
