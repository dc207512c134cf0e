"""Owns ``sandmem mcp``, a Model Context Protocol server over one workspace's memory, and, on
the memory API floor, imports the memory API (``memory.api``), the segment recorder, the live-edit
path and the floors below (never ``capabilities`` or anything above).

For any MCP client (Claude Code, Codex CLI, Cursor, the OpenAI Agents SDK, pydantic-ai); see
``docs/mcp.md``. The ``mcp`` SDK (``pip install 'sandmem[mcp]'``) is imported only when a
server is made.
"""

from __future__ import annotations

import os
from typing import Literal

from sandmem.memory.config import MemoryGenerateConfig, MemoryLayoutConfig
from sandmem.memory.mcp._server import MemoryMCPServer
from sandmem.memory.mcp._tools import (
    SERVER_LOCK_TIMEOUT_S,
    TOOL_SPECS,
    UPDATE_MAX_CHARS,
    ServerOptions,
)

__all__ = ["TOOL_SPECS", "MemoryMCPServer", "ServerOptions", "serve_mcp"]


async def serve_mcp(
    workspace: str | os.PathLike[str],
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
) -> None:
    """Serve ``workspace``'s memory over MCP until the client goes away (stdio) or the task is
    cancelled (``http=(host, port)``: Streamable HTTP at ``/mcp``; a host that is not loopback
    needs ``token``). ``engine`` / ``config`` choose how ``memory_generate`` and
    ``memory_forget`` consolidate, as for ``sandmem.memory.generate``; ``max_update_chars``
    is the longest patch ``memory_update`` applies (default 65,536)."""
    from sandmem.memory.api import config_from_options

    options = ServerOptions(
        workspace=os.fspath(workspace),
        layout=layout or MemoryLayoutConfig(),
        config=config_from_options(config, engine),
        read_only=read_only,
        allow_forget=allow_forget,
        allow_generate=allow_generate,
        conversation_id=conversation_id,
        lock_timeout=lock_timeout,
        max_update_chars=max_update_chars or UPDATE_MAX_CHARS,
    )
    server = MemoryMCPServer(options)
    if http is None:
        await server.run_stdio()
    else:
        await server.run_http(http[0], http[1], token=token)
