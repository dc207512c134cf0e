"""The stop-time redaction pass: every file under a layout's ``memories_dir`` that changed since
the pass last saw it (an agent's live update, ``exec_command`` output redirected there, a
person's edit, a rollback) is redacted in place, whatever happened to memory generation.

It runs at every stop of the session: after the flush for a layout that generates memory
(also when the flush failed or was skipped), and from its own pre-stop hook for a read-only
layout. No symlink is followed; hidden files are included (only the lock file and in-flight
write temps are left alone); every file is redacted whatever its size (large ones in a worker
thread), and bytes that are not UTF-8 are kept as they are around the redacted text.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from sandmem._errors import SandboxError
from sandmem.memory import _files
from sandmem.memory._redact_names import clean_names, remove_secret_folders, unreadable
from sandmem.memory._secret_forms import SecretForms, secret_values
from sandmem.memory.layout import HISTORY_DIR
from sandmem.redaction import Redactor
from sandmem.sandboxes._session import FileStat, SandboxSession

logger = logging.getLogger("sandmem.memory")

#: files at least this large are redacted in a worker thread (no size leaves one unredacted)
_THREAD_BYTES = 256 * 1024
_MAX_DEPTH = 16
_BATCH = 256
#: a stop waits this long for the layout's lock (held by a consolidation, which redacts its
#: own results); then this pass is skipped and the next stop redacts
_LOCK_TIMEOUT_S = 10.0


class MemoryRedactionPass:
    """Redacts the changed files of one ``memories_dir``; remembers what it saw (size and
    mtime) so that an unchanged file is not read again at the next stop."""

    def __init__(self, session: SandboxSession, memories_dir: str, redactor: Redactor) -> None:
        self.session = session
        self.memories_dir = memories_dir.rstrip("/")
        self.redactor = redactor
        self._seen: dict[str, FileStat] = {}

    async def run(self) -> list[str]:
        """Redact now; returns the files rewritten. Never raises for a file it cannot read."""
        if not await _files.is_dir(self.session, self.memories_dir):
            return []
        try:
            async with _files.lock(
                self.session, f"{self.memories_dir}/.lock", timeout=_LOCK_TIMEOUT_S
            ):
                return await self._run_locked()
        except SandboxError as exc:
            if exc.operation != "lock":
                raise
            logger.warning("memory redaction of %s skipped: %s", self.memories_dir, exc)
            return []

    async def _run_locked(self) -> list[str]:
        files = await self._memory_files()
        stats = await _files.stat_many(self.session, files)
        changed = [p for p, st in stats.items() if st is not None and self._seen.get(p) != st]
        rewritten: list[str] = []
        found: list[tuple[str, str]] = []
        for start in range(0, len(changed), _BATCH):
            batch = changed[start : start + _BATCH]
            for path, data in (await _files.read_many(self.session, batch)).items():
                if data is not None and await self._redact_one(path, data, found.extend):
                    rewritten.append(path)
        forms = SecretForms(found)
        if forms:  # what the secrets found became elsewhere (lower-case, cut, keywords)
            # not in history: its objects are named by their digest (``redact-history``'s job)
            live = [p for p in changed if not p.startswith(f"{self.memories_dir}/{HISTORY_DIR}/")]
            for start in range(0, len(live), _BATCH):
                batch = live[start : start + _BATCH]
                for path, data in (await _files.read_many(self.session, batch)).items():
                    if data is not None and await self._redact_one(path, data, forms=forms):
                        rewritten.append(path)
        rewritten += await self._clean_names(changed, forms)
        files = await self._memory_files()
        self._seen = {
            p: st for p, st in (await _files.stat_many(self.session, files)).items() if st
        }
        if rewritten:
            logger.warning("redacted secrets in %d memory file(s): %s", len(rewritten), rewritten)
        return rewritten

    async def _redact_one(
        self,
        path: str,
        data: bytes,
        found: Callable[[list[tuple[str, str]]], None] | None = None,
        forms: SecretForms | None = None,
    ) -> bool:
        """Redact one file (with ``forms`` only its derived forms); ``found`` is given the
        secrets it held."""
        # bytes that are not UTF-8 are carried through unchanged (surrogateescape), so one
        # invalid byte cannot shield the secrets around it
        text = data.decode("utf-8", "surrogateescape")
        redact = self.redactor.redact if forms is None else forms.redact
        if len(data) >= _THREAD_BYTES:
            clean = await asyncio.to_thread(redact, text)
        else:
            clean = redact(text)
        if clean == text:
            return False
        if found is not None:
            found(await asyncio.to_thread(secret_values, self.redactor, text))
        try:
            await _files.write(self.session, path, clean.encode("utf-8", "surrogateescape"))
        except SandboxError as exc:
            logger.warning("could not redact %s: %s", path, exc)
            return False
        return True

    async def _clean_names(self, changed: list[str], forms: SecretForms) -> list[str]:
        """Rename the changed files whose name holds a secret; returns the new paths."""
        md = self.memories_dir
        moved = await clean_names(self.session, md, self.redactor, forms, changed, unreadable)
        if moved:
            logger.warning("renamed %d memory file(s) whose name held a secret", len(moved))
        if await remove_secret_folders(self.session, md, self.redactor, forms):
            logger.warning("removed empty folder(s) of %s whose name held a secret", md)
        return [f"{md}/{new}" for _old, new in moved]

    async def _memory_files(self) -> list[str]:
        from sandmem.sandboxes._hostfs import is_stale_write_temp

        found = await _files.walk(self.session, self.memories_dir, depth=_MAX_DEPTH, hidden=True)
        return sorted(
            path
            for path in found
            if (name := path.rsplit("/", 1)[-1]) != ".lock"
            and not is_stale_write_temp(name)
            and not _is_write_temp(name)
        )


def _is_write_temp(name: str) -> bool:
    return name.startswith(".") and name.endswith(".tmp")


def stop_redaction(session: SandboxSession, memories_dir: str, redactor: Redactor) -> None:
    """Make sure a pre-stop hook redacts ``memories_dir`` at every stop of ``session`` (once
    per directory; for layouts without a generation manager, whose stop does the same)."""
    registry: dict[str, Any] = session._memory_redactions
    if memories_dir in registry:
        return
    redaction = MemoryRedactionPass(session, memories_dir, redactor)
    registry[memories_dir] = redaction

    async def redact_on_stop() -> None:
        try:
            await redaction.run()
        except Exception:
            logger.exception("redacting %s at stop failed", memories_dir)

    session.register_pre_stop_hook(redact_on_stop)
