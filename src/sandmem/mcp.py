"""MCP servers as tool sources for agents: the reference SDK's ``agents.mcp`` names.

``Agent(mcp_servers=[server])`` gives the agent the tools of each connected server, listed once
per run and narrowed by the server's ``tool_filter``. Needs ``pip install 'sandmem[mcp]'`` (the
official ``mcp`` SDK), imported when a server connects. This is the client side; the memory
server ``sandmem mcp`` is ``sandmem.memory.mcp``.

    async with MCPServerStdio(params={"command": "python", "args": ["server.py"]}) as server:
        agent = Agent(name="a", mcp_servers=[server])
        result = await Runner.run(agent, "...")
"""

from __future__ import annotations

from sandmem._errors import MCPServerError
from sandmem.agent._mcp import (
    MCPServer,
    MCPServerStdio,
    MCPServerStdioParams,
    MCPServerStreamableHttp,
    MCPServerStreamableHttpParams,
    ToolFilter,
    ToolFilterCallable,
    ToolFilterContext,
    ToolFilterStatic,
    create_static_tool_filter,
)

__all__ = [
    "MCPServer",
    "MCPServerError",
    "MCPServerStdio",
    "MCPServerStdioParams",
    "MCPServerStreamableHttp",
    "MCPServerStreamableHttpParams",
    "ToolFilter",
    "ToolFilterCallable",
    "ToolFilterContext",
    "ToolFilterStatic",
    "create_static_tool_filter",
]
