"""Figure 3: appending run segments of ~20 KB with ``manager.record``.

``record`` redacts the segment, serialises it to one JSON line and appends it under the
sessions lock. First, 16 appends (16 rollouts, as 16 runs ending at once would make) issued
concurrently and one after another. Then K appends to one rollout, each timed alone, with the
bytes each wrote measured as the growth of the rollout file.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from collections.abc import Sequence
from typing import Any

from bench_common import Figure, median, ms, table, workspace

from sandmem.memory import MemoryGenerateConfig
from sandmem.memory.generation._attach import get_manager
from sandmem.memory.layout import MemoryPaths

PATHS = MemoryPaths("memories", "sessions")
SIZES = (10, 100, 1000)
REPEAT = 5
SEGMENT_BYTES = 20_000
ROLLOUT_ID = "append-bench"

_WORDS = ("alpha", "build", "cache", "delta", "error", "fixture", "gateway", "handler", "index")


def make_segment(k: int, size: int = SEGMENT_BYTES, rollout_id: str = ROLLOUT_ID) -> dict[str, Any]:
    """Run segment number ``k``: a user message, an ``exec_command`` call and an output of
    test-log lines padding the JSON line to about ``size`` bytes. Deterministic."""
    rng = random.Random(k)
    lines: list[str] = []
    total = 0
    while total < size - 300:
        word = rng.choice(_WORDS)
        line = f"tests/test_{word}.py::test_{word}_{rng.randrange(10_000)} PASSED [{k % 100:3d}%]"
        lines.append(line)
        total += len(line) + 3  # the newline is escaped as two bytes in JSON
    call_id = f"call_{k:06d}"
    return {
        "updated_at": f"2025-06-01T{k // 3600 % 24:02d}:{k // 60 % 60:02d}:{k % 60:02d}+00:00",
        "rollout_id": rollout_id,
        "input": [{"type": "message", "role": "user", "content": f"Run the tests, step {k}."}],
        "generated_items": [
            {
                "type": "function_call",
                "call_id": call_id,
                "name": "exec_command",
                "arguments": '{"cmd": "pytest -q"}',
            },
            {"type": "function_call_output", "call_id": call_id, "output": "\n".join(lines)},
            {"type": "message", "role": "assistant", "content": f"Step {k}: all tests pass."},
        ],
        "final_output": f"Step {k}: all tests pass.",
        "terminal_metadata": {
            "terminal_state": "completed",
            "exception_type": None,
            "exception_message": None,
            "has_final_output": True,
        },
    }


async def _append_run(k: int) -> tuple[list[float], list[int]]:
    """Seconds and file growth in bytes of each of ``k`` appends to one fresh rollout."""
    segments = [make_segment(i) for i in range(k)]
    config = MemoryGenerateConfig(phase_one_model="extractive", phase_two_model="extractive")
    times: list[float] = []
    growth: list[int] = []
    async with workspace() as session:
        manager = get_manager(session, PATHS, config)
        await manager.prepare()
        host_file = session.root / PATHS.rollout_file(ROLLOUT_ID)
        size = 0
        for segment in segments:
            started = time.perf_counter()
            await manager.record(segment)
            times.append(time.perf_counter() - started)
            new_size = os.stat(host_file).st_size
            growth.append(new_size - size)
            size = new_size
    return times, growth


async def _burst(count: int, repeat: int) -> dict[str, float]:
    """Wall time of ``count`` appends to ``count`` rollouts, concurrent and sequential (median
    of ``repeat`` rounds each, alternating, each round in a fresh workspace)."""
    config = MemoryGenerateConfig(phase_one_model="extractive", phase_two_model="extractive")
    segments = [make_segment(i, rollout_id=f"burst-{i:02d}") for i in range(count)]
    concurrent: list[float] = []
    sequential: list[float] = []
    for _ in range(repeat):
        for mode in ("concurrent", "sequential"):
            async with workspace() as session:
                manager = get_manager(session, PATHS, config)
                await manager.prepare()
                started = time.perf_counter()
                if mode == "concurrent":
                    await asyncio.gather(*(manager.record(seg) for seg in segments))
                    concurrent.append(time.perf_counter() - started)
                else:
                    for seg in segments:
                        await manager.record(seg)
                    sequential.append(time.perf_counter() - started)
                names = await session.listdir(PATHS.sessions_dir)
                files = [n for n in names if n.endswith(".jsonl")]
                if len(files) != count:
                    raise RuntimeError(f"{mode} appends wrote {len(files)} rollouts, not {count}")
    return {"concurrent": median(concurrent), "sequential": median(sequential)}


async def _measure(
    sizes: Sequence[int], repeat: int, burst: int
) -> tuple[dict[int, dict[str, float]], dict[str, float]]:
    await _append_run(3)  # warm-up: imports, redaction patterns
    bursts = await _burst(burst, max(repeat, 7))
    result: dict[int, dict[str, float]] = {}
    for k in sizes:
        mean_time, head, tail, mean_bytes, max_bytes, file_mb = [], [], [], [], [], []
        window = max(1, min(10, k // 10))
        for _ in range(repeat):
            times, growth = await _append_run(k)
            mean_time.append(sum(times) / k)
            head.append(median(times[:window]))
            tail.append(median(times[-window:]))
            mean_bytes.append(sum(growth) / k)
            max_bytes.append(max(growth))
            file_mb.append(sum(growth) / 1e6)
        result[k] = {
            "per_append": median(mean_time),
            "first": median(head),
            "last": median(tail),
            "bytes": median(mean_bytes),
            "max_bytes": max(max_bytes),
            "file_mb": median(file_mb),
            "window": window,
        }
    return result, bursts


BURST = 16


def run(sizes: Sequence[int] = SIZES, repeat: int = REPEAT, burst: int = BURST) -> Figure:
    result, bursts = asyncio.run(_measure(sizes, repeat, burst))
    ratio = bursts["concurrent"] / bursts["sequential"]
    rows = [
        [
            k,
            ms(r["per_append"]),
            ms(r["first"]),
            ms(r["last"]),
            round(r["bytes"]),
            int(r["max_bytes"]),
            f"{r['file_mb']:.1f} MB",
        ]
        for k, r in result.items()
    ]
    headers = [
        "K appends",
        "time per append",
        "first appends",
        "last appends",
        "bytes written per append (mean)",
        "largest append (bytes)",
        "final file",
    ]
    burst_rows = [
        [f"{burst} concurrent (`asyncio.gather`)", ms(bursts["concurrent"])],
        [f"{burst} one after another", ms(bursts["sequential"])],
        ["concurrent / sequential", f"{ratio:.2f}x"],
    ]
    body = (
        f"**{burst} appends at once.** {burst} segments of ~{SEGMENT_BYTES // 1000} KB, one "
        f"per rollout, recorded by one manager: median wall time of {max(repeat, 7)} rounds "
        "each.\n\n"
        + table(["appends", "wall time"], burst_rows)
        + "\n\n**K appends to one rollout.** "
        f"Median over {repeat} runs; each run appends K segments (~{SEGMENT_BYTES // 1000} KB "
        "JSON lines: a user message, an `exec_command` call, ~19 KB of test-log output, a "
        'final answer) to one fresh rollout with `manager.record(segment)`. "time per append" '
        'is the mean over the K appends; "first" / "last appends" are the median of the '
        "first and the last min(10, K/10) appends; bytes written are the file's growth per "
        "append.\n\n" + table(headers, rows)
    )
    small, large = min(result), max(result)
    growth = result[large]["per_append"] / result[small]["per_append"]
    meaning = (
        f"{burst} concurrent appends took {ratio:.2f}x the time of {burst} sequential ones "
        f"({ms(bursts['concurrent'])} against {ms(bursts['sequential'])}): tasks of one "
        "process queue on the in-process lock in front of the file lock and are woken as soon "
        f"as it is free. An append to a rollout of {large:,} segments took {growth:.2f}x the "
        f"time of one to a rollout of {small:,}, and wrote "
        f"{result[large]['bytes'] / result[small]['bytes']:.2f}x the bytes: each append writes "
        "its own line (`O_APPEND`), never the rest of the file. Rewriting the file on each "
        f"append would write about {large:,} x {SEGMENT_BYTES // 1000} KB on the last one."
    )
    status = None
    if burst == BURST:
        verdict = "met" if ratio <= 2.0 else "MISSED"
        status = (
            f"{burst} concurrent appends take {ratio:.2f}x the time of {burst} sequential ones "
            f"(target <= 2x): **{verdict}**."
        )
    return Figure(
        "append",
        3,
        "Appending segments of ~20 KB: 16 at once, and K to one rollout",
        body,
        meaning,
        status,
        {"result": result, "bursts": bursts},
    )
