"""The memory tools over several scopes (``sandmem mcp`` without ``--workspace``, or with
``--scopes``): which scopes a request attaches, and what each tool does across them.

```text
request ─► ScopeResolver.scopes(ctx)     project: the client's roots (roots/list), else the
   │                                     server's working directory; + personal + named
   ▼
ScopedTools.call(name, args, scopes)
   ├─ read tools   search: every scope, hits labelled and interleaved (project first);
   │               read/list/status: the scope named (``scope`` or ``personal:MEMORY.md``)
   └─ write tools  scopes.route(kind, scope): preference → personal, the rest → project;
                   a read-only scope is refused before anything is opened
                   ▼
             MemoryTools of that one scope (its own layout: history, index, redaction)
```

Each scope is served by the single-layout ``MemoryTools`` of ``_tools``, built for it with
``read_only`` set when the scope is read-only: a write reaching a read-only scope is refused
twice, here by the rule and there by the tool set.
"""

from __future__ import annotations

import hashlib
import os
import time
import warnings
import weakref
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import unquote, urlparse

import anyio
from pydantic import Field, create_model

from sandmem._errors import MemoryNotFoundError, SandmemError, UserError
from sandmem.memory import api
from sandmem.memory.config import MemoryLayoutConfig
from sandmem.memory.layout import ensure_layout
from sandmem.memory.mcp._server import client_of
from sandmem.memory.mcp._tools import (
    TOOL_SPECS,
    Caller,
    MemoryTools,
    ServerOptions,
    ToolRefused,
    ToolSpec,
    _Args,
    hit_line,
)
from sandmem.memory.scopes import (
    PERSONAL,
    PROJECT,
    Scope,
    ScopeSettings,
    WriteKind,
    attached_scopes,
    ensure_store_copy,
    find_project,
    never_projects,
    route,
)
from sandmem.memory.store import MemoryStore, ReadOnlyStore

#: how many roots of one request are looked at for a project
MAX_ROOTS = 16
#: how long a store that could not be reached is not asked again (each request would
#: otherwise wait for its timeouts)
STORE_RETRY_S = 30.0

#: makes the store of a scope in one, from its URL and endpoint (``sandmem mcp`` passes the
#: S3 store of the ``distributed`` extra; the store sits above this floor)
StoreFactory = Callable[[str, str | None], MemoryStore]


class ScopeUnavailable(ToolRefused):
    """A scope whose memory cannot be read now (its store cannot be reached)."""


_SCOPE_HELP = (
    "The memory scope: `project` (this repository), `personal` (the person, across "
    "projects) or a named scope; {default}."
)


def _scoped_args(spec: ToolSpec, default: str) -> type[_Args]:
    """``spec``'s arguments with an optional ``scope``."""
    model: type[_Args] = create_model(
        f"Scoped{spec.args.__name__}",
        __base__=spec.args,
        scope=(
            Annotated[
                str | None,
                Field(max_length=64, description=_SCOPE_HELP.format(default=default)),
            ],
            None,
        ),
    )
    return model


_DEFAULTS = {
    "memory_search": "default: every attached scope",
    "memory_read": "default: the one a `scope:` prefix of the path names, else the project",
    "memory_list": "default: every attached scope",
    "memory_status": "default: every attached scope",
    "memory_remember": "default: `personal` for a preference, `project` for the rest",
    "memory_update": "default: `project`",
    "memory_forget": "default: `project`",
    "memory_generate": "default: `project`",
}
SCOPED_ARGS: dict[str, type[_Args]] = {
    name: _scoped_args(spec, _DEFAULTS[name]) for name, spec in TOOL_SPECS.items()
}


