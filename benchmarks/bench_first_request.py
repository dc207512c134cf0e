"""Figure 2: from ``Runner.run`` to the first request at the model server.

A ``SandboxAgent`` with the default capabilities plus ``Memory()`` (read and generate on) runs
on a live local sandbox session whose ``memory_summary.md`` is 60 KB, with its model given by
name and no ``model_provider`` (so the run uses the process's default provider, configured by
``OPENAI_BASE_URL`` = the fake server). The clock starts just before ``Runner.run`` and stops
when the server has read the request's headers (``FakeRequest.received_at``: the same
``perf_counter`` clock, since the server runs in this process). The server answers at once.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

from bench_common import Figure, fake_server, median, ms, table, workspace
from bench_model import MemoryModel, request_tokens

from sandmem import Filesystem, Memory, RunConfig, Runner, SandboxAgent, SandboxRunConfig, Shell
from sandmem.memory.layout import MemoryPaths, ensure_layout
from sandmem.models._provider import default_provider

PATHS = MemoryPaths("memories", "sessions")
SUMMARY_BYTES = 60 * 1024
REPEAT = 20

_TOPICS = ("billing", "deploy", "tests", "migrations", "frontend", "ci", "docs", "search")


def make_summary(size: int = SUMMARY_BYTES) -> str:
    """A deterministic Markdown memory summary of exactly ``size`` bytes (ASCII)."""
    lines = ["# Memory summary\n\n## User preferences\n"]
    length = len(lines[0])
    n = 0
    while length < size:
        topic = _TOPICS[n % len(_TOPICS)]
        line = (
            f"\n## {topic.title()} (index)\n"
            if n % 12 == 0
            else f"- {topic}: run `make {topic}-{n % 7}` before committing; see "
            f"rollout_summaries/run-{n:05d}_{topic}.md\n"
        )
        lines.append(line)
        length += len(line)
        n += 1
    return "".join(lines)[:size]


async def _one_run(server: Any, session: Any, agent: SandboxAgent) -> tuple[float, float, int]:
    """(to first request, whole run, request tokens) of one run."""
    server.reset()
    config = RunConfig(sandbox=SandboxRunConfig(session=session))
    started = time.perf_counter()
    result = await Runner.run(agent, "What do the tests need?", run_config=config)
    ended = time.perf_counter()
    assert result.final_output == "done"
    [request] = server.requests
    return request.received_at - started, ended - started, request_tokens(request)


async def _measure(size: int, repeat: int) -> dict[str, Any]:
    agent = SandboxAgent(
        name="worker",
        instructions="Answer briefly.",
        model="gpt-5.4-mini",
        capabilities=[Filesystem(), Shell(), Memory()],
    )
    with fake_server(MemoryModel()) as server:
        previous = os.environ.get("OPENAI_BASE_URL")
        os.environ["OPENAI_BASE_URL"] = server.base_url
        try:
            async with workspace() as session:
                await ensure_layout(session, PATHS)
                await session.write(PATHS.summary_md, make_summary(size))
                await _one_run(server, session, agent)  # warm-up: imports, prompts, schemas
                await default_provider().aclose()  # so the next run creates a client
                cold = await _one_run(server, session, agent)
                warm = [await _one_run(server, session, agent) for _ in range(repeat)]
                names = await session.listdir(PATHS.sessions_dir)
                recorded = len([n for n in names if n.endswith(".jsonl")])
        finally:
            await default_provider().aclose()
            if previous is None:
                os.environ.pop("OPENAI_BASE_URL", None)
            else:
                os.environ["OPENAI_BASE_URL"] = previous
    return {
        "cold": cold,
        "first": median([w[0] for w in warm]),
        "whole": median([w[1] for w in warm]),
        "tokens": warm[0][2],
        "repeat": repeat,
        "recorded": recorded,
    }


def run(size: int = SUMMARY_BYTES, repeat: int = REPEAT) -> Figure:
    data = asyncio.run(_measure(size, repeat))
    cold_first, cold_whole, _ = data["cold"]
    rows = [
        ["a run that creates the client", ms(cold_first), ms(cold_whole)],
        [f"later runs (median of {repeat})", ms(data["first"]), ms(data["whole"])],
    ]
    body = (
        f"`memory_summary.md` of {size:,} bytes; the request carries the instructions with the "
        f"memory prompt: {data['tokens']:,} tokens (body bytes / 4). Each run was recorded "
        f"as a rollout segment ({data['recorded']} rollout files after "
        f"{repeat + 2} runs: a warm-up run (imports), one that creates the client, "
        f"{repeat} more).\n\n" + table(["run", "Runner.run to first request", "whole run"], rows)
    )
    meaning = (
        f"A run with memory on reaches the server {ms(data['first'])} after `Runner.run` once "
        f"the process has a client, and {ms(cold_first)} when the run must build the client "
        "first (in a worker thread). Before the request the run binds the capabilities, "
        "prepares the memory layout, reads the summary once and renders the memory prompt; "
        "after the answer it appends the run's segment to its rollout file: the whole run "
        f"takes {ms(data['whole'])}."
    )
    target = 0.020
    verdict = "met" if data["first"] <= target else "MISSED"
    status = (
        f"`Runner.run` to first request, memory on, 60 KB summary: {ms(data['first'])} "
        f"(target <= 20 ms): **{verdict}**."
        if size == SUMMARY_BYTES
        else None
    )
    return Figure(
        "first-request",
        2,
        "From Runner.run to the first request at the server (memory on, 60 KB summary)",
        body,
        meaning,
        status,
        data,
    )
