"""``ScopedMCPServer``: one MCP server for every project a person works in. Each request
attaches the project of the client's roots (or of the server's working directory), the
personal scope and the named scopes (``_scoped.ScopeResolver``); the tools work across them
(``_scoped.ScopedTools``).

- **instructions**: read when the server starts, for the scopes attached then (the project
  of its working directory, when it is one): each scope's summary in a labelled section, the
  summary budget shared by ``scopes.share_budget``, and a line saying the project wins;
- **resources**: ``memory://<scope>/<file>`` (``memory://personal/MEMORY.md``) for the
  scopes of the request; changes are announced for the scopes attached at the start and
  every project a request attached since.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from sandmem._errors import MemoryNotFoundError
from sandmem._prompts import load_prompt, render_prompt
from sandmem.memory import api
from sandmem.memory.layout import MemoryPaths, read_text
from sandmem.memory.mcp._scoped import (
    SCOPED_ARGS,
    ScopedTools,
    ScopeResolver,
    has_layout,
)
from sandmem.memory.mcp._server import (
    SCHEME,
    MemoryMCPServer,
    _caller,
    _describe,
    served_paths,
    snapshot_of,
)
from sandmem.memory.mcp._tools import ServerOptions, ToolRefused, ToolSpec, memory_file
from sandmem.memory.read_prompt import SUMMARY_MAX_TOKENS, memory_read_prompt
from sandmem.memory.scopes import Scope, scoped_summary

#: the most projects whose resources are watched for changes
MAX_WATCHED = 64


class ScopedMCPServer(MemoryMCPServer):
    """The memory server over the scopes of each request. ``options.workspace`` is the
    personal scope's directory (always attached); ``resolver`` picks the rest."""

    def __init__(
        self, options: ServerOptions, resolver: ScopeResolver, *, poll_interval: float = 2.0
    ) -> None:
        super().__init__(options, poll_interval=poll_interval)
        self.resolver = resolver
        self.scoped = ScopedTools(options, resolver.home / "cache" / "scopes")
        #: the scopes whose files are watched: those of the start, and projects seen since
        self._watched: dict[str, Scope] = {}

    def _startup_scopes(self) -> list[Scope]:
        start = self.resolver.fixed or self.resolver.project_of(self.resolver.cwd)
        return self.resolver.scopes_for(start)

    async def prepare(self) -> None:
        """The personal scope's layout is created when missing (never overwriting)."""
        scopes = self._startup_scopes()
        for scope in scopes:
            self._watch_scope(scope)
        if self.options.read_only:
            return
        from sandmem.memory.mcp._scoped import _create_layout

        for scope in scopes:
            if scope.kind == "personal" and scope.writable and not has_layout(scope):
                await _create_layout(scope)

    def _watch_scope(self, scope: Scope) -> None:
        if len(self._watched) < MAX_WATCHED:
            self._watched.setdefault(f"{scope.name}\x00{scope.root}", scope)

    async def instructions(self) -> str:
        scopes = self._startup_scopes()
        sections = []
        for scope in scopes:
            if not has_layout(scope):
                continue
            try:
                source = await self.scoped.readable(scope)
                shown = await api.show(str(source.root), "summary", layout=scope.layout)
            except MemoryNotFoundError:
                continue
            sections.append((scope, shown.text))
        paths = self.options.paths
        opening = self.opening()
        attached = ", ".join(f"`{s.name}` ({s.mode})" for s in scopes)
        scoped = render_prompt(
            load_prompt("sandmem.memory", "mcp_scopes"), attached=attached
        ).strip()
        summary = scoped_summary(sections, SUMMARY_MAX_TOKENS)
        prompt = memory_read_prompt(
            summary, paths.memories_dir, live_update=not self.options.read_only
        )
        if prompt is None:
            prompt = load_prompt("sandmem.memory", "mcp_no_summary").strip()
        return f"{opening}\n{scoped}\n\n{prompt.strip()}\n"

    def args_of(self, spec: ToolSpec) -> type[BaseModel]:
        return SCOPED_ARGS[spec.name]

    async def request_scopes(self, ctx: Any) -> list[Scope]:
        scopes = self.resolver.scopes_for(await self.resolver.project(ctx.session))
        for scope in scopes:
            self._watch_scope(scope)
        return scopes

    async def run_tool(self, ctx: Any, name: str, arguments: dict[str, Any]) -> str:
        scopes = await self.request_scopes(ctx)
        text = await self.scoped.call(name, arguments, _caller(ctx), scopes)
        if name in {s.name for s in self.options.offered() if s.writes}:
            await self.check_changes()
        return text

    # ------------------------------------------------------------ resources

    async def _scope_files(self, scope: Scope) -> list[str]:
        if not has_layout(scope):
            return []
        source = await self.scoped.readable(scope)
        return await served_paths(str(source.root), scope.layout)

    def scope_uri(self, scope: Scope, path: str) -> str:
        return f"{SCHEME}{scope.name}/{path[len(scope.layout.memories_dir) + 1 :]}"

    async def _list_resources(self, ctx: Any, params: Any) -> Any:
        from mcp import types

        self._listed_by(ctx)
        resources = []
        for scope in await self.request_scopes(ctx):
            for path in await self._scope_files(scope):
                resources.append(
                    types.Resource(
                        uri=self.scope_uri(scope, path),
                        name=path.rsplit("/", 1)[-1],
                        title=f"{scope.label()} {path}",
                        description=f"{scope.label()} "
                        + _describe(path, scope.layout.memories_dir),
                        mime_type="text/markdown",
                    )
                )
        return types.ListResourcesResult(resources=resources)

    async def _read_resource(self, ctx: Any, params: Any) -> Any:
        from mcp import types
        from mcp.shared.exceptions import MCPError

        uri = str(params.uri)
        rest = uri[len(SCHEME) :] if uri.startswith(SCHEME) else ""
        name, _, rel = rest.partition("/")
        scope = next((s for s in await self.request_scopes(ctx) if s.name == name), None)
        try:
            if scope is None:
                raise ToolRefused(f"{uri}: no attached scope {name!r} (memory://<scope>/<file>)")
            path = memory_file(MemoryPaths.of(scope.layout), rel)
        except ToolRefused as exc:
            raise MCPError(code=types.INVALID_PARAMS, message=str(exc)) from None
        text = None
        if has_layout(scope):
            text = await _text_of(await self.scoped.readable(scope), path)
        if text is None:
            raise MCPError(code=types.INVALID_PARAMS, message=f"{uri} does not exist")
        return types.ReadResourceResult(
            contents=[types.TextResourceContents(uri=uri, mime_type="text/markdown", text=text)]
        )

    async def _snapshot(self) -> dict[str, str]:
        found: dict[str, str] = {}
        for scope in list(self._watched.values()):
            if not has_layout(scope):
                continue
            try:
                paths = await self._scope_files(scope)
                source = await self.scoped.readable(scope)
                found.update(
                    await snapshot_of(
                        str(source.root),
                        scope.layout,
                        paths,
                        lambda p, s=scope: self.scope_uri(s, p),  # type: ignore[misc]
                    )
                )
            except MemoryNotFoundError:
                continue
        return found


async def _text_of(scope: Scope, path: str) -> str | None:
    try:
        async with api.open_target(str(scope.root), scope.layout) as (session, _, _o):
            return await read_text(session, path)
    except MemoryNotFoundError:
        return None