class ScopeResolver:
    """Which scopes a request attaches: the project (fixed, or found from the client's
    roots or the server's working directory), then the personal and named scopes."""

    def __init__(
        self,
        *,
        project: Path | None,
        use_roots: bool,
        cwd: Path,
        settings: ScopeSettings,
        home: Path,
        layout: MemoryLayoutConfig,
        create: bool = False,
        stores: StoreFactory | None = None,
    ) -> None:
        self.fixed = project
        self.use_roots = use_roots
        self.cwd = cwd
        self.settings = settings
        self.home = home
        self.layout = layout
        #: a directory that is not a project may get memory (``--create``)
        self.create = create
        #: client sessions whose ``roots/list`` failed or hung: not asked again
        self.silent: weakref.WeakSet[Any] = weakref.WeakSet()
        self.roots_wait_s = ROOTS_TIMEOUT_S
        self.stores = stores
        #: the store of each scope in one (made once), or why it could not be made
        self._stores: dict[tuple[str, str | None], MemoryStore | str] = {}

    def project_of(self, directory: Path | str | None) -> Path | None:
        """The project memory of ``directory``: its project (a marker in it or a parent), or
        with ``create`` the directory itself; ``None`` when it is neither."""
        if directory is None:
            return None
        found = find_project(directory, self.settings.project_markers, layout=self.layout)
        if found is None and self.create and os.path.isabs(os.fspath(directory)):
            real = os.path.realpath(directory)
            if os.path.isdir(real) and real not in never_projects():
                found = Path(real)
        if found is not None and _within(found, self.home):
            return None  # sandmem's own data (the personal scope, copies) is no project
        return found

    def scopes_for(self, project: Path | None) -> list[Scope]:
        found = attached_scopes(project, home=self.home, settings=self.settings, layout=self.layout)
        return [self._with_store(scope) for scope in found]

    def _with_store(self, scope: Scope) -> Scope:
        """A scope in a store with the store in its layout (the tools then move its local
        copy to and from the store, as ``sandmem mcp --store`` does)."""
        if scope.store is None:
            return scope
        made = self.store_of(scope)
        if isinstance(made, str):
            return scope
        if not scope.writable:
            made = ReadOnlyStore(made)  # a pull keeps no history mirror there either
        return replace(scope, layout=self.layout.model_copy(update={"store": made}))

    def store_of(self, scope: Scope) -> MemoryStore | str:
        """The store of a scope in one, or why there is none."""
        assert scope.store is not None
        key = (scope.store, scope.endpoint_url)
        found = self._stores.get(key)
        if found is None:
            if self.stores is None:
                found = (
                    "this server was started without store support (`sandmem mcp` has it; "
                    "serve_mcp needs stores=)"
                )
            else:
                try:
                    found = self.stores(scope.store, scope.endpoint_url)
                except SandmemError as exc:
                    found = str(exc)
            self._stores[key] = found
        return found

    async def project(self, session: Any) -> Path | None:
        """The project of a request made on ``session`` (the SDK's ``ServerSession``)."""
        if self.fixed is not None:
            return self.fixed
        if self.use_roots:
            roots = await client_roots(session, self.silent, self.roots_wait_s)
            if roots is not None:
                for root in roots[:MAX_ROOTS]:
                    found = self.project_of(root)
                    if found is not None:
                        return found
                return None
        return self.project_of(self.cwd)


#: how long a client may take to answer ``roots/list`` (some clients announce roots and never
#: answer); after that the request goes on with the server's working directory
ROOTS_TIMEOUT_S = 5.0


async def client_roots(
    session: Any, silent: weakref.WeakSet[Any], wait_s: float = ROOTS_TIMEOUT_S
) -> list[str] | None:
    """The directories of the client's roots (``file://`` URIs, in its order), or ``None``
    when the client offers no roots (a 2026-07-28 client, one without the capability, one
    that answers with an error or not within ``wait_s`` seconds: it joins ``silent`` and is
    not asked again)."""
    params = getattr(session, "client_params", None)
    capabilities = getattr(params, "capabilities", None)
    client = client_of(session)  # the SDK makes a session per request: the client's connection
    if getattr(capabilities, "roots", None) is None or client in silent:
        return None
    from mcp.shared.exceptions import MCPError

    result = None
    try:
        with warnings.catch_warnings(), anyio.move_on_after(wait_s):
            warnings.simplefilter("ignore")  # roots are deprecated in 2026-07-28, served before
            result = await session.list_roots()
    except MCPError:
        pass
    if result is None:
        silent.add(client)
        return None
    found = []
    for root in result.roots:
        path = root_path(str(root.uri))
        if path is not None:
            found.append(path)
    return found


