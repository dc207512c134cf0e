"""``MemoryMCPServer``: the memory tools and files of one layout as an MCP server (the ``mcp``
SDK's low-level ``Server``), over stdio or Streamable HTTP.

- **instructions**: the memory read prompt (``read_prompt.memory_read_prompt``: the same text
  and summary budget a run gets), after a short opening that maps it onto this server's tools;
- **tools**: ``_tools.MemoryTools``;
- **resources**: ``memory://<path in memories_dir>`` for the summary, ``MEMORY.md``, each rollout
  summary and each skill file. A watcher looks at them every ``poll_interval`` seconds and after
  each write tool; a change is sent to clients that subscribed (``resources/subscribe`` on
  handshake-era protocol versions, ``subscriptions/listen`` on 2026-07-28), and a file that
  appeared or went away to handshake-era clients that listed the resources
  (``notifications/resources/list_changed``).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import anyio
from pydantic import BaseModel

from sandmem._errors import MemoryNotFoundError
from sandmem._extras import require
from sandmem._prompts import load_prompt, render_prompt
from sandmem._terminal import printable
from sandmem.memory import _files, api
from sandmem.memory.config import MemoryLayoutConfig
from sandmem.memory.layout import MEMORY_MD, SUMMARIES_DIR, SUMMARY_MD, MemoryPaths, read_text
from sandmem.memory.mcp._tools import (
    Caller,
    MemoryTools,
    ServerOptions,
    ToolRefused,
    ToolSpec,
    memory_file,
)
from sandmem.memory.read_prompt import memory_read_prompt

if TYPE_CHECKING:
    from mcp.server.lowlevel import Server
    from mcp.server.session import ServerSession

logger = logging.getLogger("sandmem.memory.mcp")

SCHEME = "memory://"


def _version() -> str:
    from sandmem._version import __version__

    return __version__


class MemoryMCPServer:
    """An MCP server over one workspace's memory layout. ``options`` say what it serves and
    allows; ``server()`` is the SDK ``Server`` (built on first use); ``run_stdio()`` and
    ``run_http()`` serve it."""

    def __init__(self, options: ServerOptions, *, poll_interval: float = 2.0) -> None:
        require("mcp", "mcp")
        self.options = options
        self.tools = MemoryTools(options)
        self.tools.on_change = self.check_changes
        self.poll_interval = poll_interval
        self._server: Server[Any] | None = None
        #: per URI, the clients that subscribed (``client_of``), each with its last session
        self._subscribers: dict[str, dict[Any, ServerSession]] = {}
        #: handshake-era clients that listed the resources: told when the list changes
        self._listers: dict[Any, ServerSession] = {}
        self._seen: dict[str, str] | None = None
        self._bus: Any = None

    async def prepare(self) -> None:
        """Create the layout's files when missing (never overwriting), so a server that may
        write starts on a workspace without memory yet; with a remote store, bring the
        store's current memory into the workspace."""
        sync = self.tools.sync
        if self.options.read_only and sync is None:
            return
        from sandmem.memory.layout import ensure_layout

        missing = "the MCP server serves an existing workspace"
        async with api.target_session(self.options.workspace, missing) as (session, _owned):
            await ensure_layout(session, self.options.paths)
        if sync is not None:
            await sync.pull(fresh=True)

    # ------------------------------------------------------------ instructions

    def opening(self) -> str:
        """The instructions' first part: this server's tools mapped onto memory."""
        if self.options.read_only:
            update = "- memory is read-only through this server: never try to change it."
        else:
            update = (
                "- to correct a memory entry that turned out to be wrong, call `memory_update` "
                "with a patch of `MEMORY.md` (this is how you edit memory files here)."
            )
        return render_prompt(
            load_prompt("sandmem.memory", "mcp_server"),
            memories_dir=self.options.paths.memories_dir,
            update_line=update,
        ).strip()

    async def instructions(self) -> str:
        """The server's instructions: the tool guidance, then the memory read prompt with the
        summary as it is now (or a line saying memory is empty)."""
        paths = self.options.paths
        opening = self.opening()
        summary = ""
        try:
            summary = (
                await api.show(self.options.workspace, "summary", layout=self.options.layout)
            ).text
        except MemoryNotFoundError:
            pass
        prompt = memory_read_prompt(
            summary, paths.memories_dir, live_update=not self.options.read_only
        )
        if prompt is None:
            prompt = load_prompt("sandmem.memory", "mcp_no_summary").strip()
        return f"{opening}\n\n{prompt.strip()}\n"

    # ------------------------------------------------------------ the SDK server

    async def server(self) -> Server[Any]:
        if self._server is None:
            await self.prepare()
            self._server = self._build(await self.instructions())
        return self._server

    def _build(self, instructions: str) -> Server[Any]:
        from mcp.server.lowlevel import Server
        from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler

        self._bus = InMemorySubscriptionBus()
        return Server(
            "sandmem-memory",
            version=_version(),
            title="sandmem memory",
            instructions=instructions,
            on_subscriptions_listen=ListenHandler(self._bus),
            **self.handlers(),
        )

    def handlers(self) -> dict[str, Any]:
        """The SDK ``Server``'s request handlers (``on_...``) this server answers."""
        return {
            "on_list_tools": self._list_tools,
            "on_call_tool": self._call_tool,
            "on_list_resources": self._list_resources,
            "on_read_resource": self._read_resource,
            "on_subscribe_resource": self._subscribe,
            "on_unsubscribe_resource": self._unsubscribe,
        }

    async def _list_tools(self, ctx: Any, params: Any) -> Any:
        from mcp import types

        tools = [
            types.Tool(
                name=spec.name,
                description=spec.description,
                input_schema=self.args_of(spec).model_json_schema(),
                annotations=types.ToolAnnotations(
                    read_only_hint=not spec.writes,
                    destructive_hint=spec.name == "memory_forget",
                    open_world_hint=False,
                ),
            )
            for spec in self.options.offered()
        ]
        return types.ListToolsResult(tools=tools)

    async def _call_tool(self, ctx: Any, params: Any) -> Any:
        from mcp import types

        try:
            text = await self.run_tool(ctx, params.name, dict(params.arguments or {}))
        except ToolRefused as exc:
            return types.CallToolResult(
                content=[types.TextContent(type="text", text=str(exc))], is_error=True
            )
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)])

    def args_of(self, spec: ToolSpec) -> type[BaseModel]:
        """The arguments model of a tool (its JSON schema is the tool's input schema)."""
        return spec.args

    async def run_tool(self, ctx: Any, name: str, arguments: dict[str, Any]) -> str:
        """Run one tool for the request ``ctx``; ``ToolRefused`` when it cannot."""
        return await self.tools.call(name, arguments, _caller(ctx))

    async def resource_paths(self) -> list[str]:
        """The workspace-relative paths of the memory files served as resources."""
        return await served_paths(self.options.workspace, self.options.layout)

    def uri(self, path: str) -> str:
        return SCHEME + path[len(self.options.paths.memories_dir) + 1 :]

    async def _list_resources(self, ctx: Any, params: Any) -> Any:
        from mcp import types

        self._listed_by(ctx)
        resources = [
            types.Resource(
                uri=self.uri(path),
                name=path.rsplit("/", 1)[-1],
                title=path,
                description=_describe(path, self.options.paths.memories_dir),
                mime_type="text/markdown",
            )
            for path in await self.resource_paths()
        ]
        return types.ListResourcesResult(resources=resources)

    async def _read_resource(self, ctx: Any, params: Any) -> Any:
        from mcp import types
        from mcp.shared.exceptions import MCPError

        uri = str(params.uri)
        try:
            path = memory_file(self.options.paths, uri)
        except ToolRefused as exc:
            raise MCPError(code=types.INVALID_PARAMS, message=str(exc)) from None
        text = await self._text(path)
        if text is None:
            raise MCPError(code=types.INVALID_PARAMS, message=f"{uri} does not exist")
        return types.ReadResourceResult(
            contents=[types.TextResourceContents(uri=uri, mime_type="text/markdown", text=text)]
        )

    async def _text(self, path: str) -> str | None:
        try:
            async with api.open_target(self.options.workspace, self.options.layout) as (s, _, _o):
                return await read_text(s, path)
        except MemoryNotFoundError:
            return None

    async def _subscribe(self, ctx: Any, params: Any) -> Any:
        from mcp import types

        self._subscribers.setdefault(str(params.uri), {})[client_of(ctx.session)] = ctx.session
        self._listed_by(ctx)
        return types.EmptyResult()

    def _listed_by(self, ctx: Any) -> None:
        """Remember a handshake-era session (2026-07-28 clients use ``subscriptions/listen``)."""
        if getattr(ctx.session, "client_params", None) is not None:
            self._listers[client_of(ctx.session)] = ctx.session

    async def _unsubscribe(self, ctx: Any, params: Any) -> Any:
        from mcp import types

        self._subscribers.get(str(params.uri), {}).pop(client_of(ctx.session), None)
        return types.EmptyResult()

    # ------------------------------------------------------------ change notifications

    async def _snapshot(self) -> dict[str, str]:
        """Each served file's size and modification time (one ``stat`` each, nothing read);
        a file whose backend gives no time is hashed instead."""
        paths = await self.resource_paths()
        return await snapshot_of(self.options.workspace, self.options.layout, paths, self.uri)

    async def check_changes(self) -> list[str]:
        """Compare the memory files with the last look; tell subscribers what changed. Returns
        the URIs that changed (added, rewritten or removed)."""
        now = await self._snapshot()
        before, self._seen = self._seen, now
        if before is None:
            return []
        changed = sorted(u for u in {*before, *now} if before.get(u) != now.get(u))
        if not changed:
            return []
        await self.refresh_instructions(changed)
        from mcp.shared.subscriptions import ResourcesListChanged, ResourceUpdated

        listed = set(before) != set(now)
        for uri in changed:
            if self._bus is not None:
                await self._bus.publish(ResourceUpdated(uri=uri))
            for session in list(self._subscribers.get(uri, {}).values()):
                await self._notify(session, uri)
        if listed:
            if self._bus is not None:
                await self._bus.publish(ResourcesListChanged())
            for session in list(self._listers.values()):
                await self._notify(session, None)
        return changed

    async def refresh_instructions(self, changed: list[str]) -> None:
        """Make the instructions again when a summary changed: each session that starts
        later (a new HTTP session's ``initialize``, every ``server/discover``) gets them as
        they are now; one already started keeps its handshake's (MCP cannot change them)."""
        if self._server is not None and any(u.rsplit("/", 1)[-1] == SUMMARY_MD for u in changed):
            self._server.instructions = await self.instructions()

    async def _notify(self, session: ServerSession, uri: str | None) -> None:
        """Tell ``session`` that ``uri`` changed (``None``: the list of resources did)."""
        try:
            if uri is None:
                await session.send_resource_list_changed()
            else:
                await session.send_resource_updated(uri)
        except Exception as exc:  # a client that went away: forget it
            logger.debug("dropping a subscriber of %s: %s", uri or "the resource list", exc)
            for sessions in self._subscribers.values():
                sessions.pop(client_of(session), None)
            self._listers.pop(client_of(session), None)

    async def watch(self) -> None:
        """Look for changes every ``poll_interval`` seconds (pulling from the layout's remote
        store first, when it has one), forever."""
        await self.check_changes()
        while True:
            await anyio.sleep(self.poll_interval)
            try:
                if self.tools.sync is not None:
                    await self.tools.sync.pull()  # a generation elsewhere committed
                await self.check_changes()
            except Exception as exc:  # a half-written file, a vanished layout: look again later
                logger.debug("memory watch: %s", exc)

    # ------------------------------------------------------------ transports

    async def run_stdio(self) -> None:
        """Serve over this process's stdin and stdout until the client closes them."""
        from mcp.server.lowlevel import NotificationOptions
        from mcp.server.stdio import stdio_server

        server = await self.server()
        options = server.create_initialization_options(NotificationOptions(resources_changed=True))
        async with anyio.create_task_group() as group:
            group.start_soon(self.watch)
            async with stdio_server() as (read, write):
                await server.run(read, write, options)
            group.cancel_scope.cancel()

    async def run_http(self, host: str, port: int, *, token: str | None = None) -> None:
        """Serve Streamable HTTP at ``http://host:port/mcp``. ``token``: every request must
        carry ``Authorization: Bearer <token>``; required on an address that is not loopback."""
        from sandmem.memory.mcp._http import check_bind, http_app, serve_app

        check_bind(host, token)
        app = http_app(await self.server(), host, token)
        async with anyio.create_task_group() as group:
            group.start_soon(self.watch)
            await serve_app(app, host, port)
            group.cancel_scope.cancel()


