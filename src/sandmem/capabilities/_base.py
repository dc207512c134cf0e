"""The capability seam: a small unit that adds tools and instructions to a sandbox agent."""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Self

from sandmem._errors import UserError

if TYPE_CHECKING:
    from sandmem._run_context import RunOutcome, SandboxRunContext
    from sandmem._tools import FunctionTool
    from sandmem.sandboxes._session import SandboxSession


class Capability:
    """Base class of capabilities. Every method has a working default.

    The runner binds each capability of a ``SandboxAgent`` to the run's sandbox session
    (``bind`` returns a bound copy, so one agent can serve many sessions), checks
    ``required_capability_types``, calls ``on_run_start`` and collects ``instructions`` before
    the first model call, offers ``tools()`` to the model, and calls ``on_run_end`` when the run
    ends, whether it completed or failed.
    """

    _session: SandboxSession | None = None

    def required_capability_types(self) -> frozenset[type[Capability]]:
        return frozenset()

    def bind(self, session: SandboxSession) -> Self:
        bound = copy.copy(self)
        bound._session = session
        return bound

    @property
    def session(self) -> SandboxSession:
        if self._session is None:
            raise UserError(
                f"{type(self).__name__} is not bound to a sandbox session; run it through "
                "a SandboxAgent with RunConfig(sandbox=SandboxRunConfig(...))"
            )
        return self._session

    def tools(self) -> list[FunctionTool]:
        return []

    async def on_run_start(self, ctx: SandboxRunContext) -> None:
        """Validate and prepare before the first model call; raise ``UserError`` on misuse."""

    async def instructions(self, ctx: SandboxRunContext) -> str | None:
        return None

    async def on_run_end(self, ctx: SandboxRunContext, outcome: RunOutcome) -> None:
        """Called once when the run ends, completed or not."""
