"""The Memory capability: its hooks (a run's memory itself is ``capabilities._memory_run``)."""

from __future__ import annotations

import builtins
import weakref
from typing import TYPE_CHECKING, Any

from sandmem._errors import CapabilityNotBoundError
from sandmem.agent._capability import Capability
from sandmem.agent._context import SandboxRunContext
from sandmem.agent._tools import FunctionTool
from sandmem.capabilities._memory_run import RunMemory
from sandmem.capabilities._memory_scopes import RunScopes
from sandmem.memory.config import MemoryGenerateConfig, MemoryLayoutConfig, MemoryReadConfig
from sandmem.memory.layout import MemoryPaths
from sandmem.memory.read_prompt import SUMMARY_MAX_TOKENS as SUMMARY_MAX_TOKENS
from sandmem.memory.read_prompt import memory_read_prompt as memory_read_prompt
from sandmem.memory.read_prompt import read_prompt_for

if TYPE_CHECKING:
    from sandmem.agent._context import RunOutcome
    from sandmem.sandboxes._manifest import Manifest
    from sandmem.sandboxes._session import SandboxSession

_DEFAULT: Any = object()
#: per session, the run (its workspace scope object) and the ``Memory`` that attached the
#: scopes in it (``Memory._claims_scopes``)
#: (the capability weakly: it holds the session, and the entry must go with the session)
_SCOPE_CLAIMS: weakref.WeakKeyDictionary[SandboxSession, tuple[object, weakref.ref[Memory]]] = (
    weakref.WeakKeyDictionary()
)


class Memory(Capability):
    """Memory that carries across runs.

    ``read`` (default ``MemoryReadConfig()``) injects ``memory_summary.md`` into each run's
    instructions — with the summaries of the scopes it attaches (the person's personal memory,
    a team's: ``MemoryReadConfig.scopes``, ``docs/scopes.md``) in labelled sections;
    ``generate`` (default ``MemoryGenerateConfig()``) records each run and distils memory when
    the sandbox session stops. At least one must be on.
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

    #: this run's other scopes (``capabilities._memory_scopes``), found once a run: the run
    #: (its workspace scope object, ``_run``) and what was found
    _scopes: tuple[object, RunScopes | None] | None = None
    #: the memory prompt read when this run started (the runner asks for the instructions in
    #: the reference's form, with the manifest: the prompt is read once a run)
    _prompt: tuple[object, str | None] | None = None

    def _run(self) -> object:
        """This run's workspace scope object: the runner binds a new one to every capability
        of each run (``None`` when bound by hand, the reference's form)."""
        return self.__dict__.get("workspace_scope")

    def _run_scopes(self) -> RunScopes | None:
        """The scopes this run attaches besides its layout (``MemoryReadConfig.scopes``):
        found when the run collects its tools, before the first model call. An agent with
        several ``Memory`` capabilities attaches them once, on the first (its tools and its
        prompt's sections); the others read their layouts alone."""
        if self._scopes is None or self._scopes[0] is not self._run():
            found = None
            if self._claims_scopes():
                found = RunScopes.attach(self.session, self.layout, self.read, self.generate)
            self._scopes = (self._run(), found)
        return self._scopes[1]

    def _claims_scopes(self) -> bool:
        """Whether this capability is the run's first ``Memory`` to attach scopes: the run's
        capabilities share its workspace scope object (``bind_workspace_scope``), and the
        first to ask for that object and session keeps the claim."""
        if self.read is None or self.read.scopes is None:
            return False
        run = self._run()
        if run is None:
            return True  # bound by hand (the reference's form): no run to share
        claim = _SCOPE_CLAIMS.get(self.session)
        if claim is None or claim[0] is not run:
            _SCOPE_CLAIMS[self.session] = (run, weakref.ref(self))
            return True
        return claim[1]() is self

    def tools(self) -> list[FunctionTool]:
        """With other scopes attached (the person's personal memory, a team's):
        ``memory_scope_read``, and with live updates ``memory_scope_update``."""
        if self._session is None or self.read is None or self.read.scopes is None:
            return []
        scopes = self._run_scopes()
        return scopes.tools() if scopes is not None else []

    def _slot(self, ctx: SandboxRunContext) -> RunMemory:
        """This run's memory of this layout (``capabilities._memory_run``)."""
        slot = ctx.extras.get((RunMemory, self.paths))
        if slot is None:
            scopes = self._run_scopes() if self.read is not None else None
            slot = RunMemory(
                self.session, self.paths, self.layout, self.read, self.generate, scopes
            )
            ctx.extras[(RunMemory, self.paths)] = slot
        assert isinstance(slot, RunMemory)
        return slot

    async def on_run_start(self, ctx: SandboxRunContext) -> None:
        """Resolve the rollout id, check the layout and prepare it, and read the summary once —
        all before the first model call, so misuse surfaces at once."""
        display_dir = self.display_dir() if self.read is not None else ""
        slot = self._slot(ctx)
        await slot.start(ctx, display_dir)
        self._prompt = (self._run(), slot.prompt)

    def display_dir(self) -> str:
        """How instructions name the memory directory: as the layout spells it, or, with a run
        cwd, as an absolute sandbox path (valid from any directory)."""
        scope = self.workspace_scope
        if scope.cwd is None:
            return self.layout.spelled("memories_dir")
        return scope.resource_path(self.session.display_root, self.paths.memories_dir)

    async def instructions(self, ctx: SandboxRunContext | Manifest) -> str | None:
        """The memory prompt of this run. Also the reference's form: called with a manifest on
        a capability bound with ``bind(session)``, it reads the summary from that session."""
        if isinstance(ctx, SandboxRunContext):
            return self._slot(ctx).prompt
        if self._prompt is not None and self._prompt[0] is self._run() is not None:
            return self._prompt[1]  # this run started: the prompt read at its start
        if self._session is None:
            raise CapabilityNotBoundError(
                "Memory capability is not bound to a SandboxSession; call bind(session) first, "
                "or run it through a SandboxAgent"
            )
        if self.read is None:
            return None
        scopes = self._run_scopes()
        return await read_prompt_for(
            self.session,
            self.paths,
            live_update=self.read.live_update,
            display_dir=self.display_dir(),
            scopes=scopes,
        )

    async def on_run_end(self, ctx: SandboxRunContext, outcome: RunOutcome) -> None:
        """Version (or propose) the run's memory edits, then record the run."""
        await self._slot(ctx).end(ctx, outcome)