def client_of(session: Any) -> Any:
    """The client a request's ``session`` stands for. The SDK builds a ``ServerSession`` per
    request, a proxy of the client's connection: subscriptions, listings and what is kept per
    client are keyed by the connection (by the session itself where it has none)."""
    connection = getattr(session, "_connection", None)
    return session if connection is None else connection


async def served_paths(workspace: str, layout: MemoryLayoutConfig) -> list[str]:
    """The workspace-relative paths of a layout's memory files served as resources."""
    paths = MemoryPaths.of(layout)
    try:
        files = await api.list_files(workspace, layout=layout)
    except MemoryNotFoundError:
        return []
    found = []
    for entry in files:
        if entry.bytes is None:
            continue
        try:
            found.append(memory_file(paths, entry.path))
        except ToolRefused:
            continue
    return found


async def snapshot_of(
    workspace: str, layout: MemoryLayoutConfig, paths: list[str], uri: Callable[[str], str]
) -> dict[str, str]:
    """Each served file's size and modification time (one ``stat`` each, nothing read),
    keyed by ``uri(path)``; a file whose backend gives no time is hashed instead."""
    if not paths:
        return {}
    found: dict[str, str] = {}
    async with api.open_target(workspace, layout) as (session, _, _o):
        stats = await _files.stat_many(session, paths)
        for path, stat in stats.items():
            if stat is None:
                continue
            key = f"{stat.size}:{stat.mtime_ns}"
            if stat.mtime_ns is None:
                text = await read_text(session, path) or ""
                key = hashlib.sha256(text.encode("utf-8")).hexdigest()
            found[uri(path)] = key
    return found


