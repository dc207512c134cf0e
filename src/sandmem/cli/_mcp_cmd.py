"""``sandmem mcp``: serve a workspace's memory to any MCP client, through
``sandmem.memory.serve_mcp``."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import shutil
import signal
import socket
import sys
import tempfile
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from sandmem._errors import UserError
from sandmem._extras import require
from sandmem.cli._common import (
    engine_options,
    layout_options,
    memory_command_config,
    review_option,
    run_async,
    store_layout,
    store_options,
    workspace_option,
)
from sandmem.cli._settings_file import ConfigError
from sandmem.memory import MemoryGenerateConfig, memory_scopes, serve_mcp

if TYPE_CHECKING:
    from sandmem.distributed import S3MemoryStore


def _address(value: str | None) -> tuple[str, int] | None:
    if value is None:
        return None
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise click.BadParameter(
            f"give HOST:PORT (e.g. 127.0.0.1:8765), not {value!r}", param_hint="--http"
        )
    if not 1 <= int(port) <= 65535:
        raise click.BadParameter(
            f"{value!r}: the port must be 1 to 65535 (e.g. 127.0.0.1:8765)", param_hint="--http"
        )
    return host.strip("[]"), int(port)


def _check_port(host: str, port: int) -> None:
    """Fail with one line, before anything starts, when the address cannot be bound (in
    use, not this machine's, not a host at all)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise ConfigError(f"cannot serve on {host}:{port}: unknown host ({exc.strerror})") from None
    family, kind, proto, _, where = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
        try:
            probe.bind(where)
        except OSError as exc:
            hint = (
                "; another server listens there: stop it or pick another port with --http"
                if exc.errno == errno.EADDRINUSE
                else ""
            )
            problem = (exc.strerror or str(exc)).lower()
            raise ConfigError(f"cannot serve on {host}:{port}: {problem}{hint}") from None


def _tools(read_only: bool, allow_forget: bool, allow_generate: bool) -> str:
    names = ["search", "read", "list", "status"]
    if not read_only:
        names += ["remember", "update"]
        names += ["forget"] if allow_forget else []
        names += ["generate"] if allow_generate else []
    return ", ".join(f"memory_{n}" for n in names)


def _serve_stdio(serving: Coroutine[Any, Any, None], cleanup: Callable[[], None]) -> None:
    """Serve until the client closes stdin; the first Ctrl-C stops it (exit 130). The MCP
    SDK reads stdin in a thread that nothing can interrupt, so after an interrupt the server
    is cancelled, given a moment to finish a tool call, and the process ends without waiting
    for that thread."""

    async def main() -> None:
        task = asyncio.ensure_future(serving)
        interrupted = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGINT, interrupted.set)
        stop = asyncio.ensure_future(interrupted.wait())
        await asyncio.wait({task, stop}, return_when=asyncio.FIRST_COMPLETED)
        if not interrupted.is_set():
            stop.cancel()
            return task.result()
        task.cancel()
        await asyncio.wait({task}, timeout=STOP_GRACE_S)
        click.echo(_STOPPED, err=True)
        cleanup()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(130)

    run_async(main())


