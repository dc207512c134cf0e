"""Owns ``sandmem mcp``, a Model Context Protocol server over one workspace's memory, and, on
the memory API floor, imports the memory API (``memory.api``), the segment recorder, the live-edit
path and the floors below (never ``capabilities`` or anything above).

For any MCP client (Claude Code, Codex CLI, Cursor, the OpenAI Agents SDK, pydantic-ai); see
``docs/mcp.md``. The ``mcp`` SDK (``pip install 'sandmem[mcp]'``) is imported only when a
server is made.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

from sandmem.memory.config import MemoryGenerateConfig, MemoryLayoutConfig
from sandmem.memory.mcp._scoped import ScopeResolver, StoreFactory
from sandmem.memory.mcp._server import MemoryMCPServer
from sandmem.memory.mcp._tools import (
    SERVER_LOCK_TIMEOUT_S,
    TOOL_SPECS,
    UPDATE_MAX_CHARS,
    ServerOptions,
)

__all__ = ["TOOL_SPECS", "MemoryMCPServer", "ServerOptions", "serve_mcp"]


async def serve_mcp(
    workspace: str | os.PathLike[str] | None,
    *,
    layout: MemoryLayoutConfig | None = None,
    config: MemoryGenerateConfig | None = None,
    engine: Literal["model", "extractive"] | None = None,
    read_only: bool = False,
    allow_forget: bool = False,
    allow_generate: bool = False,
    conversation_id: str = "mcp-notes",
    lock_timeout: float = SERVER_LOCK_TIMEOUT_S,
    http: tuple[str, int] | None = None,
    token: str | None = None,
    max_update_chars: int | None = None,
    scopes: bool = False,
    create: bool = False,
    cwd: str | os.PathLike[str] | None = None,
    stores: StoreFactory | None = None,
) -> None:
    """Serve ``workspace``'s memory over MCP until the client goes away (stdio) or the task is
    cancelled (``http=(host, port)``: Streamable HTTP at ``/mcp``; a host that is not loopback
    needs ``token``). ``engine`` / ``config`` choose how ``memory_generate`` and
    ``memory_forget`` consolidate, as for ``sandmem.memory.generate``; ``max_update_chars``
    is the longest patch ``memory_update`` applies (default 65,536).

    Scopes (``docs/scopes.md``): ``workspace=None`` serves every project — each request's
    project memory is the project of the client's MCP roots (else of ``cwd``, default the
    current directory), with the personal scope (``$SANDMEM_HOME``) and the named scopes of
    the user's settings attached; a directory that is not a project gets no memory unless
    ``create``. ``scopes=True`` attaches the personal and named scopes to ``workspace``'s.
    ``stores(url, endpoint_url)`` makes the store of a named scope in one (``store =
    "s3://..."``; ``sandmem mcp`` passes ``sandmem.distributed.S3MemoryStore``); without it
    such a scope is reported unavailable and the others are served."""
    from sandmem.memory.api import config_from_options

    settings: dict[str, Any] = {
        "config": config_from_options(config, engine),
        "read_only": read_only,
        "allow_forget": allow_forget,
        "allow_generate": allow_generate,
        "conversation_id": conversation_id,
        "lock_timeout": lock_timeout,
        "max_update_chars": max_update_chars or UPDATE_MAX_CHARS,
    }
    layout = layout or MemoryLayoutConfig()
    server: MemoryMCPServer
    if workspace is None or scopes:
        server = _scoped_server(workspace, layout, create, cwd, settings, stores)
    else:
        server = MemoryMCPServer(
            ServerOptions(workspace=os.fspath(workspace), layout=layout, **settings)
        )
    if http is None:
        await server.run_stdio()
    else:
        await server.run_http(http[0], http[1], token=token)


def _scoped_server(
    workspace: str | os.PathLike[str] | None,
    layout: MemoryLayoutConfig,
    create: bool,
    cwd: str | os.PathLike[str] | None,
    settings: dict[str, Any],
    stores: StoreFactory | None = None,
) -> MemoryMCPServer:
    """The server over each request's scopes; its base options name the personal scope."""
    from sandmem.memory.mcp._scoped_server import ScopedMCPServer
    from sandmem.memory.scopes import personal_scope

    resolver = _resolver(workspace, layout, create, cwd)
    resolver.stores = stores
    personal = personal_scope(resolver.home)
    base = ServerOptions(workspace=str(personal.root), layout=personal.layout, **settings)
    return ScopedMCPServer(base, resolver)


def _resolver(
    workspace: str | os.PathLike[str] | None,
    layout: MemoryLayoutConfig,
    create: bool,
    cwd: str | os.PathLike[str] | None,
) -> ScopeResolver:
    """How each request's scopes are chosen: ``workspace`` fixed, else the client's roots
    (else ``cwd``); the user's settings from ``$SANDMEM_HOME/config.toml``."""
    from sandmem.memory.scopes import ensure_home, load_settings, sandmem_home

    home = sandmem_home()
    ensure_home(home)
    fixed = Path(os.path.abspath(workspace)) if workspace is not None else None
    return ScopeResolver(
        project=fixed,
        use_roots=fixed is None,
        cwd=Path(os.path.abspath(cwd if cwd is not None else os.getcwd())),
        settings=load_settings(home),
        home=home,
        layout=layout,
        create=create,
    )
