"""The Memory capability: injects the memory read prompt and drives memory generation."""

from __future__ import annotations

import asyncio
import builtins
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sandmem._errors import CapabilityNotBoundError, UserError
from sandmem.agent._capability import Capability
from sandmem.agent._context import SandboxRunContext
from sandmem.memory.config import MemoryGenerateConfig, MemoryLayoutConfig, MemoryReadConfig
from sandmem.memory.layout import MemoryPaths
from sandmem.memory.read_prompt import SUMMARY_MAX_TOKENS as SUMMARY_MAX_TOKENS
from sandmem.memory.read_prompt import memory_read_prompt as memory_read_prompt
from sandmem.memory.read_prompt import read_prompt_for

if TYPE_CHECKING:
    from sandmem.agent._context import RunOutcome
    from sandmem.memory._run_review import Approved
    from sandmem.memory.generation.manager import MemoryGenerationManager
    from sandmem.memory.history import Attribution
    from sandmem.redaction import Redactor
    from sandmem.sandboxes._manifest import Manifest

_DEFAULT: Any = object()
logger = logging.getLogger("sandmem.memory")


@dataclass
class _RunMemory:
    prompt: str | None = None
    manager: MemoryGenerationManager | None = None
    rollout_id: str | None = None
    conversation_key: str | None = None
    redactor: Redactor | None = None
    #: review mode: the approved memory files as the run started
    approved: Approved | None = None


