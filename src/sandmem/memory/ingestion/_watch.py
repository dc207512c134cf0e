"""``--watch``: ingest a directory of transcripts as its files change.

Polls the directory; a file is ingested once it changed since its last ingest and then stayed
the same for one poll (debounced: an agent writing a line at a time is not ingested at every
line). A restart ingests every file once more, which records nothing already recorded (the
rollout files hold how far each source was ingested).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

from sandmem.memory.ingestion._ingest import expand

Stat = tuple[int, int]


def _stats(directory: Path) -> dict[Path, Stat]:
    found: dict[Path, Stat] = {}
    for path in expand([directory]):
        try:
            info = path.stat()
        except OSError:
            continue
        found[path] = (info.st_size, info.st_mtime_ns)
    return found


def due(now: dict[Path, Stat], before: dict[Path, Stat], ingested: dict[Path, Stat]) -> list[Path]:
    """The files to ingest: unchanged since the previous poll, changed since their ingest."""
    return sorted(p for p, s in now.items() if before.get(p) == s and ingested.get(p) != s)


async def watch(
    directory: Path,
    ingest: Callable[[list[Path]], Awaitable[object]],
    *,
    interval: float = 2.0,
    stop: asyncio.Event | None = None,
) -> None:
    """Poll ``directory`` every ``interval`` seconds and call ``ingest`` with the files due,
    until ``stop`` is set (or forever)."""
    stop = stop or asyncio.Event()
    before: dict[Path, Stat] = {}
    ingested: dict[Path, Stat] = {}
    while not stop.is_set():
        now = await asyncio.to_thread(_stats, directory)
        files = due(now, before, ingested)
        if files:
            await ingest(files)
            for path in files:
                ingested[path] = now[path]
        before = now
        try:
            await asyncio.wait_for(stop.wait(), timeout=interval)
        except TimeoutError:
            pass
