"""``sandmem mcp``: serve a workspace's memory to any MCP client, through
``sandmem.memory.serve_mcp``."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import click

from sandmem.cli._common import (
    engine_options,
    generate_config,
    layout_options,
    run_async,
    store_layout,
    store_options,
    workspace_option,
)
from sandmem.memory import MemoryGenerateConfig, serve_mcp


def _address(value: str | None) -> tuple[str, int] | None:
    if value is None:
        return None
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise click.BadParameter(f"give HOST:PORT (e.g. 127.0.0.1:8765), not {value!r}")
    return host.strip("[]"), int(port)


@click.command("mcp")
@workspace_option(required=False)
@layout_options
@engine_options
@click.option(
    "--http",
    "http",
    metavar="HOST:PORT",
    default=None,
    help="Serve Streamable HTTP at http://HOST:PORT/mcp instead of stdio. A HOST that is not "
    "loopback needs a bearer token (--token-env).",
)
@click.option(
    "--token-env",
    metavar="VAR",
    default=None,
    help="The environment variable that holds the bearer token HTTP clients must send "
    "(Authorization: Bearer <token>). Default: SANDMEM_MCP_TOKEN when it is set.",
)
@store_options
@click.option("--read-only", is_flag=True, help="Offer the read tools only.")
@click.option("--allow-forget", is_flag=True, help="Offer memory_forget.")
@click.option("--allow-generate", is_flag=True, help="Offer memory_generate.")
@click.option(
    "--conversation-id",
    default="mcp-notes",
    show_default=True,
    help="The server's own conversation: notes from memory_remember are its segments.",
)
@click.option(
    "--lock-timeout",
    type=click.FloatRange(min=0.1),
    default=30.0,
    show_default=True,
    help="Seconds a write waits for a running consolidation before it fails.",
)
@click.option(
    "--max-update-chars",
    type=click.IntRange(min=1),
    default=None,
    help="The longest patch memory_update applies; a longer one is refused. Default: 65,536.",
)
def mcp_command(
    workspace: Path,
    memories_dir: str,
    sessions_dir: str,
    engine: str,
    model: str | None,
    http: str | None,
    token_env: str | None,
    store_url: str | None,
    endpoint_url: str | None,
    read_only: bool,
    allow_forget: bool,
    allow_generate: bool,
    conversation_id: str,
    lock_timeout: float,
    max_update_chars: int | None,
) -> None:
    """Serve the workspace's memory over the Model Context Protocol.

    Any MCP client (Claude Code, Codex CLI, Cursor, the OpenAI Agents SDK, pydantic-ai) can
    then search and read memory, remember notes and correct MEMORY.md; the server's
    instructions carry the memory summary. stdio by default; see `sandmem docs mcp`. With
    --store the workspace (default: a temporary directory) holds the server's copy.
    """
    address = _address(http)
    token = os.environ.get(token_env or "SANDMEM_MCP_TOKEN") or None
    if token_env is not None and token is None:
        raise click.UsageError(f"--token-env {token_env}: ${token_env} is not set or empty")
    generates = (allow_generate or allow_forget) and not read_only
    config = generate_config(engine, model, workspace) if generates else MemoryGenerateConfig()
    layout = store_layout(memories_dir, sessions_dir, store_url, endpoint_url)
    given = click.get_current_context().get_parameter_source("workspace")
    default = given is click.core.ParameterSource.DEFAULT
    with _copy_dir(workspace, store_url is not None and default) as where:
        run_async(
            serve_mcp(
                where,
                layout=layout,
                config=config,
                read_only=read_only,
                allow_forget=allow_forget,
                allow_generate=allow_generate,
                conversation_id=conversation_id,
                lock_timeout=lock_timeout,
                http=address,
                token=token,
                max_update_chars=max_update_chars,
            )
        )


@contextlib.contextmanager
def _copy_dir(workspace: Path, temporary: bool) -> Iterator[Path]:
    """The workspace, or (``temporary``: a store's layout with no --workspace) a private
    directory for the server's copy, removed when the server ends."""
    if not temporary:
        yield workspace
        return
    with tempfile.TemporaryDirectory(prefix="sandmem-mcp-") as tmp:
        yield Path(tmp)
