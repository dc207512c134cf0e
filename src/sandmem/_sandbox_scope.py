"""The sandbox a run uses: an injected live session, or one the run creates and owns."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from sandmem._agent import Agent
from sandmem._errors import UserError
from sandmem._run_config import RunConfig
from sandmem._sandbox_agent import SandboxAgent
from sandmem.sandboxes._session import SandboxSession


@contextlib.asynccontextmanager
async def sandbox_scope(agent: Agent, config: RunConfig) -> AsyncIterator[SandboxSession | None]:
    if not isinstance(agent, SandboxAgent):
        yield None
        return
    sandbox = config.sandbox
    if sandbox is None:
        raise UserError(
            f"SandboxAgent {agent.name!r} needs a sandbox: pass "
            "run_config=RunConfig(sandbox=SandboxRunConfig(session=...)) or "
            "SandboxRunConfig(client=..., manifest=...)"
        )
    if sandbox.session is not None:
        if not getattr(sandbox.session, "is_running", True):
            raise UserError("the sandbox session is not started; use `async with session:`")
        yield sandbox.session
        return
    if sandbox.client is None:
        raise UserError("SandboxRunConfig needs a session or a client")
    manifest = sandbox.manifest or agent.default_manifest
    created = await sandbox.client.create(manifest=manifest)  # type: ignore[attr-defined]
    async with created:
        yield created