class Memory(Capability):
    """Memory that carries across runs.

    ``read`` (default ``MemoryReadConfig()``) injects ``memory_summary.md`` into each run's
    instructions; ``generate`` (default ``MemoryGenerateConfig()``) records each run and
    distils memory when the sandbox session stops. At least one must be on.
    """

    type = "memory"

    def __init__(
        self,
        layout: MemoryLayoutConfig | None = None,
        read: MemoryReadConfig | None = _DEFAULT,
        generate: MemoryGenerateConfig | None = _DEFAULT,
    ) -> None:
        self.layout = layout if layout is not None else MemoryLayoutConfig()
        self.read = MemoryReadConfig() if read is _DEFAULT else read
        self.generate = MemoryGenerateConfig() if generate is _DEFAULT else generate
        if self.read is None and self.generate is None:
            raise ValueError(
                "Memory requires at least one of `read` or `generate`; got read=None, generate=None"
            )
        self.paths = MemoryPaths.of(self.layout)

    def __repr__(self) -> str:
        return f"Memory(layout={self.layout!r}, read={self.read!r}, generate={self.generate!r})"

    def required_capability_types(self) -> frozenset[builtins.type[Capability]]:
        from sandmem.capabilities.filesystem import Filesystem
        from sandmem.capabilities.shell import Shell

        if self.read is None:
            return frozenset()
        if self.read.live_update:
            return frozenset({Shell, Filesystem})
        return frozenset({Shell})

    def _slot(self, ctx: SandboxRunContext) -> _RunMemory:
        slot = ctx.extras.setdefault(("memory", self.paths), _RunMemory())
        assert isinstance(slot, _RunMemory)
        return slot

    async def on_run_start(self, ctx: SandboxRunContext) -> None:
        """Resolve the rollout id, check the layout and prepare it, and read the summary once —
        all before the first model call, so misuse surfaces at once."""
        from sandmem.memory.generation import check_schedule, get_manager, resume_pending
        from sandmem.memory.rollouts import resolve_rollout_id

        slot = self._slot(ctx)
        self._guard_memory_writes(ctx)
        if self.generate is not None:
            try:
                slot.rollout_id, slot.conversation_key = resolve_rollout_id(ctx)
            except ValueError as exc:
                raise UserError(str(exc)) from exc
            store = self.layout.store
            check_schedule(self.generate, store)
            slot.manager = get_manager(self.session, self.paths, self.generate, store)
            await slot.manager.prepare()
            await resume_pending(slot.manager)  # work an earlier stop could not hand over
        if self.layout.store is not None and self.layout.store.remote:
            from sandmem.memory.store import pull

            await pull(self.session, self.paths, self.layout.store)
        if self.read is not None and self.read.live_update == "propose":
            from sandmem.memory._run_review import approved

            slot.approved = await approved(self.session, self.paths)
        if self.read is not None:
            slot.prompt = await read_prompt_for(
                self.session,
                self.paths,
                live_update=self.read.live_update,
                display_dir=self.display_dir(),
            )

    def display_dir(self) -> str:
        """How instructions name the memory directory: as the layout spells it, or, with a run
        cwd, as an absolute sandbox path (valid from any directory)."""
        scope = self.workspace_scope
        if scope.cwd is None:
            return self.layout.spelled("memories_dir")
        return scope.resource_path(self.session.display_root, self.paths.memories_dir)

    def _guard_memory_writes(self, ctx: SandboxRunContext) -> None:
        """No secret stays in this layout's memory files: ``apply_patch`` redacts what it
        writes there, and every stop redacts what changed (for a read-only layout through its
        own pre-stop hook; a generating layout's manager does it after its flush)."""
        from sandmem.capabilities.filesystem import MEMORY_PROPOSALS, MEMORY_WRITE_GUARDS
        from sandmem.memory.generation import on_stop_read_only
        from sandmem.redaction import Redactor

        patterns = self.generate.redact_patterns if self.generate is not None else ()
        redactor = Redactor(patterns)
        self._slot(ctx).redactor = redactor
        guards = ctx.extras.setdefault(MEMORY_WRITE_GUARDS, [])
        guards.append((self.paths.memories_dir, redactor))
        if self.read is not None and self.read.live_update == "propose":
            ctx.extras.setdefault(MEMORY_PROPOSALS, {})[self.paths.memories_dir] = {}
        if self.generate is None:
            on_stop_read_only(self.session, self.paths.memories_dir, redactor)

    async def instructions(self, ctx: SandboxRunContext | Manifest) -> str | None:
        """The memory prompt of this run. Also the reference's form: called with a manifest on
        a capability bound with ``bind(session)``, it reads the summary from that session."""
        if isinstance(ctx, SandboxRunContext):
            return self._slot(ctx).prompt
        if self._session is None:
            raise CapabilityNotBoundError(
                "Memory capability is not bound to a SandboxSession; call bind(session) first, "
                "or run it through a SandboxAgent"
            )
        if self.read is None:
            return None
        return await read_prompt_for(
            self.session,
            self.paths,
            live_update=self.read.live_update,
            display_dir=self.display_dir(),
        )

    async def on_run_end(self, ctx: SandboxRunContext, outcome: RunOutcome) -> None:
        from sandmem.memory.rollouts import INFRASTRUCTURE, build_segment, records_work
        from sandmem.memory.state import classify

        slot = self._slot(ctx)
        await self._version_edits(ctx, slot)
        if slot.manager is None or slot.rollout_id is None:
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
            slot.rollout_id,
            slot.conversation_key,
            error_origin=INFRASTRUCTURE if infrastructure else None,
        )
        await slot.manager.record(segment)

    async def _version_edits(self, ctx: SandboxRunContext, slot: _RunMemory) -> None:
        """A run's edits of memory files: one version (``live_update=True``), or one proposal
        in the review inbox (``"propose"``). When the layout lock stays held (a consolidation
        is running) the next flush versions the edit instead."""
        from sandmem._errors import SandboxError
        from sandmem.memory import _files, journal
        from sandmem.memory.history import Attribution

        if self.read is None or not self.read.live_update:
            return
        run = slot.rollout_id
        if run is None:
            from sandmem.memory.rollouts import resolve_rollout_id

            try:
                run = resolve_rollout_id(ctx)[0]
            except ValueError:
                run = None
        attribution = Attribution("live_edit", run=run)
        if self.read.live_update == "propose":
            await self._propose_edits(ctx, slot, attribution)
            return
        try:
            if not await journal.unversioned(self.session, self.paths):
                return  # nothing edited: no lock taken, no wait for a running consolidation
            async with _files.lock(self.session, self.paths.lock):
                await journal.notice(self.session, self.paths, attribution, redactor=slot.redactor)
        except SandboxError as exc:  # also a link planted in the layout: never loses the record
            logger.warning("memory version of this run's edits deferred: %s", exc)

    async def _propose_edits(
        self, ctx: SandboxRunContext, slot: _RunMemory, attribution: Attribution
    ) -> None:
        """Review mode: whatever tool of the run changed the memory files, the change becomes
        the run's proposal and the approved files are put back (``memory/_run_review.py``).
        Waits for a running consolidation as long as a flush may take."""
        from sandmem.capabilities.filesystem import MEMORY_PROPOSALS
        from sandmem.memory import _files
        from sandmem.memory._run_review import REVIEW_LOCK_TIMEOUT_S, propose_run

        overlay = ctx.extras.get(MEMORY_PROPOSALS, {}).get(self.paths.memories_dir, {})
        if slot.approved is None:
            return
        async with _files.lock(self.session, self.paths.lock, timeout=REVIEW_LOCK_TIMEOUT_S):
            await propose_run(
                self.session,
                self.paths,
                slot.approved,
                overlay,
                attribution,
                redactor=slot.redactor,
            )
        overlay.clear()
