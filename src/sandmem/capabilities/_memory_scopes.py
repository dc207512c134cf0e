"""The memories a run attaches besides its workspace's layout (``docs/scopes.md``): the
person's personal scope and the named scopes of the settings, read and written as the MCP
server reads and writes them.

```text
RunScopes.attach    MemoryReadConfig.scopes + the user's settings ($SANDMEM_HOME/config.toml)
   │                + the workspace's sandmem.toml ─► [project] (the run's layout), [personal]
   ├─ sections()    each scope's summary for the read prompt (a read-only scope from its private
   │                copy); read_prompt.scoped_read_prompt shares the budget and labels them
   └─ tools()       memory_scope_search(query, scope) the other scopes' hits, labelled
                    memory_scope_read(path, scope)    a memory file of any attached scope
                    memory_scope_update(patch, scope) scopes.route("edit", scope):
                        project  ─► the run's live-edit policy (as its apply_patch: redacted,
                                     versioned as the run's edit when it ends)
                        personal / a read-write named scope ─► that layout, at once (its own
                                     lock, redaction and history; a proposal in review mode)
                        a read-only scope ─► refused, nothing opened
```

The other scopes are not files of the sandbox (a personal memory must not land in a project's
working tree, nor a team's in its git): they live on the host and are reached through the
memory tools the MCP server serves them with (``memory.mcp._scoped.ScopedTools``, one home for
what reading and editing a scope means). The run's own transcript goes to the project's
``sessions/`` only, so each scope is consolidated from its own conversations only.
"""

from __future__ import annotations

import logging
import os
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from sandmem._errors import SandmemError, UserError
from sandmem.agent._tools import FunctionTool, function_tool
from sandmem.memory import api
from sandmem.memory.config import MemoryGenerateConfig, MemoryLayoutConfig, MemoryReadConfig
from sandmem.memory.layout import MemoryPaths, read_text
from sandmem.memory.live_edit import LiveEditPolicy, patch_targets, workspace_relative
from sandmem.memory.mcp._scoped import ScopedTools, has_layout
from sandmem.memory.mcp._tools import (
    READ_DEFAULT_LINES,
    Caller,
    ServerOptions,
    ToolRefused,
    in_memory_dir,
    memory_file,
    page,
)
from sandmem.memory.scopes import (
    PERSONAL,
    PROJECT,
    Scope,
    attached_scopes,
    ensure_home,
    load_settings,
    route,
    sandmem_home,
)

if TYPE_CHECKING:
    from sandmem.sandboxes._session import SandboxSession

logger = logging.getLogger("sandmem.memory")

_READ_DESCRIPTION = (
    "Read a memory file of an attached scope outside the workspace (`MEMORY.md`, "
    "`memory_summary.md`, `rollout_summaries/<file>.md`, `skills/<name>/SKILL.md`), a page of "
    "numbered lines at a time."
)
_SEARCH_DESCRIPTION = (
    "Search the memory of the attached scopes outside the workspace with a few keywords; hits "
    "are `[scope] path:line [section] text`, best first."
)
_UPDATE_DESCRIPTION = (
    "Edit a scope's `MEMORY.md` or `skills/<name>/SKILL.md` now with an apply_patch patch "
    "(`MEMORY.md` exists, maybe empty: `*** Update File: MEMORY.md`, `@@`, `+- entry` appends). "
    "scope `personal`: the person's preferences and habits; `project` (default): facts about "
    "this code. A read-only scope is never written."
)


