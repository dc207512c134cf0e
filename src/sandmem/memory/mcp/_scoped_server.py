"""``ScopedMCPServer``: one MCP server for every project a person works in. Each request
attaches the project of the client's roots (or of the server's working directory), the
personal scope and the named scopes (``_scoped.ScopeResolver``); the tools work across them
(``_scoped.ScopedTools``).

- **instructions**: the handshake's (``initialize``; ``server/discover`` on 2026-07-28) are
  made before any roots are known — the protocol has no way to change them later — for the
  scopes of the server's working directory (its project, when it is one), at the start and
  again when a summary changes (for sessions that start later): each scope's summary in a
  labelled section, the summary budget shared by ``scopes.share_budget``, and a line saying
  the project wins. The same text **for the
  request's roots** is the resource ``memory://instructions.md`` and the prompt ``memory``,
  made anew at each read;
- **resources**: ``memory://<scope>/<file>`` (``memory://personal/MEMORY.md``) for the
  scopes of the request. Changes are watched in the scopes attached at the start and every
  project a request attached since, each project apart; a change is announced to the
  sessions it concerns (a project's file to the sessions whose roots are in that project),
  and ``memory://instructions.md`` with a summary. A client that sends
  ``notifications/roots/list_changed`` is told the resource list and the instructions
  resource changed (they follow its roots).
"""

from __future__ import annotations

import os
import warnings
import weakref
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from sandmem._errors import MemoryNotFoundError
from sandmem._prompts import load_prompt, render_prompt
from sandmem.memory import api
from sandmem.memory.layout import SUMMARY_MD, MemoryPaths, read_text
from sandmem.memory.mcp._scoped import (
    SCOPED_ARGS,
    ScopedTools,
    ScopeResolver,
    ScopeUnavailable,
    has_layout,
)
from sandmem.memory.mcp._server import (
    SCHEME,
    MemoryMCPServer,
    _caller,
    _describe,
    client_of,
    served_paths,
    snapshot_of,
)
from sandmem.memory.mcp._tools import ServerOptions, ToolRefused, ToolSpec, memory_file
from sandmem.memory.read_prompt import SUMMARY_MAX_TOKENS, memory_read_prompt
from sandmem.memory.scopes import PROJECT, Scope, scoped_summary

#: the most projects whose resources are watched for changes
MAX_WATCHED = 64
#: the instructions for the request's roots, as a resource (no scope is named with a dot)
INSTRUCTIONS_URI = f"{SCHEME}instructions.md"
#: the same text as a prompt (``prompts/get``)
PROMPT = "memory"
_PROMPT_HELP = (
    "The memory of the project you work in now (the client's roots) and the person's: the "
    "server's instructions made for this request's roots, with each scope's summary."
)


