"""Opening a target of the memory API: a live ``SandboxSession`` or the path of a workspace
directory (opened in place, like the CLI's ``--workspace``), with or without a memory layout
in it; the error a held layout lock becomes; and running a ``*_sync`` twin.

The one way the API, the MCP server, the history and the ingest functions reach a target.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Coroutine
from pathlib import Path
from typing import Any, TypeVar, Union

from sandmem._errors import MemoryLockedError, MemoryNotFoundError, SandboxError, UserError
from sandmem.memory import _files
from sandmem.memory.config import MemoryLayoutConfig
from sandmem.memory.layout import MemoryPaths, ensure_layout
from sandmem.sandboxes import Manifest, UnixLocalSandboxClient
from sandmem.sandboxes._session import SandboxSession

T = TypeVar("T")

#: a live sandbox session, or the path of a workspace directory
MemoryTarget = Union[SandboxSession, str, "os.PathLike[str]"]


@contextlib.asynccontextmanager
async def target_session(
    target: MemoryTarget, missing: str
) -> AsyncIterator[tuple[SandboxSession, bool]]:
    """The session of a target and whether it is ours (opened on a workspace path for this
    call); ``missing`` ends the error for a directory that does not exist."""
    if isinstance(target, SandboxSession):
        yield target, False
        return
    if not isinstance(target, str | os.PathLike):
        raise UserError(
            "the memory target must be a SandboxSession or a workspace directory path, got "
            f"{type(target).__name__}"
        )
    root = Path(target)
    if not await asyncio.to_thread(root.is_dir):
        raise MemoryNotFoundError(
            f"no workspace directory {str(root)!r}: {missing}", path=str(root)
        )
    session = await UnixLocalSandboxClient().create(manifest=Manifest(root=root))
    async with session:
        yield session, True


@contextlib.asynccontextmanager
async def open_target(
    target: MemoryTarget, layout: MemoryLayoutConfig | None
) -> AsyncIterator[tuple[SandboxSession, MemoryPaths, bool]]:
    """The session, the layout's paths, and whether the session is ours (opened on a
    workspace path for this call). Refuses a workspace that holds no memory layout."""
    if layout is not None and not isinstance(layout, MemoryLayoutConfig):
        raise UserError(f"layout must be a MemoryLayoutConfig, got {type(layout).__name__}")
    paths = MemoryPaths.of(layout or MemoryLayoutConfig())
    missing = "pass an existing directory or a live SandboxSession"
    async with target_session(target, missing) as (session, ours):
        await _require_layout(session, paths)
        yield session, paths, ours


async def _require_layout(session: SandboxSession, paths: MemoryPaths) -> None:
    await ensure_layout(session, paths, create=False)  # a planted link is moved aside first
    if await _files.exists(session, paths.memories_dir) or await _files.exists(
        session, paths.sessions_dir
    ):
        return
    raise MemoryNotFoundError(
        f"no memory in {session.root}: neither {paths.memories_dir}/ nor {paths.sessions_dir}/ "
        "exists; run an agent there first (`sandmem run`; in Python, an agent with Memory()), "
        "or name the layout it used (--memories-dir / --sessions-dir; in Python, layout=)",
        path=paths.memories_dir,
    )


def lock_error(exc: SandboxError) -> MemoryLockedError | SandboxError:
    """What a failed call raises: a layout lock held elsewhere becomes ``MemoryLockedError``,
    any other sandbox error stays itself."""
    if exc.operation != "lock":
        return exc
    return MemoryLockedError(
        f"memory is locked: {exc.path} is held by another process or task (a generation or "
        "a forget in progress); try again when it has finished",
        operation="lock",
        path=exc.path,
    )


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run a memory function's coroutine to its end for a ``*_sync`` twin; refused (the
    coroutine closed) inside a running event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        # the result is passed outside the task: on Python 3.11 ``asyncio.run`` ends by
        # formatting the repr of its SIGINT handler, which holds the main task and so the
        # repr of its result (1.2 s for a ``MemoryStatus`` of 10,000 conversations)
        box: list[T] = []

        async def main() -> None:
            box.append(await coro)

        asyncio.run(main())
        return box[0]
    coro.close()
    raise UserError(
        "a *_sync memory function was called inside a running event loop; await the async "
        "function instead (e.g. `await sandmem.memory.status(...)`)"
    )
