"""Figure 10: what a memory version costs, over a layout that already holds 1,000 versions.

Every change to memory files makes one version (``docs/history.md``) in the journal's one
function ``journal._version``. This figure times every step the history adds (wrapped with a
timer): ``journal._version`` (hashing and redacting the live set, comparing it with the newest
version, writing the new blobs and the record, the batch check of the retention), the check a
run makes at its end (``journal.unversioned``) and the re-read of the newest version after a
commit (``journal._head_if_new``), inside the two common writers — a consolidation
(``sandmem.memory.generate`` with the extractive engine, one new conversation each) and a live
edit (an agent run whose one tool call is ``apply_patch`` on ``MEMORY.md``) — and measures the
bytes the history directory grows by, first on a layout with one version stored and then on one
with 1,000 (made with ``journal.write_files``, each changing one line of a ~16 KB
``MEMORY.md``), so the two differ only in the number of versions. Retention prunes in batches
(5% past the count): the measured operations stay under that threshold, so the occasional
prune is timed on its own, once, on the large layout (dropping the oldest 5%, then collecting
the objects no kept version names).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from bench_common import Figure, median, ms, table, workspace
from bench_noop import synthetic_rollout

from sandmem.memory import EXTRACTIVE, MemoryGenerateConfig, _history_prune
from sandmem.memory import journal as journal_module
from sandmem.memory.generation._attach import get_manager
from sandmem.memory.history import Attribution, Retention
from sandmem.memory.layout import MemoryPaths
from sandmem.sandboxes._session import SandboxSession

PATHS = MemoryPaths("memories", "sessions")
EXTRACT = MemoryGenerateConfig(phase_one_model=EXTRACTIVE, phase_two_model=EXTRACTIVE)
VERSIONS = 1000
REPEAT = 5
MEMORY_BYTES = 16_000


#: the journal's functions that exist only for the history (none calls another of them)
_TIMED = ("_version", "unversioned", "_head_if_new")


class _Timer:
    """Wraps the functions of ``_TIMED`` and adds up the time spent in them."""

    def __init__(self) -> None:
        self.total = 0.0
        self._real = {name: getattr(journal_module, name) for name in _TIMED}

    def _wrap(self, real: Any) -> Any:
        async def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return await real(*args, **kwargs)
            finally:
                self.total += time.perf_counter() - started

        return timed

    def __enter__(self) -> _Timer:
        for name, real in self._real.items():
            setattr(journal_module, name, self._wrap(real))
        return self

    def __exit__(self, *exc: object) -> None:
        for name, real in self._real.items():
            setattr(journal_module, name, real)


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


def _stored(session: SandboxSession) -> int:
    return len(list((Path(session.root) / "memories/.history/versions").glob("*.json")))


async def _prune(session: SandboxSession) -> dict[str, float]:
    """One batch prune, as a version makes it once the count passes the limit by 5%: the
    limit set so that the oldest 5% go."""
    stored = _stored(session)
    keep = max(1, stored - max(1, stored // 20))
    before = _history_bytes(session)
    started = time.perf_counter()
    async with session.lock(PATHS.lock):
        dropped = await _history_prune.prune(session, PATHS, Retention(keep_versions=keep))
    return {
        "op": time.perf_counter() - started,
        "dropped": dropped,
        "bytes": before - _history_bytes(session),
    }


async def _measure(versions: int, repeat: int) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for label, count in (("1 version", 1), (f"{versions} versions", versions)):
        async with workspace() as session:
            await session.mkdir(PATHS.memories_dir, parents=True)
            await _fill(session, count)
            results[label] = {
                "stored": _stored(session),
                "history_bytes": _history_bytes(session),
                "consolidation": await _consolidations(session, repeat, f"c{count}"),
                "live edit": await _live_edits(session, repeat),
            }
            if count == versions:
                results[label]["prune"] = await _prune(session)
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
                    "the history's work",
                    "share",
                    "history bytes added",
                ],
                rows,
            ),
        ]
    )
    c, e, p = big["consolidation"], big["live edit"], big["prune"]
    body += (
        f"\n\nA batch prune on the {big['stored']}-version layout (the oldest {p['dropped']} "
        f"dropped, then the objects no kept version names): {ms(p['op'])}, "
        f"{int(p['bytes']):,} bytes freed. At the default retention (1,000 versions) one "
        "version in 50 pays it; the operations above paid none."
    )
    meaning = (
        f"With {big['stored']} versions stored, the history's work took {ms(c['version'])} of a "
        f"{ms(c['op'])} consolidation and {ms(e['version'])} of a {ms(e['op'])} live-edit run; "
        f"the history grew by {int(c['bytes'])} and {int(e['bytes'])} bytes (a version record "
        "plus the changed files, stored once each, uncompressed). Making a version lists the "
        "versions directory and reads only the newest record, so its cost barely grows with "
        "the number stored; the prune reads every kept record to know which objects are still "
        f"named, so it grows with them ({ms(p['op'])} here, once per 5% of the limit)."
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