def _caller(ctx: Any) -> Caller:
    """Who is calling: the client's name and version from its handshake (handshake-era
    protocols) or from the request's metadata (2026-07-28), and the HTTP session id."""
    from mcp_types import CLIENT_INFO_META_KEY

    name = version = None
    params = getattr(ctx.session, "client_params", None)
    info: Any = getattr(params, "client_info", None)
    if info is None and isinstance(ctx.meta, Mapping):
        info = ctx.meta.get(CLIENT_INFO_META_KEY)
    if isinstance(info, Mapping):
        name, version = info.get("name"), info.get("version")
    elif info is not None:
        name, version = getattr(info, "name", None), getattr(info, "version", None)
    request = ctx.request
    headers = getattr(request, "headers", None)
    session = headers.get("mcp-session-id") if headers is not None else None
    return Caller(
        client=_self_declared(name) or "unknown client",
        version=_self_declared(version) or None,
        session=_self_declared(session) or None,
        transport="http" if request is not None else "stdio",
    )


#: how much of a client's self-declared name or version is kept
MAX_CLIENT_NAME = 200


def _self_declared(value: Any) -> str:
    """A client's name or version as it declared it: one printable line of at most
    ``MAX_CLIENT_NAME`` characters (redacted where it is recorded: the attribution)."""
    if not value:
        return ""
    return printable(str(value), one_line=True).strip()[:MAX_CLIENT_NAME]


def _describe(path: str, memories_dir: str) -> str:
    rel = path[len(memories_dir) + 1 :]
    if rel == SUMMARY_MD:
        return "The memory summary: user preferences, general tips, what memory holds."
    if rel == MEMORY_MD:
        return "The memory registry: task groups with keywords, learnings and pointers."
    if rel.startswith(f"{SUMMARIES_DIR}/"):
        return "The recap of one earlier conversation, with evidence."
    return "A skill: a reusable procedure."
