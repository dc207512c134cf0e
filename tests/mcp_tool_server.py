"""A tiny MCP server for the agent MCP tests: ``python mcp_tool_server.py stdio`` serves over
stdin/stdout, ``python mcp_tool_server.py http PORT`` over Streamable HTTP on 127.0.0.1. Its
tools: ``add``, ``shout``, ``pixel`` (an image), ``weather`` (structured content), ``broken``
(a tool error) and ``wipe_disk`` (for the block list)."""

from __future__ import annotations

import base64
import os
import sys
from pathlib import Path

from mcp.server.mcpserver import Image, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mP8/x8AAwMCAO+a84QAAAAASUVORK5CYII="
)
server = MCPServer("tool-test-server")


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
def shout(text: str) -> str:
    """Upper-case a text."""
    return text.upper()


@server.tool()
def pixel() -> Image:
    """A 1x1 PNG image."""
    return Image(data=PNG, format="png")


@server.tool()
def weather(city: str) -> dict[str, object]:
    """Today's weather in a city, as structured content."""
    return {"city": city, "celsius": 21}


@server.tool()
def broken() -> str:
    """Always fails."""
    raise ToolError("the broken tool broke")


@server.tool()
def wipe_disk() -> str:
    """A tool no agent should see."""
    return "wiped"


if __name__ == "__main__":
    if os.environ.get("MCP_TEST_PID_FILE"):  # lets a test check the process is gone
        Path(os.environ["MCP_TEST_PID_FILE"]).write_text(str(os.getpid()))
    if sys.argv[1] == "stdio":
        server.run()
    else:
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