def root_path(uri: str) -> str | None:
    """The local directory of a ``file://`` root URI (``None`` for another scheme or host)."""
    parsed = urlparse(uri)
    if parsed.scheme != "file" or parsed.netloc not in ("", "localhost"):
        return None
    path = unquote(parsed.path)
    if not path.startswith("/") or "\x00" in path:
        return None
    return os.path.normpath(path)


def _within(path: Path, directory: Path) -> bool:
    real, top = os.path.realpath(path), os.path.realpath(directory)
    return real == top or real.startswith(top.rstrip(os.sep) + os.sep)


def has_layout(scope: Scope) -> bool:
    """Whether the scope's layout exists (its memories or sessions directory); a scope in a
    store always has one (its local copy is made on the first read)."""
    if scope.store is not None:
        return True
    return any(
        os.path.lexists(scope.root / d)
        for d in (scope.layout.memories_dir, scope.layout.sessions_dir)
    )


def split_scope(path: str, given: str | None) -> tuple[str | None, str]:
    """A ``scope:path`` prefix taken off a path (``personal:MEMORY.md``), or ``given``."""
    head, sep, rest = path.partition(":")
    if sep and head and "/" not in head and not head.startswith("memory"):
        return head.strip(), rest
    return given, path


class ScopedTools:
    """The memory tools over the scopes of each request."""

    def __init__(
        self,
        options: ServerOptions,
        cache: Path,
        stores_of: Callable[[Scope], MemoryStore | str] | None = None,
    ) -> None:
        self.options = options
        #: the store of a scope in one, or why there is none (``ScopeResolver.store_of``)
        self.stores_of = stores_of
        #: where the copies read-only scopes are read from live (``_scope_copy``)
        self.cache = cache
        self._tools: dict[tuple[str, bool], MemoryTools] = {}
        #: stores that could not be reached: when, and why
        self._down: dict[str, tuple[float, str]] = {}

    async def readable(self, scope: Scope) -> Scope:
        """The scope to read ``scope``'s memory from: itself when it is writable, else its
        private copy, brought up to date (reading a layout may write to it: its index, its
        locks; a read-only scope is never written). A scope in a store is its own private
        copy, pulled from the store first (``ScopeUnavailable`` when it cannot be)."""
        if scope.store is not None:
            await self.pulled(scope)
            return scope
        if scope.writable or not has_layout(scope):
            return scope
        from sandmem.memory import _scope_copy
        from sandmem.memory.layout import MemoryPaths
        from sandmem.sandboxes import Manifest, UnixLocalSandboxClient

        real = await anyio.to_thread.run_sync(os.path.realpath, scope.root)
        key = hashlib.sha256(real.encode("utf-8", "replace"))
        root = self.cache / key.hexdigest()[:32]
        copy = await UnixLocalSandboxClient().create(manifest=Manifest(root=root))  # ours
        async with api.target_session(str(scope.root), "gone") as (source, _owned), copy:
            await _scope_copy.refresh(source, copy, MemoryPaths.of(scope.layout))
        return Scope(scope.name, scope.kind, root, False, scope.layout)

    async def summary_of(self, scope: Scope) -> str | None:
        """The scope's ``memory_summary.md`` as a reader sees it (a read-only scope's from its
        private copy); ``None`` when the scope has no memory yet."""
        if not has_layout(scope):
            return None
        source = await self.readable(scope)
        try:
            shown = await api.show(str(source.root), "summary", layout=scope.layout)
        except MemoryNotFoundError:
            return None
        return shown.text

    async def pulled(self, scope: Scope) -> None:
        """Bring a store scope's local copy up to the store's memory (at most once every
        ``_store.PULL_INTERVAL_S``); ``ScopeUnavailable`` naming the scope when the store
        cannot be reached (then not asked again for ``STORE_RETRY_S``)."""
        assert scope.store is not None
        where = str(scope.root)  # one copy per store URL and endpoint
        down = self._down.get(where)
        if down is not None and time.monotonic() - down[0] < STORE_RETRY_S:
            raise ScopeUnavailable(_unavailable(scope, down[1]))
        sync = self.tools_of(scope).sync if scope.layout.store is not None else None
        if sync is None:
            made = self.stores_of(scope) if self.stores_of is not None else None
            why = made if isinstance(made, str) else "its store could not be opened"
            raise ScopeUnavailable(_unavailable(scope, why))
        try:
            if not await anyio.to_thread.run_sync(_copy_ready, scope):
                await _create_layout(scope)
            await sync.pull()
        except (SandmemError, OSError) as exc:
            problem = " ".join(str(exc).split())[:300] or type(exc).__name__
            self._down[where] = (time.monotonic(), problem)
            raise ScopeUnavailable(_unavailable(scope, problem)) from None
        self._down.pop(where, None)

    def tools_of(self, scope: Scope) -> MemoryTools:
        """The single-layout tools of ``scope`` (read-only when it is)."""
        key = (os.path.realpath(scope.root), scope.writable)
        found = self._tools.get(key)
        if found is None:
            base = self.options
            found = MemoryTools(
                ServerOptions(
                    workspace=str(scope.root),
                    layout=scope.layout,
                    config=base.config,
                    read_only=base.read_only or not scope.writable,
                    # forget rewrites a layout's history in place: not on a store's copy
                    allow_forget=base.allow_forget and scope.store is None,
                    allow_generate=base.allow_generate,
                    conversation_id=base.conversation_id,
                    lock_timeout=base.lock_timeout,
                    tracing=base.tracing,
                    max_update_chars=base.max_update_chars,
                )
            )
            self._tools[key] = found
        return found

    async def call(
        self, name: str, arguments: dict[str, Any], caller: Caller, scopes: Sequence[Scope]
    ) -> str:
        offered = {spec.name for spec in self.options.offered()}
        if name not in offered:
            return await self.tools_of(_first(scopes)).call(name, arguments, caller)
        from pydantic import ValidationError

        try:
            args = SCOPED_ARGS[name].model_validate(arguments)
        except ValidationError as exc:
            from sandmem.memory.mcp._tools import _problems

            raise ToolRefused(f"bad arguments for {name}: {_problems(exc)}") from None
        plain = args.model_dump(exclude={"scope"})
        requested: str | None = getattr(args, "scope", None)
        if TOOL_SPECS[name].writes:
            return await self._write(name, plain, requested, caller, scopes)
        if name == "memory_search":
            return await self._search(plain, requested, caller, scopes)
        if name == "memory_read":
            requested, plain["path"] = split_scope(plain["path"], requested)
            scope = _named(requested or PROJECT, scopes, fallback=requested is None)
            text = await self._in(await self.readable(scope), name, plain, caller)
            return f"{scope.label()} {text}"
        chosen = [_named(requested, scopes)] if requested else list(scopes)
        parts = []
        for scope in chosen:
            if not has_layout(scope):
                parts.append(f"## {scope.label()} {scope.root}\n(no memory yet)")
                continue
            try:
                text = await self._in(await self.readable(scope), name, plain, caller)
            except ScopeUnavailable as exc:
                parts.append(f"## {scope.label()} unavailable\n{exc}")
                continue
            parts.append(
                f"## {scope.label()} {scope.kind} memory, {scope.mode}, {scope.where()}\n{text}"
            )
        return "\n\n".join(parts)

    async def _in(self, scope: Scope, name: str, args: dict[str, Any], caller: Caller) -> str:
        if not has_layout(scope):
            raise ToolRefused(f"scope {scope.name!r} has no memory yet ({scope.root})")
        return await self.tools_of(scope).call(name, args, caller)

    async def _search(
        self, args: dict[str, Any], requested: str | None, caller: Caller, scopes: Sequence[Scope]
    ) -> str:
        """Every scope's hits, labelled, interleaved by rank in attachment order (the
        project's first at each rank): BM25 scores of two indexes are not comparable."""
        chosen = [_named(requested, scopes)] if requested else list(scopes)
        lists: list[list[str]] = []
        missing: list[str] = []
        for scope in chosen:
            if not has_layout(scope):
                continue
            try:
                source = await self.readable(scope)
            except ScopeUnavailable as exc:
                if requested:
                    raise
                missing.append(f"{scope.label()} not searched: {exc}")
                continue
            try:
                found = await api.search(
                    str(source.root), args["query"], args["limit"], layout=scope.layout
                )
            except MemoryNotFoundError:
                continue
            lists.append([f"{scope.label()} {hit_line(hit)}" for hit in found.hits])
        merged: list[str] = []
        for rank in range(max((len(found) for found in lists), default=0)):
            merged += [found[rank] for found in lists if rank < len(found)]
        merged = merged[: args["limit"]]
        if not merged:
            merged = [f"No memory matches {args['query']!r}."]
        return "\n".join([*merged, *missing])

    async def _write(
        self,
        name: str,
        args: dict[str, Any],
        requested: str | None,
        caller: Caller,
        scopes: Sequence[Scope],
    ) -> str:
        kind: WriteKind = args.get("kind", "note") if name == "memory_remember" else "edit"
        try:
            scope = route(kind, requested, scopes)
        except UserError as exc:
            raise ToolRefused(f"{name}: {exc}; nothing was written") from None
        if scope.store is not None:
            if name == "memory_forget":
                raise ToolRefused(
                    f"memory_forget is not available on scope {scope.name!r}, a scope in a "
                    f"store ({scope.where()}): forget on a host whose workspace holds that "
                    "layout; nothing was written"
                )
            try:
                await self.pulled(scope)  # its local copy exists and is current
            except ScopeUnavailable as exc:
                raise ToolRefused(f"{name}: {exc}; nothing was written") from None
            try:
                text = await self.tools_of(scope).call(name, args, caller)
            except ToolRefused as exc:
                raise ToolRefused(f"{scope.label()} {exc}") from None
            return f"{scope.label()} {text}"
        if not has_layout(scope):
            await _create_layout(scope)
        text = await self.tools_of(scope).call(name, args, caller)
        return f"{scope.label()} {text}"


