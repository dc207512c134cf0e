"""The sandbox a run uses: an injected live session, or one the run creates and owns.

- ``SandboxRunConfig(session=s)``: the run uses ``s``, starting it first when it is not running,
  and leaves it running afterwards (as the reference does): its owner stops it.
- ``SandboxRunConfig(client=c, ...)``: the run owns the sandbox. It resumes
  ``session_state`` when given, else creates a session from ``manifest`` (or the agent's
  ``default_manifest``), ``snapshot`` and ``options``; starts it; and when the run ends,
  completed or not, stops it (pre-stop hooks such as memory generation run, the snapshot is
  taken) and deletes it: no workspace is left behind. A snapshot, when one was configured, is
  kept, so ``session_state`` can resume from it later.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator

from sandmem._errors import UserError
from sandmem.agent._agent import Agent
from sandmem.agent._run_config import RunConfig, SandboxRunConfig
from sandmem.agent._sandboxed import SandboxedAgent
from sandmem.sandboxes._session import SandboxSession

logger = logging.getLogger("sandmem")


@contextlib.asynccontextmanager
async def sandbox_scope(agent: Agent, config: RunConfig) -> AsyncIterator[SandboxSession | None]:
    if not isinstance(agent, SandboxedAgent):
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
        if not await sandbox.session.running():
            await sandbox.session.start()
        yield sandbox.session
        return
    async with _owned_session(agent, sandbox) as owned:
        yield owned


@contextlib.asynccontextmanager
async def _owned_session(
    agent: SandboxedAgent, sandbox: SandboxRunConfig
) -> AsyncIterator[SandboxSession]:
    client = sandbox.client
    if client is None:
        raise UserError(
            "SandboxRunConfig needs a session or a client: pass SandboxRunConfig(session=...) "
            "for a live session, or SandboxRunConfig(client=UnixLocalSandboxClient()) for a "
            "sandbox the run creates and deletes"
        )
    if sandbox.session_state is not None:
        session = await client.resume(sandbox.session_state)
    else:
        session = await client.create(
            manifest=sandbox.manifest or agent.default_manifest,
            snapshot=sandbox.snapshot,
            options=sandbox.options,
        )
    try:
        await session.start()
        yield session
    finally:
        try:
            await session.aclose()  # pre-stop hooks (memory generation), then the snapshot
        finally:
            await client.delete(session, keep_snapshot=True)
