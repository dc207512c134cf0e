"""Recording conversations: the rollout files in ``sessions_dir``, listed and appended to.

``rollout_ids`` and ``rollout_id_of`` are the one rule for which names in ``sessions_dir`` are
rollouts (``<id>.jsonl``, not hidden, not nested); ``RolloutRecorder`` appends one run segment
(redacted, keys too) under the sessions lock, so concurrent writers never interleave. The
``Memory`` capability, ingest and the MCP server's ``memory_remember`` record through it
without a generation manager; the manager's ``record`` is the same call.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from sandmem.memory import _files
from sandmem.memory.layout import LOCK, MemoryPaths, ensure_layout, make_way
from sandmem.memory.rollouts import segment_line
from sandmem.sandboxes._session import SandboxSession

if TYPE_CHECKING:  # redaction compiles its patterns on import: a lister (the views) needs none
    from sandmem.redaction import Redactor

_SUFFIX = ".jsonl"
#: a recorder moves the sessions directory's mtime after an append at most this often
MARK_EVERY_NS = 1_000_000_000


def rollout_id_of(name: str) -> str | None:
    """The rollout id a name in ``sessions_dir`` records (``<id>.jsonl``), or ``None``: a
    hidden name (a write's temp, a lock), a nested path or another file is no rollout."""
    if not name.endswith(_SUFFIX) or name.startswith(".") or "/" in name:
        return None
    return name[: -len(_SUFFIX)]


async def rollout_ids(session: SandboxSession, paths: MemoryPaths) -> list[str]:
    """The ids of the recorded conversations, sorted (none when ``sessions_dir`` is missing)."""
    if not await _files.exists(session, paths.sessions_dir):
        return []
    names = await _files.listdir(session, paths.sessions_dir)
    return sorted(rid for rid in map(rollout_id_of, names) if rid is not None)


class RolloutRecorder:
    """Appends run segments to one layout's rollout files."""

    def __init__(self, session: SandboxSession, paths: MemoryPaths, redactor: Redactor) -> None:
        self.session = session
        self.paths = paths
        self.redactor = redactor
        #: when this recorder last moved the sessions directory's mtime (``_mark``)
        self._marked_ns = 0

    async def prepare(self) -> None:
        """Ensure the layout, every time: an agent may have planted a link in it since the
        last call (it is moved aside, never followed)."""
        await ensure_layout(self.session, self.paths)

    async def record(self, segment: dict[str, Any], *, lock_timeout: float | None = None) -> None:
        """Append one run segment (redacted) to its rollout file: append only, under the
        sessions lock (waiting for it at most ``lock_timeout`` seconds, default
        ``_files.LOCK_TIMEOUT_S``)."""
        await self.prepare()
        # keys too: an ingested transcript's items may hold a secret where a key goes
        line = segment_line(self.redactor.redact_obj(segment, keys=True))
        lock = f"{self.paths.sessions_dir}/{LOCK}"
        rollout_file = self.paths.rollout_file(segment["rollout_id"])
        async with _files.lock(self.session, lock, timeout=lock_timeout):
            await make_way(self.session, rollout_file)  # a planted FIFO, link, directory
            await _files.append(self.session, rollout_file, line)
            await self._mark()

    async def _mark(self) -> None:
        """Move the sessions directory's mtime after an append (``_files.mark_changed``), so
        a search that skips listing it when its mtime is unchanged sees the append. Once a
        second is enough: a search trusts a directory mtime only when it is two seconds older
        than its listing, so one that saw the mtime this recorder made less than a second ago
        listed the directory after this append."""
        now = time.time_ns()
        if now - self._marked_ns < MARK_EVERY_NS:
            return
        self._marked_ns = now  # before the mark: its mtime is at least this
        await _files.mark_changed(self.session, self.paths.sessions_dir)
