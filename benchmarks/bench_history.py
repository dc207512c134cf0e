"""Figure 10: what a memory version costs, over a layout that already holds 1,000 versions.

Every change to memory files makes one version (``docs/history.md``) in the journal's one
function ``journal._version``. This figure times that function (wrapped with a timer) inside
the two common writers — a consolidation (``sandmem.memory.generate`` with the extractive
engine, one new conversation each) and a live edit (an agent run whose one tool call is
``apply_patch`` on ``MEMORY.md``) — and measures the bytes the history directory grows by,
first on a layout with one version stored and then on one with 1,000 (made with
``journal.write_files``, each changing one line of a ~16 KB ``MEMORY.md``), so the two differ
only in the number of versions.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from bench_common import Figure, median, ms, table, workspace
from bench_noop import synthetic_rollout

from sandmem.memory import EXTRACTIVE, MemoryGenerateConfig
from sandmem.memory import journal as journal_module
from sandmem.memory.generation._attach import get_manager
from sandmem.memory.history import Attribution
from sandmem.memory.layout import MemoryPaths
from sandmem.sandboxes._session import SandboxSession

PATHS = MemoryPaths("memories", "sessions")
EXTRACT = MemoryGenerateConfig(phase_one_model=EXTRACTIVE, phase_two_model=EXTRACTIVE)
VERSIONS = 1000
REPEAT = 5
MEMORY_BYTES = 16_000


class _Timer:
    """Wraps ``journal._version`` and adds up the time spent in it."""

    def __init__(self) -> None:
        self.total = 0.0
        self._real = journal_module._version

    async def __call__(self, *args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return await self._real(*args, **kwargs)
        finally:
            self.total += time.perf_counter() - started

    def __enter__(self) -> _Timer:
        journal_module._version = self  # type: ignore[assignment]
        return self

    def __exit__(self, *exc: object) -> None:
        journal_module._version = self._real  # type: ignore[assignment]


def _history_bytes(session: SandboxSession) -> int:
    root = Path(session.root) / PATHS.memories_dir / ".history"
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def _memory_text(n: int) -> bytes:
    line = "- fact 0: the service on port 8000 is started with `make run-0`\n"
    body = "".join(
        f"- fact {k}: the service on port {8000 + k} is started with `make run-{k}`\n"
        for k in range(MEMORY_BYTES // len(line))
    )
    return f"# Memory\n\n## Task group: services\n{body}- change {n}\n".encode()


async def _fill(session: SandboxSession, versions: int) -> None:
    for n in range(versions):
        async with session.lock(PATHS.lock):
            await journal_module.write_files(
                session, PATHS, {"MEMORY.md": _memory_text(n)}, Attribution("ingest")
            )


async def _consolidations(session: SandboxSession, repeat: int, tag: str) -> dict[str, float]:
    manager = get_manager(session, PATHS, EXTRACT)
    flush_s, version_s, grown = [], [], []
    for k in range(repeat):
        await session.write(PATHS.rollout_file(f"{tag}-{k}"), synthetic_rollout(f"{tag}-{k}", 8000))
        before = _history_bytes(session)
        with _Timer() as timer:
            started = time.perf_counter()
            report = await manager.flush()
            flush_s.append(time.perf_counter() - started)
        if report.phase_two != "done":
            raise RuntimeError(f"the consolidation did not finish: {report.phase_two_error}")
        version_s.append(timer.total)
        grown.append(_history_bytes(session) - before)
    return {"op": median(flush_s), "version": median(version_s), "bytes": median(grown)}


async def _live_edits(session: SandboxSession, repeat: int) -> dict[str, float]:
    from sandmem import RunConfig, Runner, SandboxAgent, SandboxRunConfig
    from sandmem.capabilities import Filesystem, Memory, Shell
    from sandmem.memory import MemoryReadConfig
    from sandmem.testing import FunctionModel, tool_call

    run_s, version_s, grown = [], [], []
    for k in range(repeat):
        patch = (
            "*** Begin Patch\n*** Update File: memories/MEMORY.md\n@@\n"
            f"+- live correction {k}: port 9{k:03d} is the admin port\n*** End Patch"
        )
        steps: Any = iter([[tool_call("apply_patch", {"patch": patch})], "Done."])
        agent = SandboxAgent(
            name="dev",
            model=FunctionModel(lambda request, steps=steps: next(steps)),
            capabilities=[
                Memory(read=MemoryReadConfig(live_update=True), generate=None),
                Filesystem(),
                Shell(),
            ],
        )
        before = _history_bytes(session)
        with _Timer() as timer:
            started = time.perf_counter()
            await Runner.run(
                agent, "fix memory", run_config=RunConfig(sandbox=SandboxRunConfig(session=session))
            )
            run_s.append(time.perf_counter() - started)
        version_s.append(timer.total)
        grown.append(_history_bytes(session) - before)
    return {"op": median(run_s), "version": median(version_s), "bytes": median(grown)}


async def _measure(versions: int, repeat: int) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for label, count in (("1 version", 1), (f"{versions} versions", versions)):
        async with workspace() as session:
            await session.mkdir(PATHS.memories_dir, parents=True)
            await _fill(session, count)
            stored = len(list((Path(session.root) / "memories/.history/versions").glob("*.json")))
            results[label] = {
                "stored": stored,
                "history_bytes": _history_bytes(session),
                "consolidation": await _consolidations(session, repeat, f"c{count}"),
                "live edit": await _live_edits(session, repeat),
            }
    return results


def run(versions: int = VERSIONS, repeat: int = REPEAT) -> Figure:
    results = asyncio.run(_measure(versions, repeat))
    rows = []
    for label, r in results.items():
        for what in ("consolidation", "live edit"):
            m = r[what]
            share = m["version"] / m["op"] * 100 if m["op"] else 0.0
            rows.append(
                [
                    label,
                    what,
                    ms(m["op"]),
                    ms(m["version"]),
                    f"{share:.1f}%",
                    int(m["bytes"]),
                ]
            )
    big = results[f"{versions} versions"]
    body = "\n\n".join(
        [
            f"Medians of {repeat} operations each. The layout with history held "
            f"{big['stored']} versions ({big['history_bytes'] / 1e6:.1f} MB in "
            "`memories/.history/`) before they ran.",
            table(
                [
                    "layout",
                    "operation",
                    "operation time",
                    "making the version",
                    "share",
                    "history bytes added",
                ],
                rows,
            ),
        ]
    )
    c, e = big["consolidation"], big["live edit"]
    meaning = (
        f"With {big['stored']} versions stored, making the version took {ms(c['version'])} of a "
        f"{ms(c['op'])} consolidation and {ms(e['version'])} of a {ms(e['op'])} live-edit run; "
        f"the history grew by {int(c['bytes'])} and {int(e['bytes'])} bytes (a version record "
        "plus the changed files, stored once each). Making a version lists the versions "
        "directory and reads only the newest record, so its cost barely grows with the number "
        "stored; retention prunes in batches (5% past the count), so most versions pay no prune."
    )
    return Figure(
        key="history",
        number=10,
        title="memory history: the cost of a version",
        body=body,
        meaning=meaning,
        data=results,
    )


if __name__ == "__main__":
    print(run().markdown())