class RunScopes:
    """The scopes of one run: the project (the run's own layout, first) and the others."""

    def __init__(
        self,
        session: SandboxSession,
        paths: MemoryPaths,
        scopes: list[Scope],
        home: Path,
        read: MemoryReadConfig,
        generate: MemoryGenerateConfig | None,
    ) -> None:
        self.session = session
        self.paths = paths
        self.scopes = scopes
        self.others = [s for s in scopes if s.kind != "project"]
        self.home = home
        self.live_update = read.live_update
        #: one of the other scopes has memory: the agent gets the tools to search and read
        self.readable = any(has_layout(s) for s in self.others)
        #: the run may write one of them (live updates, a read-write scope)
        self.writable = bool(self.live_update) and any(s.writable for s in self.others)
        config = generate or MemoryGenerateConfig()
        options = ServerOptions(
            workspace=str(home / PERSONAL),
            layout=MemoryLayoutConfig(),
            config=config.model_copy(update={"review": self.live_update == "propose"}),
            read_only=not self.live_update,
        )
        self.served = ScopedTools(options, home / "cache" / "scopes")
        #: the run's live-edit policy (set when the run starts): the project's edits
        self.policy: LiveEditPolicy | None = None
        #: the run's conversation, named in the other scopes' history
        self.rollout_id: str | None = None

    @classmethod
    def attach(
        cls,
        session: SandboxSession,
        layout: MemoryLayoutConfig,
        read: MemoryReadConfig | None,
        generate: MemoryGenerateConfig | None,
    ) -> RunScopes | None:
        """The scopes a run attaches (``read.scopes`` and the settings), or ``None`` when it
        attaches none besides its own layout. Malformed settings are a ``UserError`` naming
        the file, before the first model call."""
        config = read.scopes if read is not None else None
        if read is None or config is None:
            return None
        home = Path(os.path.abspath(os.path.expanduser(config.home))) if config.home else None
        home = home or sandmem_home()
        settings = load_settings(home)
        changes: dict[str, object] = {}
        if not config.personal:
            changes["personal"] = False
        if not config.named:
            changes["named"] = {}
        settings = settings.model_copy(update=changes)
        root = Path(session.root)
        found = attached_scopes(
            root, home=home, settings=settings, layout=layout, workspace_settings=config.named
        )
        if not found or found[0].kind != "project":
            raise UserError(f"the workspace {session.root} is attached as no memory scope")
        # the project as the model sees it (a sandbox may mount it elsewhere)
        found[0] = replace(found[0], root=Path(session.display_root))
        if len(found) == 1:
            return None
        scopes = cls(session, MemoryPaths.of(layout), found, home, read, generate)
        if not scopes.readable and not scopes.writable:
            return None  # nothing to read and nothing the run may write: its layout alone
        return scopes

    def _caller(self) -> Caller:
        return Caller(client="sandmem run", transport="run", run=self.rollout_id)

    async def sections(self, project_summary: str) -> list[tuple[Scope, str]]:
        """Each attached scope with its summary, the project first. A scope whose summary is
        still empty but whose ``MEMORY.md`` has entries (what a run's or a client's edits
        wrote since the last consolidation: a preference is read by the very next run) gives
        its ``MEMORY.md``, said to be such; a scope with no memory yet is left out, and one
        that cannot be read is left out with a warning (the run goes on with the others)."""
        found = [(self.scopes[0], project_summary)]
        for scope in self.others:
            try:
                text = await self.served.summary_of(scope)
                if text is not None and not text.strip():
                    text = await self._entries(scope)
            except SandmemError as exc:
                logger.warning("memory scope %s not read (%s): %s", scope.name, scope.root, exc)
                continue
            if text:
                found.append((scope, text))
        return found

    async def _entries(self, scope: Scope) -> str:
        """The scope's ``MEMORY.md`` headed as such (``""`` when it is empty)."""
        source = await self.served.readable(scope)
        shown = await api.show(str(source.root), "memory", layout=scope.layout)
        if not shown.text.strip():
            return ""
        return f"(no summary yet; the entries of its MEMORY.md:)\n\n{shown.text.strip()}"

    # ------------------------------------------------------------ tools

    def tools(self) -> list[FunctionTool]:
        """``memory_scope_search`` and ``memory_scope_read`` when another scope has memory,
        ``memory_scope_update`` when the run may write one: a run pays for no tool it cannot
        use (a person with no personal memory yet gets only the tool to write the first)."""

        async def memory_scope_read(path: str, scope: str, offset: int = 1) -> str:
            """Read a memory file.

            Args:
                path: The file, such as `MEMORY.md`.
                scope: The scope, such as `personal`.
                offset: The first line (1-based).
            """
            return await self.read(path, scope, offset)

        async def memory_scope_search(query: str, scope: str | None = None) -> str:
            """Search memory.

            Args:
                query: A few keywords.
                scope: One scope (default: all outside the workspace).
            """
            return await self.search(query, scope)

        async def memory_scope_update(patch: str, scope: str | None = None) -> str:
            """Edit memory.

            Args:
                patch: The patch.
                scope: `personal` or `project` (default).
            """
            return await self.update(patch, scope)

        tools = []
        if self.readable:
            tools += [
                function_tool(name="memory_scope_search", description=_SEARCH_DESCRIPTION)(
                    memory_scope_search
                ),
                function_tool(name="memory_scope_read", description=_READ_DESCRIPTION)(
                    memory_scope_read
                ),
            ]
        if self.writable:
            tools.append(
                function_tool(name="memory_scope_update", description=_UPDATE_DESCRIPTION)(
                    memory_scope_update
                )
            )
        return tools

    async def search(self, query: str, scope: str | None = None) -> str:
        """The other scopes' hits for ``query``, labelled by scope and interleaved by rank (the
        project's memory is in the workspace: the agent greps it)."""
        args: dict[str, object] = {"query": query, "limit": 10}
        if scope is not None and scope.strip():
            if scope.strip() == PROJECT:
                raise ToolRefused(
                    f"the project's memory is in the workspace: search {self.paths.memory_md} "
                    "with grep"
                )
            args["scope"] = scope.strip()
        return await self.served.call("memory_search", args, self._caller(), self.others)

    async def read(self, path: str, scope: str, offset: int = 1) -> str:
        """A page of a memory file of an attached scope (the project's from the workspace)."""
        if scope.strip() == PROJECT:
            rel = memory_file(self.paths, path)
            text = await read_text(self.session, rel)
            if text is None:
                raise ToolRefused(f"{rel} does not exist")
            return f"[project] {page(rel, text, max(offset, 1), READ_DEFAULT_LINES)}"
        args = {"path": path, "scope": scope.strip(), "offset": offset}
        return await self.served.call("memory_read", args, self._caller(), self.others)

    async def update(self, patch: str, requested: str | None) -> str:
        """Edit the scope ``scopes.route`` picks (the project unless one is named); a
        read-only or unknown scope is refused before anything is opened."""
        try:
            scope = route("edit", (requested or "").strip() or None, self.scopes)
        except UserError as exc:
            raise ToolRefused(f"memory_scope_update: {exc}; nothing was written") from None
        if scope.kind == "project":
            return await self._update_project(patch)
        if scope.kind == "personal":
            ensure_home(self.home)
        args = {"patch": patch, "scope": scope.name}
        return await self.served.call("memory_update", args, self._caller(), self.others)

    async def _update_project(self, patch: str) -> str:
        """The project's memory, as the run's ``apply_patch`` edits it (the run's policy:
        redacted, under the layout lock, versioned or proposed as the run's edit at its end)."""
        if self.policy is None:
            raise ToolRefused("memory_scope_update: the run has not started")
        patch = in_memory_dir(patch, self.paths)
        paths = self.paths
        for target in patch_targets(patch) or []:
            rel = workspace_relative(self.session, target)
            if rel != paths.memory_md and not rel.startswith(paths.skills_dir + "/"):
                raise ToolRefused(
                    f"memory_scope_update edits only MEMORY.md and files under skills/ of a "
                    f"memory directory; the patch touches {target!r}, so nothing was written"
                )
        result = await self.policy.apply(self.session, patch)
        return f"[project] {result.render()}"
