"""Driving ``sandmem mcp`` with the ``mcp`` SDK's own clients, for the MCP tests: a stdio
session on a ``sandmem mcp`` subprocess (handshake era, at any protocol revision the SDK
knows, or the 2026-07-28 ``Client``), and the text of a tool result."""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import mcp
from mcp import ClientSession, StdioServerParameters, stdio_client, types

SANDMEM = str(Path(sys.executable).with_name("sandmem"))
CLIENT = types.Implementation(name="sandmem-test", version="9.9")


def text_of(result: Any) -> str:
    return "\n".join(block.text for block in result.content)


def server_params(args: list[str], env: dict[str, str] | None = None) -> StdioServerParameters:
    """``sandmem mcp ARGS`` as a stdio server (no API key: nothing may call a model)."""
    return StdioServerParameters(
        command=SANDMEM,
        args=["mcp", *args],
        env={**os.environ, "OPENAI_API_KEY": "", **(env or {})},
    )


@asynccontextmanager
async def stdio_session(
    args: list[str], *, protocol: str | None = None, **kwargs: Any
) -> AsyncIterator[ClientSession]:
    """A handshake-era session on ``sandmem mcp ARGS``; ``protocol`` offers that revision in
    ``initialize`` instead of the SDK's newest (an older client)."""
    async with (
        stdio_client(server_params(args)) as (read, write),
        ClientSession(read, write, client_info=CLIENT, **kwargs) as session,
    ):
        await initialize_as(session, protocol)
        yield session


async def initialize_as(session: ClientSession, protocol: str | None) -> types.InitializeResult:
    """The ``initialize`` handshake of a client that speaks ``protocol`` (``None``: the SDK's
    newest handshake-era revision)."""
    if protocol is None:
        return await session.initialize()
    result = await session.send_request(
        types.InitializeRequest(
            params=types.InitializeRequestParams(
                protocol_version=protocol,
                capabilities=types.ClientCapabilities(),
                client_info=CLIENT,
            )
        ),
        types.InitializeResult,
    )
    session.adopt(result)
    await session.send_notification(types.InitializedNotification())
    return result


@asynccontextmanager
async def modern_client(args: list[str]) -> AsyncIterator[mcp.Client]:
    """A 2026-07-28 client (``server/discover``, a per-request envelope) on ``sandmem mcp``."""
    async with mcp.Client(stdio_client(server_params(args)), client_info=CLIENT) as client:
        yield client
