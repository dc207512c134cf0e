"""Figure 4: building a run's memory instructions from a 60 KB ``memory_summary.md``.

The read path of every run: ``Memory.on_run_start`` reads the summary through the sandbox
session and renders the memory prompt (``memory_read_prompt``: policy and read prompts, the
summary cut to 15,000 tokens head + tail), and ``Memory.instructions`` returns it.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

from bench_common import Figure, median, ms, table, time_async, workspace

from sandmem import Agent, RunConfig
from sandmem._run_context import SandboxRunContext
from sandmem._truncate import BYTES_PER_TOKEN
from sandmem.capabilities.memory import SUMMARY_MAX_TOKENS, Memory, memory_read_prompt
from sandmem.memory import MemoryReadConfig
from sandmem.memory.storage import MemoryPaths, ensure_layout, read_text

PATHS = MemoryPaths("memories", "sessions")
SUMMARY_BYTES = 60 * 1024
REPEAT = 200

_TOPICS = ("billing", "deploy", "tests", "migrations", "frontend", "ci", "docs", "search")


def make_summary(size: int = SUMMARY_BYTES) -> str:
    """A deterministic Markdown memory summary of exactly ``size`` bytes (ASCII)."""
    rng = random.Random(size)
    parts = ["# Memory summary\n\n## User preferences\n"]
    length = len(parts[0])
    n = 0
    while length < size:
        topic = rng.choice(_TOPICS)
        if n % 12 == 0:
            line = f"\n## {topic.title()} (index)\n"
        else:
            line = (
                f"- {topic}: run `make {topic}-{n % 7}` before committing; see "
                f"rollout_summaries/run-{n:05d}_{topic}.md (learned {2024 + n % 2}-0{1 + n % 9})\n"
            )
        parts.append(line)
        length += len(line)
        n += 1
    return "".join(parts)[:size]


async def _measure(size: int, repeat: int) -> dict[str, float]:
    summary = make_summary(size)
    async with workspace() as session:
        await ensure_layout(session, PATHS)
        await session.write(PATHS.summary_md, summary)
        memory = Memory(read=MemoryReadConfig(live_update=True), generate=None).bind(session)
        agent = Agent(name="reader")

        async def build() -> Any:
            ctx = SandboxRunContext(agent=agent, input=[], run_config=RunConfig())
            await memory.on_run_start(ctx)
            return await memory.instructions(ctx)

        async def read_only() -> Any:
            return await read_text(session, PATHS.summary_md)

        async def prompt_only() -> Any:
            return memory_read_prompt(summary, PATHS.memories_dir, live_update=True)

        prompt = await build()  # warm-up: prompt templates are loaded once per process
        truncated = size > SUMMARY_MAX_TOKENS * BYTES_PER_TOKEN
        if not prompt or truncated != ("memory summary truncated" in prompt):
            raise RuntimeError(f"unexpected memory prompt for a {size}-byte summary")
        return {
            "build": median(await time_async(build, repeat)),
            "read": median(await time_async(read_only, repeat)),
            "prompt": median(await time_async(prompt_only, repeat)),
            "prompt_bytes": float(len(prompt.encode("utf-8"))),
        }


def run(size: int = SUMMARY_BYTES, repeat: int = REPEAT) -> Figure:
    result = asyncio.run(_measure(size, repeat))
    rows = [
        ["`on_run_start` + `instructions` (the whole read path)", ms(result["build"])],
        ["of which: `read_text` of the summary through the session", ms(result["read"])],
        ["of which: `memory_read_prompt` (render + truncate)", ms(result["prompt"])],
    ]
    body = (
        f"Median of {repeat} calls, a `memory_summary.md` of {size:,} bytes (60 KiB, just over "
        "the 15,000-token / 60,000-byte cap, so the truncation path runs) in a local sandbox "
        f"workspace; a `Memory(generate=None)` capability bound to it. The prompt it builds is "
        f"{int(result['prompt_bytes']):,} bytes.\n\n" + table(["step", "median"], rows)
    )
    meaning = (
        "Reading memory costs a run well under a millisecond of wall time: one `exists` and "
        "one `read` through the session (two thread hops in the local backend) and string "
        "work on 60 KB. It happens once per run, before the first model call, never per turn."
    )
    return Figure(
        "read",
        4,
        "Building the run instructions from a 60 KB memory_summary.md",
        body,
        meaning,
        _status(size, result["build"]),
        result,
    )


def _status(size: int, seconds: float) -> str | None:
    if size != SUMMARY_BYTES:
        return None
    verdict = "met" if seconds < 0.005 else "MISSED"
    return f"the read path takes {ms(seconds)} (target < 5 ms): **{verdict}**."