class ScopedMCPServer(MemoryMCPServer):
    """The memory server over the scopes of each request. ``options.workspace`` is the
    personal scope's directory (always attached); ``resolver`` picks the rest."""

    def __init__(
        self, options: ServerOptions, resolver: ScopeResolver, *, poll_interval: float = 2.0
    ) -> None:
        super().__init__(options, poll_interval=poll_interval)
        self.resolver = resolver
        self.scoped = ScopedTools(
            options, resolver.home / "cache" / "scopes", stores_of=resolver.store_of
        )
        #: the scopes whose files are watched: those of the start, and projects seen since
        self._watched: dict[str, Scope] = {}
        #: the project directory of each session's last request ("" for none)
        self._projects: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()

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
        return await self.instructions_for(self._startup_scopes())

    async def instructions_for(self, scopes: list[Scope]) -> str:
        """The instructions for ``scopes``: the tool guidance, the line naming the scopes,
        then the memory read prompt with each scope's summary in a labelled section."""
        sections = []
        for scope in scopes:
            if not has_layout(scope):
                continue
            try:
                source = await self.scoped.readable(scope)
                shown = await api.show(str(source.root), "summary", layout=scope.layout)
            except (MemoryNotFoundError, ScopeUnavailable):
                continue  # a store that cannot be reached: the others' summaries
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
        project = await self.resolver.project(ctx.session)
        scopes = self.resolver.scopes_for(project)
        for scope in scopes:
            self._watch_scope(scope)
        try:
            self._projects[client_of(ctx.session)] = _key(project) if project is not None else ""
        except TypeError:  # a session that cannot be weakly referenced is not remembered
            pass
        return scopes

    def handlers(self) -> dict[str, Any]:
        return {
            **super().handlers(),
            "on_list_prompts": self._list_prompts,
            "on_get_prompt": self._get_prompt,
            "on_roots_list_changed": self._roots_changed,
        }

    def _build(self, instructions: str) -> Any:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # roots are deprecated in 2026-07-28, served before
            return super()._build(instructions)

    # ------------------------------------------------------------ the instructions, per request

    async def _list_prompts(self, ctx: Any, params: Any) -> Any:
        from mcp import types

        prompt = types.Prompt(name=PROMPT, title="sandmem memory", description=_PROMPT_HELP)
        return types.ListPromptsResult(prompts=[prompt])

    async def _get_prompt(self, ctx: Any, params: Any) -> Any:
        from mcp import types
        from mcp.shared.exceptions import MCPError

        if params.name != PROMPT:
            raise MCPError(code=types.INVALID_PARAMS, message=f"no prompt {params.name!r}")
        text = await self.instructions_for(await self.request_scopes(ctx))
        message = types.PromptMessage(
            role="user", content=types.TextContent(type="text", text=text)
        )
        return types.GetPromptResult(description=_PROMPT_HELP, messages=[message])

    async def _roots_changed(self, ctx: Any, params: Any) -> None:
        """The client's roots changed: what it lists and the instructions resource follow
        them, so tell it (a client that stopped answering ``roots/list`` is asked again)."""
        client = client_of(ctx.session)
        self.resolver.silent.discard(client)
        if client in self._listers:
            await self._notify(ctx.session, None)
        if client in self._subscribers.get(INSTRUCTIONS_URI, {}):
            await self._notify(ctx.session, INSTRUCTIONS_URI)

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
        try:
            source = await self.scoped.readable(scope)
        except ScopeUnavailable:
            return []  # a store that cannot be reached: the other scopes' files
        return await served_paths(str(source.root), scope.layout)

    def scope_uri(self, scope: Scope, path: str) -> str:
        return f"{SCHEME}{scope.name}/{path[len(scope.layout.memories_dir) + 1 :]}"

    async def _list_resources(self, ctx: Any, params: Any) -> Any:
        from mcp import types

        self._listed_by(ctx)
        resources = [
            types.Resource(
                uri=INSTRUCTIONS_URI,
                name="instructions.md",
                title="sandmem memory: instructions for this project",
                description=_PROMPT_HELP,
                mime_type="text/markdown",
            )
        ]
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
        if uri == INSTRUCTIONS_URI:
            made = await self.instructions_for(await self.request_scopes(ctx))
            return types.ReadResourceResult(
                contents=[types.TextResourceContents(uri=uri, mime_type="text/markdown", text=made)]
            )
        rest = uri[len(SCHEME) :] if uri.startswith(SCHEME) else ""
        name, _, rel = rest.partition("/")
        scope = next((s for s in await self.request_scopes(ctx) if s.name == name), None)
        try:
            if scope is None:
                raise ToolRefused(f"{uri}: no attached scope {name!r} (memory://<scope>/<file>)")
            path = memory_file(MemoryPaths.of(scope.layout), rel)
            text = None
            if has_layout(scope):
                text = await _text_of(await self.scoped.readable(scope), path)
        except ToolRefused as exc:
            raise MCPError(code=types.INVALID_PARAMS, message=str(exc)) from None
        if text is None:
            raise MCPError(code=types.INVALID_PARAMS, message=f"{uri} does not exist")
        return types.ReadResourceResult(
            contents=[types.TextResourceContents(uri=uri, mime_type="text/markdown", text=text)]
        )

    async def _snapshot(self) -> dict[str, str]:
        """Each watched file's size and time, keyed by its URI and its scope's directory
        (``<uri>\x00<directory>``: two projects' ``memory://project/MEMORY.md`` apart)."""
        found: dict[str, str] = {}
        for scope in list(self._watched.values()):
            if not has_layout(scope):
                continue
            try:
                source = await self.scoped.readable(scope)
                paths = await served_paths(str(source.root), scope.layout)
                where = _key(scope.root)
                found.update(
                    await snapshot_of(
                        str(source.root),
                        scope.layout,
                        paths,
                        lambda p, s=scope, w=where: f"{self.scope_uri(s, p)}\x00{w}",  # type: ignore[misc]
                    )
                )
            except (MemoryNotFoundError, ScopeUnavailable):
                continue
        return found

    async def check_changes(self) -> list[str]:
        """Compare the watched files with the last look; tell the sessions each change
        concerns (a project's file: the sessions whose last request was in that project;
        the other scopes' files: every subscriber), and ``memory://instructions.md`` with
        them. Returns the URIs that changed."""
        now = await self._snapshot()
        before, self._seen = self._seen, now
        if before is None:
            return []
        changed = sorted(k for k in {*before, *now} if before.get(k) != now.get(k))
        if not changed:
            return []
        from mcp.shared.subscriptions import ResourcesListChanged, ResourceUpdated

        where = [_split(key) for key in changed]
        uris = sorted({uri for uri, _ in where})
        await self.refresh_instructions(uris)
        # the instructions hold the summaries: they change with a summary
        summaries = [(u, d) for u, d in where if u.endswith(f"/{SUMMARY_MD}")]
        for uri in [*uris, INSTRUCTIONS_URI] if summaries else uris:
            if self._bus is not None:
                await self._bus.publish(ResourceUpdated(uri=uri))
            causes = (
                summaries if uri == INSTRUCTIONS_URI else [(u, d) for u, d in where if u == uri]
            )
            for session in list(self._subscribers.get(uri, {}).values()):
                if any(self._concerns(session, u, d) for u, d in causes):
                    await self._notify(session, uri)
        if set(before) != set(now):
            if self._bus is not None:
                await self._bus.publish(ResourcesListChanged())
            for session in list(self._listers.values()):
                if any(self._concerns(session, u, d) for u, d in where):
                    await self._notify(session, None)
        return uris

    def _concerns(self, session: Any, uri: str, directory: str) -> bool:
        """Whether a change of ``uri`` in ``directory`` concerns ``session``: always, but
        for a project's file when the session's last request was in another project."""
        if not uri.startswith(f"{SCHEME}{PROJECT}/"):
            return True
        seen: str | None = None
        try:
            seen = self._projects.get(client_of(session))
        except TypeError:  # not weakly referenced: never remembered
            pass
        return seen is None or seen == directory


def _key(path: Path | str) -> str:
    return os.path.realpath(path)


def _split(key: str) -> tuple[str, str]:
    uri, _, directory = key.partition("\x00")
    return uri, directory


async def _text_of(scope: Scope, path: str) -> str | None:
    try:
        async with api.open_target(str(scope.root), scope.layout) as (session, _, _o):
            return await read_text(session, path)
    except MemoryNotFoundError:
        return None
