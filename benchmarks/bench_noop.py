"""Figure 4: a flush with nothing to do, over 500 unchanged rollouts of 100 KB.

A session stop flushes memory even when no run happened since the last flush. The workspace
holds 500 rollouts of ~100 KB (50 MB); a first flush (default config, the fake server answering
at once) extracts and consolidates them all; then further flushes find nothing pending, and
phase two has nothing new to consolidate. Those flushes are timed.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from bench_common import Figure, fake_server, median, ms, secs, table, workspace
from bench_model import MemoryModel

from sandmem.memory import MemoryGenerateConfig
from sandmem.memory.generation._attach import get_manager
from sandmem.memory.layout import MemoryPaths
from sandmem.models import OpenAIProvider

PATHS = MemoryPaths("memories", "sessions")
COUNT = 500
ROLLOUT_BYTES = 100 * 1024
REPEAT = 7


def synthetic_rollout(rid: str, size: int = ROLLOUT_BYTES) -> str:
    """A rollout file of about ``size`` bytes: four run segments, each a task, a test run
    with a long log, and an answer. Deterministic."""
    per_segment = size // 4
    lines = []
    for k in range(4):
        log_line = f"tests/test_{rid}.py::test_case_{k} PASSED\n"
        log = log_line * max(1, (per_segment - 600) // (len(log_line) + 1))
        segment = {
            "updated_at": f"2026-05-01T10:{k:02d}:00+00:00",
            "rollout_id": rid,
            "input": [{"role": "user", "content": f"Task {k} of {rid}: make the tests pass."}],
            "generated_items": [
                {
                    "type": "function_call",
                    "call_id": f"c{k}",
                    "name": "exec_command",
                    "arguments": '{"cmd": "pytest -q"}',
                },
                {"type": "function_call_output", "call_id": f"c{k}", "output": log},
                {"role": "assistant", "content": f"Task {k}: the tests pass."},
            ],
            "final_output": f"Task {k}: the tests pass.",
            "terminal_metadata": {
                "terminal_state": "completed",
                "exception_type": None,
                "exception_message": None,
                "has_final_output": True,
            },
        }
        lines.append(json.dumps(segment) + "\n")
    return "".join(lines)


async def _measure(count: int, size: int, repeat: int) -> dict[str, Any]:
    with fake_server(MemoryModel()) as server:
        provider = OpenAIProvider(base_url=server.base_url, api_key="bench")
        config = MemoryGenerateConfig(model_provider=provider, phase_one_concurrency=16)
        try:
            async with workspace() as session:
                total = 0
                for i in range(count):
                    text = synthetic_rollout(f"noop-{i:04d}", size)
                    total += len(text)
                    await session.write(PATHS.rollout_file(f"noop-{i:04d}"), text)
                manager = get_manager(session, PATHS, config)
                started = time.perf_counter()
                first = await manager.flush()
                first_s = time.perf_counter() - started
                if len(first.processed) != count or first.phase_two != "done":
                    raise RuntimeError(
                        f"the first flush did not complete: {len(first.processed)} processed, "
                        f"failed {first.failed}, phase two {first.phase_two}"
                    )
                server.reset()
                samples = []
                for _ in range(repeat):
                    started = time.perf_counter()
                    report = await manager.flush()
                    samples.append(time.perf_counter() - started)
                    if report.processed or report.failed or report.phase_two != "skipped":
                        raise RuntimeError(f"a no-op flush did work: {report}")
                requests = len(server.requests)
        finally:
            await provider.aclose()
    return {
        "first_s": first_s,
        "noop_s": median(samples),
        "max_s": max(samples),
        "requests": requests,
        "total_bytes": total,
        "count": count,
        "repeat": repeat,
    }


def run(count: int = COUNT, size: int = ROLLOUT_BYTES, repeat: int = REPEAT) -> Figure:
    data = asyncio.run(_measure(count, size, repeat))
    rows = [
        ["first flush (extracts and consolidates all)", secs(data["first_s"])],
        [f"no-op flush (median of {repeat})", ms(data["noop_s"])],
        [f"no-op flush (slowest of {repeat})", ms(data["max_s"])],
    ]
    body = (
        f"{count} rollouts, {data['total_bytes'] / 1e6:.1f} MB in all (about {size // 1024} KB "
        "each, four segments), default `MemoryGenerateConfig` with `model_provider` set to the "
        "fake server and `phase_one_concurrency=16` (for the first flush only; it answers at "
        "once). The no-op flushes sent "
        f"{data['requests']} model requests.\n\n" + table(["flush", "wall time"], rows)
    )
    meaning = (
        f"With nothing changed, a flush costs {ms(data['noop_s'])}: "
        f"{data['noop_s'] / data['first_s'] * 100:.2f}% of the first flush. It lists the "
        "rollouts and raw memories, takes the layout lock, and decides from what it finds "
        "that no rollout is pending and that the selection is unchanged."
    )
    status = None
    if count == COUNT and size == ROLLOUT_BYTES:
        verdict = "met" if data["noop_s"] <= 0.050 else "MISSED"
        status = (
            f"no-op flush over {count} unchanged {size // 1024} KB rollouts: "
            f"{ms(data['noop_s'])} (target <= 50 ms): **{verdict}**."
        )
    return Figure(
        "noop",
        4,
        "A flush with nothing to do over 500 unchanged 100 KB rollouts",
        body,
        meaning,
        status,
        data,
    )