#: how long a stopped server may take to finish the tool call in progress
STOP_GRACE_S = 3.0
_STOPPED = "stopped (Ctrl-C): every note and edit made through the server is saved"


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
    default=30.0,  # serve_mcp's default (the MCP server's SERVER_LOCK_TIMEOUT_S)
    show_default=True,
    help="Seconds a write waits for a running consolidation before it fails.",
)
@review_option
@click.option(
    "--max-update-chars",
    type=click.IntRange(min=1),
    default=None,
    help="The longest patch memory_update applies; a longer one is refused. Default: 65,536.",
)
@click.option(
    "--create",
    is_flag=True,
    help="Serve a workspace that has no memory yet (creating an empty layout); without it "
    "such a workspace is refused, as a mistyped path would be. Without --workspace: let a "
    "directory that is not a project (no .git or other marker) get memory too.",
)
@click.option(
    "--scopes",
    "with_scopes",
    is_flag=True,
    help="With --workspace: attach the personal scope and the named scopes of your settings "
    "too (without --workspace they always are). See `sandmem docs scopes`.",
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
    review: bool,
    create: bool,
    with_scopes: bool,
) -> None:
    """Serve the workspace's memory over the Model Context Protocol.

    Any MCP client (Claude Code, Codex CLI, Cursor, the OpenAI Agents SDK, pydantic-ai) can
    then search and read memory, remember notes and correct MEMORY.md; the server's
    instructions carry the memory summary. stdio by default; see `sandmem docs mcp`. With
    --store the workspace (default: a temporary directory) holds the server's copy.

    Without --workspace (and --store) one server serves every project: each request's
    project memory is the project of the client's MCP roots (else of the directory the server
    started in), with your personal memory ($SANDMEM_HOME) attached; see `sandmem docs scopes`.

    Prints one line on stderr when it starts (what it serves, where, how to stop it). A
    workspace with neither the memories nor the sessions directory is refused unless
    --create. Ctrl-C stops it (exit 130); over stdio, so does the client closing stdin.
    """
    address = _address(http)
    token = os.environ.get(token_env or "SANDMEM_MCP_TOKEN") or None
    if token_env is not None and token is None:
        raise click.UsageError(f"--token-env {token_env}: ${token_env} is not set or empty")
    generates = (allow_generate or allow_forget) and not read_only
    config = (
        memory_command_config(engine, model, workspace) if generates else MemoryGenerateConfig()
    )
    config = config.model_copy(update={"review": review})
    layout = store_layout(memories_dir, sessions_dir, store_url, endpoint_url)
    given = click.get_current_context().get_parameter_source("workspace")
    default = given is click.core.ParameterSource.DEFAULT
    roots = default and store_url is None
    if store_url is not None and with_scopes:
        raise click.UsageError("--scopes serves local layouts: it does not go with --store")
    if store_url is None and not create and not roots:
        _require_memory(workspace, memories_dir, sessions_dir)
    if address is not None:
        _check_port(*address)
    require("mcp", "mcp")  # before the start line: a missing extra is the one line printed
    tools = _tools(read_only, allow_forget, allow_generate)
    if review:
        tools += " (review mode: changes become proposals in `sandmem memory inbox`)"
    with _copy_dir(workspace, store_url is not None and default) as where:
        serving = serve_mcp(
            None if roots else where,
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
            scopes=with_scopes,
            create=create,
            stores=_scope_store,
        )
        what = f"the memory of {store_url or where} ({layout.memories_dir}/)"
        if roots:
            what = (
                "the memory of each project the client's roots name (else of "
                f"{Path.cwd()}), with personal memory in {_home()}"
            )
        elif with_scopes:
            what += f", with personal memory in {_home()}"
        if address is None:
            click.echo(
                f"sandmem mcp: serving {what} over stdio; tools: {tools}; it stops when the "
                "client closes stdin, or on Ctrl-C",
                err=True,
            )
            _serve_stdio(
                serving,
                lambda: shutil.rmtree(where, ignore_errors=True) if where != workspace else None,
            )
            return
        host, port = address
        shown = f"[{host}]" if ":" in host else host
        auth = "bearer token required" if token else "no token: loopback only"
        click.echo(
            f"sandmem mcp: serving {what} at http://{shown}:{port}/mcp (Streamable HTTP, "
            f"{auth}); tools: {tools}; Ctrl-C stops",
            err=True,
        )
        try:
            run_async(serving)
        except KeyboardInterrupt:
            click.echo(_STOPPED, err=True)
            raise SystemExit(130) from None
        except BaseExceptionGroup as group:  # the HTTP server could not start after all
            if group.subgroup(SystemExit) is None and group.subgroup(OSError) is None:
                raise
            raise ConfigError(
                f"cannot serve on {host}:{port}: the address could not be bound (in use?)"
            ) from None


def _scope_store(url: str, endpoint_url: str | None) -> S3MemoryStore:
    """The store of a named scope in one (``store = "s3://..."`` in the settings): S3, at the
    scope's ``endpoint_url`` or ``$SANDMEM_S3_ENDPOINT_URL`` (AWS when neither is set)."""
    from sandmem.distributed import S3MemoryStore

    endpoint = endpoint_url or os.environ.get("SANDMEM_S3_ENDPOINT_URL") or None
    return S3MemoryStore.from_url(url, endpoint_url=endpoint)


def _home() -> str:
    """Where personal memory lives (a malformed settings file is one error line)."""
    try:
        return memory_scopes().home
    except UserError as exc:
        raise ConfigError(str(exc)) from None


def _require_memory(workspace: Path, memories_dir: str, sessions_dir: str) -> None:
    """A workspace without a layout is most likely a wrong path: refuse it (exit 2)."""
    if any(os.path.lexists(workspace / d) for d in (memories_dir, sessions_dir)):
        return
    raise ConfigError(
        f"no memory in {workspace.absolute()}: neither {memories_dir}/ nor {sessions_dir}/ "
        "exists. Point -w at the workspace whose memory to serve, or pass --create to start "
        "an empty memory there"
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
