"""Memory during one run: what the ``Memory`` capability's hooks do, in the order they do it.

At the start (``RunMemory.start``): the run's live-edit policy guards the layout (redaction,
and in review mode a proposal's overlay: ``memory.live_edit``); with generation on, the
rollout id is resolved and the session's generation manager found or made (its stop flushes,
``memory.generation``) and work an earlier stop could not hand over is handed over; a remote
store's memory is pulled; review mode keeps the approved files; the summary is read once —
with the summaries of the other scopes attached (``capabilities._memory_scopes``).
At the end (``RunMemory.end``): the run's edits of memory files become a version (or, in
review mode, a proposal), then the run's segment is recorded (``memory.recording``).
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from sandmem._errors import SandboxError, UserError
from sandmem.memory import _files, journal
from sandmem.memory.config import MemoryGenerateConfig, MemoryLayoutConfig, MemoryReadConfig
from sandmem.memory.history import Attribution
from sandmem.memory.layout import MemoryPaths
from sandmem.memory.live_edit import run_policy
from sandmem.memory.read_prompt import read_prompt_for
from sandmem.redaction import Redactor

if TYPE_CHECKING:
    from sandmem.agent._context import RunOutcome, SandboxRunContext
    from sandmem.capabilities._memory_scopes import RunScopes
    from sandmem.memory._run_review import Approved
    from sandmem.memory.recording import RolloutRecorder
    from sandmem.sandboxes._session import SandboxSession

logger = logging.getLogger("sandmem.memory")


class RunMemory:
    """One run's memory for one layout (kept in the run context's ``extras``)."""

    def __init__(
        self,
        session: SandboxSession,
        paths: MemoryPaths,
        layout: MemoryLayoutConfig,
        read: MemoryReadConfig | None,
        generate: MemoryGenerateConfig | None,
        scopes: RunScopes | None = None,
    ) -> None:
        self.session = session
        #: the scopes attached besides this layout (``None``: this layout alone)
        self.scopes = scopes
        self.paths = paths
        self.layout = layout
        self.read = read
        self.generate = generate
        #: the memory prompt of this run (``None``: reading is off)
        self.prompt: str | None = None
        #: appends the run's segment (``None``: generation is off)
        self.recorder: RolloutRecorder | None = None
        self.rollout_id: str | None = None
        self.conversation_key: str | None = None
        redact_patterns = generate.redact_patterns if generate is not None else ()
        self.redactor = Redactor(redact_patterns)
        #: review mode: the approved memory files as the run started
        self.approved: Approved | None = None

    @property
    def _live_update(self) -> bool | str:
        return False if self.read is None else self.read.live_update

    async def start(self, ctx: SandboxRunContext, display_dir: str) -> None:
        """Everything before the first model call, so misuse surfaces at once."""
        self._guard_writes(ctx)
        if self.generate is not None:
            await self._start_generation(ctx, self.generate)
        if self.layout.store is not None and self.layout.store.remote:
            from sandmem.memory.store import pull

            await pull(self.session, self.paths, self.layout.store)
        if self._live_update == "propose":
            from sandmem.memory._run_review import approved

            self.approved = await approved(self.session, self.paths)
        if self.scopes is not None:
            self.scopes.policy = run_policy(ctx.extras)
            self.scopes.rollout_id = self.rollout_id or _run_id(ctx)
        if self.read is not None:
            self.prompt = await read_prompt_for(
                self.session,
                self.paths,
                live_update=self.read.live_update,
                display_dir=display_dir,
                scopes=self.scopes,
            )

    def _guard_writes(self, ctx: SandboxRunContext) -> None:
        """No secret stays in this layout's memory files: ``apply_patch`` redacts what it
        writes there, and every stop redacts what changed (for a read-only layout through its
        own pre-stop hook; a generating layout's manager does it after its flush)."""
        from sandmem.memory.generation import on_stop_read_only

        policy = run_policy(ctx.extras)
        policy.guard(self.paths.memories_dir, self.redactor)
        if self._live_update == "propose":
            policy.propose(self.paths.memories_dir)
        elif self._live_update:
            policy.track(self.paths.memories_dir)
        if self.generate is None:
            on_stop_read_only(self.session, self.paths.memories_dir, self.redactor)

    async def _start_generation(self, ctx: SandboxRunContext, config: MemoryGenerateConfig) -> None:
        from sandmem.memory.generation import check_schedule, get_manager, resume_pending
        from sandmem.memory.rollouts import resolve_rollout_id

        try:
            self.rollout_id, self.conversation_key = resolve_rollout_id(ctx)
        except ValueError as exc:
            raise UserError(str(exc)) from exc
        store = self.layout.store
        check_schedule(config, store)
        manager = get_manager(self.session, self.paths, config, store)
        await manager.prepare()
        await resume_pending(manager)  # work an earlier stop could not hand over
        self.recorder = manager.recorder

    async def end(self, ctx: SandboxRunContext, outcome: RunOutcome) -> None:
        """Version (or propose) the run's memory edits, then record the run's segment."""
        from sandmem.memory.rollouts import INFRASTRUCTURE, build_segment, records_work
        from sandmem.memory.state import classify

        await self._version_edits(ctx)
        if self.recorder is None or self.rollout_id is None:
            return
        if not records_work(outcome):
            return  # no model reply came (a refused key, a dead server): nothing to remember
        exc = outcome.exception
        infrastructure = (
            exc is not None
            and not isinstance(exc, asyncio.CancelledError)
            and classify(exc) in ("environment", "configuration")
        )
        segment = build_segment(
            ctx,
            outcome,
            self.rollout_id,
            self.conversation_key,
            error_origin=INFRASTRUCTURE if infrastructure else None,
        )
        await self.recorder.record(segment)

    async def _version_edits(self, ctx: SandboxRunContext) -> None:
        """A run's edits of memory files: one version (``live_update=True``), or one proposal
        in the review inbox (``"propose"``). When the layout lock stays held (a consolidation
        is running) the next flush versions the edit instead."""
        if not self._live_update:
            return
        run = self.rollout_id
        attribution = Attribution("live_edit", run=run or _run_id(ctx))
        if self._live_update == "propose":
            await self._propose_edits(ctx, attribution)
            return
        try:
            if not await journal.unversioned(self.session, self.paths):
                return  # nothing edited: no lock taken, no wait for a running consolidation
            own = run_policy(ctx.extras).edited(self.paths.memories_dir)
            async with _files.lock(self.session, self.paths.lock, timeout=60.0):
                # what its apply_patch did not change is another writer's: versioned apart
                await journal.notice(
                    self.session, self.paths, attribution, redactor=self.redactor, own=own
                )
        except SandboxError as exc:  # also a link planted in the layout: never loses the record
            logger.warning("memory version of this run's edits deferred: %s", exc)

    async def _propose_edits(self, ctx: SandboxRunContext, attribution: Attribution) -> None:
        """Review mode: whatever tool of the run changed the memory files, the change becomes
        the run's proposal and the approved files are put back (``memory/_run_review.py``).
        Waits for a running consolidation as long as a flush may take."""
        from sandmem.memory._run_review import REVIEW_LOCK_TIMEOUT_S, propose_run

        overlay = run_policy(ctx.extras).overlay(self.paths.memories_dir)
        if self.approved is None:
            return
        async with _files.lock(self.session, self.paths.lock, timeout=REVIEW_LOCK_TIMEOUT_S):
            await propose_run(
                self.session,
                self.paths,
                self.approved,
                overlay,
                attribution,
                redactor=self.redactor,
            )
        overlay.clear()


def _run_id(ctx: SandboxRunContext) -> str | None:
    """The run's rollout id when generation did not resolve it (a read-only or edit-only
    memory): it names the run in the versions of its edits."""
    from sandmem.memory.rollouts import resolve_rollout_id

    try:
        return resolve_rollout_id(ctx)[0]
    except ValueError:
        return None
