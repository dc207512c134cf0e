"""Figure 8: the model-free ``extractive`` engine over 1,000 rollouts.

1,000 synthetic rollouts are derived deterministically from the 12-rollout corpus: rollout
``i`` is corpus file ``i % 12`` with its own rollout id, its timestamps shifted by ``i`` x 7
minutes, and domain words swapped for others chosen by a generator seeded with ``i`` (letters
for letters, so every JSON line stays as valid, or as torn, as in the corpus). Each repetition
writes them to a fresh workspace and times ``manager.flush()`` with
``phase_one_model="extractive"`` and ``phase_two_model="extractive"``: the real pipeline,
with its file I/O, generation state and log.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import time
from datetime import datetime, timedelta
from typing import Any

from bench_common import Figure, corpus, median, ms, secs, table, workspace

from sandmem.memory import MemoryGenerateConfig
from sandmem.memory.extractive import extract
from sandmem.memory.generation._attach import get_manager
from sandmem.memory.layout import MemoryPaths

PATHS = MemoryPaths("memories", "sessions")
COUNT = 1000
REPEAT = 5

#: corpus words and what a synthetic rollout may say instead (letters only)
SWAPS: dict[str, tuple[str, ...]] = {
    "invoice": ("receipt", "order", "quote", "refund", "payout"),
    "staging": ("preprod", "canary", "sandbox", "qa"),
    "redis": ("memcached", "valkey", "dragonfly"),
    "sales": ("revenue", "bookings", "signups"),
    "region": ("market", "territory", "country"),
    "navbar": ("sidebar", "toolbar", "footer"),
    "logo": ("banner", "badge", "icon"),
    "email": ("newsletter", "digest", "notice"),
    "utils": ("helpers", "common", "toolkit"),
    "dates": ("times", "calendar", "clock"),
    "health": ("status", "ready", "alive"),
    "billing": ("payments", "checkout", "ledger"),
    "poetry": ("pipenv", "hatch", "pdm"),
    "alice": ("bob", "carol", "dave", "erin"),
}
_WORD = re.compile(r"\b(" + "|".join(SWAPS) + r")\b")
_ROLLOUT_ID = re.compile(r'"rollout_id":"[^"]*"')
_UPDATED_AT = re.compile(r'"updated_at":"([^"]+)"')


def synthetic_rollouts(count: int) -> dict[str, str]:
    """``count`` varied rollout files (rollout id -> text), the same on every call."""
    base = list(corpus().items())
    rollouts: dict[str, str] = {}
    for i in range(count):
        name, text = base[i % len(base)]
        rng = random.Random(i)
        choice = {word: rng.choice(options) for word, options in SWAPS.items()}
        rid = f"{name}-{i:04d}"
        shift = timedelta(minutes=7 * i)
        text = _WORD.sub(lambda m, c=choice: c[m.group(1)], text)
        text = _ROLLOUT_ID.sub(f'"rollout_id":"{rid}"', text)
        text = _UPDATED_AT.sub(lambda m, d=shift: _shifted(m.group(1), d), text)
        rollouts[rid] = text
    return rollouts


def _extract_pass(sample: list[tuple[str, str]]) -> float:
    """Seconds per rollout of the pure extractor alone over ``sample``."""
    started = time.perf_counter()
    for rid, text in sample:
        extract(rid, text)
    return (time.perf_counter() - started) / len(sample)


def _shifted(stamp: str, delta: timedelta) -> str:
    try:
        moved = (datetime.fromisoformat(stamp) + delta).isoformat()
    except ValueError:
        moved = stamp
    return f'"updated_at":"{moved}"'


async def _flush_once(rollouts: dict[str, str], cap: int) -> dict[str, Any]:
    config = MemoryGenerateConfig(
        phase_one_model="extractive",
        phase_two_model="extractive",
        max_raw_memories_for_consolidation=cap,
    )
    async with workspace() as session:
        for rid, text in rollouts.items():
            await session.write(PATHS.rollout_file(rid), text)
        manager = get_manager(session, PATHS, config)
        await manager.prepare()
        started = time.perf_counter()
        report = await manager.flush()
        elapsed = time.perf_counter() - started
        log = (await session.read_bytes(PATHS.log_jsonl)).decode().splitlines()
        memory_md = len(await session.read_bytes(PATHS.memory_md))
    phase_two = [json.loads(line) for line in log if '"phase": "two"' in line]
    if report.failed or report.phase_two not in ("done", "incomplete") or not phase_two:
        raise RuntimeError(
            f"extractive flush did not complete: failed {report.failed}, phase two "
            f"{report.phase_two} {report.phase_two_error}"
        )
    return {
        "total": elapsed,
        "phase_two": float(phase_two[-1]["duration_s"]),
        "processed": len(report.processed),
        "skipped": len(report.skipped),
        "memory_md": memory_md,
        "outcome": report.phase_two,
        "left_out": len(report.phase_two_missing),
    }


async def _measure(count: int, repeat: int) -> dict[str, Any]:
    rollouts = synthetic_rollouts(count)
    size = sum(len(t.encode("utf-8")) for t in rollouts.values())
    cap = min(count, 4096)
    await _flush_once(synthetic_rollouts(4), 4)  # warm-up: imports, regexes
    runs = [await _flush_once(rollouts, cap) for _ in range(repeat)]
    sample = list(rollouts.items())[::10]
    extract_s = median([_extract_pass(sample) for _ in range(repeat)])
    return {
        "count": count,
        "bytes": size,
        "cap": cap,
        "total": median([r["total"] for r in runs]),
        "phase_two": median([r["phase_two"] for r in runs]),
        "phase_one": median([r["total"] - r["phase_two"] for r in runs]),
        "extract": extract_s,
        "sample": len(sample),
        "processed": runs[-1]["processed"],
        "skipped": runs[-1]["skipped"],
        "memory_md": runs[-1]["memory_md"],
        "outcome": runs[-1]["outcome"],
        "left_out": runs[-1]["left_out"],
    }


def run(count: int = COUNT, repeat: int = REPEAT) -> Figure:
    r = asyncio.run(_measure(count, repeat))
    n = r["count"]
    rows = [
        ["whole flush", secs(r["total"]), ms(r["total"] / n)],
        ["phase one (flush minus phase two)", secs(r["phase_one"]), ms(r["phase_one"] / n)],
        ["phase two (from `generation_log.jsonl`)", secs(r["phase_two"]), ms(r["phase_two"] / n)],
        ["the extractor alone (`extract`, no I/O)", secs(r["extract"] * n), ms(r["extract"])],
    ]
    body = (
        f"Median of {repeat} flushes of {n:,} synthetic rollouts ({r['bytes'] / 1e6:.0f} MB; "
        f"see the module docstring for how they are derived from the corpus) in a fresh local "
        f'workspace, `phase_one_model="extractive"`, `phase_two_model="extractive"`, '
        f"`max_raw_memories_for_consolidation={r['cap']}` so phase two consolidates all of "
        f"them. Per flush: {r['processed']:,} rollouts extracted, {r['skipped']:,} skipped "
        f"as empty; `MEMORY.md` came out at {r['memory_md']:,} bytes; the consolidation's "
        f"outcome was `{r['outcome']}`, with {r['left_out']:,} conversations not cited in "
        "`MEMORY.md` (they stay pending for the next consolidation). The last row times the "
        f"pure `extract` function on every 10th rollout ({r['sample']}), median of {repeat} "
        "passes, scaled to all of them.\n\n"
        + table(["part", "median", f"per rollout (/ {n:,})"], rows)
    )
    share = r["extract"] * n / r["phase_one"] if r["phase_one"] else 0.0
    meaning = (
        f"Memory for {n:,} conversations was generated offline, without a model or a network, "
        f"at {ms(r['total'] / n)} a rollout. The extractor alone (`extract`, no I/O) is "
        f"{share:.0%} of phase one's time; the rest is the pipeline per rollout (reading the "
        "file, fsynced atomic writes of the raw memory and the summary, the state and the log) "
        f"and its scheduling. Phase two took {secs(r['phase_two'])} "
        f"({r['phase_two'] / r['total']:.0%} of the flush)."
    )
    return Figure(
        "extractive",
        8,
        "Extractive engine, phase one + two over 1,000 rollouts",
        body,
        meaning,
        None,
        r,
    )