async def _create_layout(scope: Scope) -> None:
    """An empty layout in the scope's directory (which exists: a project's, or the personal
    one ``scopes.ensure_home`` made)."""
    from sandmem.memory.layout import MemoryPaths

    missing = "a scope's directory must exist"
    async with api.target_session(str(scope.root), missing) as (session, _owned):
        await ensure_layout(session, MemoryPaths.of(scope.layout))


def _copy_ready(scope: Scope) -> bool:
    """Make a store scope's local copy directory (sandmem's own, under ``$SANDMEM_HOME``)
    when missing; whether it holds the layout already."""
    ensure_store_copy(scope.root)
    return any(
        os.path.isdir(scope.root / d)
        for d in (scope.layout.memories_dir, scope.layout.sessions_dir)
    )


def _unavailable(scope: Scope, problem: str) -> str:
    return (
        f"scope {scope.name!r} ({scope.where()}) cannot be read now: {problem}; the other "
        "scopes are served"
    )


def _first(scopes: Sequence[Scope]) -> Scope:
    if not scopes:
        raise ToolRefused("no memory scope is attached to this request")
    return scopes[0]


def _named(name: str | None, scopes: Sequence[Scope], *, fallback: bool = False) -> Scope:
    """The attached scope called ``name``; with ``fallback``, the first attached scope when
    ``name`` is not attached (a read of the project when there is none)."""
    for scope in scopes:
        if scope.name == name:
            return scope
    if fallback and scopes:
        return scopes[0]
    attached = ", ".join(s.name for s in scopes) or "none"
    raise ToolRefused(f"there is no scope {name!r} here; attached scopes: {attached}")


__all__ = [
    "PERSONAL",
    "SCOPED_ARGS",
    "ScopeResolver",
    "ScopeUnavailable",
    "ScopedTools",
    "StoreFactory",
    "client_roots",
    "has_layout",
    "root_path",
    "split_scope",
]
