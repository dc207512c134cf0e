"""The memory tools an MCP client calls: their arguments (pydantic models, from which the
JSON schemas are generated), their descriptions, and what each does, over the public memory
API (``status``, ``list_conversations``, ``search``, ``generate``, ``forget``), the segment
recorder (``memory.recording``) and the live-edit path (``live_edit``).

Nothing here imports the ``mcp`` SDK: ``_server`` turns these into MCP tools. A tool that
cannot do what it was asked raises ``ToolRefused`` with a message for the model.
"""

from __future__ import annotations

import json
import os
import posixpath
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from sandmem._errors import MemoryLockedError, SandboxError, SandmemError, UserError
from sandmem.memory import _files, api, journal
from sandmem.memory._results import SearchHit
from sandmem.memory.config import MemoryGenerateConfig, MemoryLayoutConfig
from sandmem.memory.history import Attribution
from sandmem.memory.layout import (
    MEMORY_MD,
    READ_FILES,
    SKILLS_DIR,
    SUMMARIES_DIR,
    MemoryPaths,
    read_text,
)
from sandmem.memory.live_edit import apply_live_edit, patch_targets, workspace_relative
from sandmem.memory.mcp._store import StoreSync
from sandmem.memory.recording import RolloutRecorder
from sandmem.memory.rollouts import note_segment, validate_rollout_id
from sandmem.memory.store import MemoryStore
from sandmem.memory.views._status import conversation_page
from sandmem.redaction import Redactor
from sandmem.sandboxes._session import SandboxSession
from sandmem.tracing import Span, span

#: how long a tool call waits for the layout's lock: shorter than the library's default
#: (``_files.LOCK_TIMEOUT_S``), so a client is answered "locked" rather than left hanging
SERVER_LOCK_TIMEOUT_S = 30.0
#: lines ``memory_read`` returns when no ``limit`` is given, and the most it returns at once
READ_DEFAULT_LINES = 200
READ_MAX_LINES = 2000
#: the longest note ``memory_remember`` accepts
NOTE_MAX_CHARS = 8000
#: the longest patch ``memory_update`` takes by default (``ServerOptions.max_update_chars``)
UPDATE_MAX_CHARS = 65_536


class ToolRefused(SandmemError):
    """A tool call that cannot be done as asked; the message says why and what to do."""


@dataclass(frozen=True)
class Caller:
    """Who called a tool: the MCP client's name and version (from its handshake or request
    metadata) and the session it gave (the HTTP session id; none on stdio)."""

    client: str = "unknown client"
    version: str | None = None
    session: str | None = None
    transport: str = "stdio"
    #: the conversation of a sandmem run calling the tools (its live edits are the run's)
    run: str | None = None

    def label(self) -> str:
        """The client as one string: its name and version, and its session when it gave one."""
        client = f"{self.client} {self.version}" if self.version else self.client
        return f"{client} (session {self.session})" if self.session else client

    def source(self) -> dict[str, str]:
        client = f"{self.client} {self.version}" if self.version else self.client
        found = {"via": f"MCP ({self.transport})", "client": client}
        if self.session:
            found["session"] = self.session
        return found


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SearchArgs(_Args):
    query: Annotated[str, Field(min_length=1, description="A few keywords from the task.")]
    limit: Annotated[int, Field(ge=1, le=50, description="The most hits to return.")] = 10


class ReadArgs(_Args):
    path: Annotated[
        str,
        Field(
            min_length=1,
            description="A memory file: `MEMORY.md`, `memory_summary.md`, "
            "`rollout_summaries/<file>.md` or `skills/<name>/SKILL.md` (with or without the "
            "memory directory in front, as search hits give it).",
        ),
    ]
    offset: Annotated[int, Field(ge=1, description="The first line to return (1-based).")] = 1
    limit: Annotated[
        int, Field(ge=1, le=READ_MAX_LINES, description="How many lines to return.")
    ] = READ_DEFAULT_LINES


class ListArgs(_Args):
    limit: Annotated[
        int, Field(ge=1, le=1000, description="The most conversations to list, newest first.")
    ] = 50


class NoArgs(_Args):
    pass


NoteKind = Literal["preference", "fact", "procedure", "note"]


class RememberArgs(_Args):
    text: Annotated[
        str,
        Field(
            min_length=1,
            max_length=NOTE_MAX_CHARS,
            description="The note, self-contained (it is read later without this conversation).",
        ),
    ]
    kind: Annotated[
        NoteKind,
        Field(description="preference (how the user wants things done), fact, procedure, note."),
    ] = "note"


class UpdateArgs(_Args):
    patch: Annotated[
        str,
        Field(
            min_length=1,
            description="A patch in the `*** Begin Patch` / `*** Update File: <path>` / `@@` / "
            "`*** End Patch` format, touching only `MEMORY.md` or `skills/<name>/SKILL.md` "
            "(any file under `skills/`) of the memory directory, with or without the memory "
            "directory in front (`memories/MEMORY.md`), as memory_read and search hits give it.",
        ),
    ]


class ForgetArgs(_Args):
    rollout_id: Annotated[
        str, Field(min_length=1, description="The conversation to forget (from memory_list).")
    ]


@dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str
    args: type[_Args]
    #: the OpenTelemetry GenAI memory operation: its span's name and ``gen_ai.operation.name``
    #: (``search_memory`` for reads, ``create_memory`` for a new note, ``update_memory`` for an
    #: edit of known entries, ``upsert_memory`` for a consolidation, ``delete_memory``)
    operation: str
    writes: bool


TOOL_SPECS: dict[str, ToolSpec] = {
    spec.name: spec
    for spec in (
        ToolSpec(
            "memory_search",
            "Search the memory of earlier sessions (MEMORY.md, rollout summaries, skills, then "
            "the recorded conversations) with keywords or a question. Returns the best-matching "
            "lines, best first, as `path:line [section] text`; open a file with memory_read for "
            "detail.",
            SearchArgs,
            "search_memory",
            False,
        ),
        ToolSpec(
            "memory_read",
            "Read a memory file (`MEMORY.md`, `memory_summary.md`, a rollout summary "
            "`rollout_summaries/<file>.md` or a skill `skills/<name>/SKILL.md`), a page of "
            "lines at a time. Only files of the memory directory can be read.",
            ReadArgs,
            "search_memory",
            False,
        ),
        ToolSpec(
            "memory_list",
            "List the conversations memory was made from, newest first: id, status (done, "
            "pending, failed, skipped), last update, task and rollout summary file.",
            ListArgs,
            "search_memory",
            False,
        ),
        ToolSpec(
            "memory_status",
            "The state of memory generation: conversations per status, the last "
            "consolidation, file sizes and tokens spent.",
            NoArgs,
            "search_memory",
            False,
        ),
        ToolSpec(
            "memory_remember",
            "Keep a note for later sessions: a preference the user stated, a durable fact "
            "about the project, or a procedure that worked. It is recorded (secrets redacted) "
            "and becomes part of memory at the next generation.",
            RememberArgs,
            "create_memory",
            True,
        ),
        ToolSpec(
            "memory_update",
            "Correct memory now: apply a patch to `MEMORY.md` or a skill file "
            "(`skills/<name>/SKILL.md`) when an entry turned out to be wrong. Read the file with "
            "memory_read first; edit only the entries that are wrong.",
            UpdateArgs,
            "update_memory",
            True,
        ),
        ToolSpec(
            "memory_forget",
            "Forget one conversation: delete what memory holds from it and consolidate again.",
            ForgetArgs,
            "delete_memory",
            True,
        ),
        ToolSpec(
            "memory_generate",
            "Generate memory now from the conversations and notes recorded since the last "
            "generation (extraction, then consolidation). Can take a while.",
            NoArgs,
            "upsert_memory",
            True,
        ),
    )
}


@dataclass
class ServerOptions:
    """What the server serves and allows (``sandmem mcp``'s options)."""

    workspace: str
    layout: MemoryLayoutConfig
    config: MemoryGenerateConfig
    read_only: bool = False
    allow_forget: bool = False
    allow_generate: bool = False
    #: the server's own conversation: notes from ``memory_remember`` are its segments
    conversation_id: str = "mcp-notes"
    #: how long a write waits for the layout's lock (a running consolidation)
    lock_timeout: float = SERVER_LOCK_TIMEOUT_S
    tracing: bool = True
    #: the longest patch ``memory_update`` applies (characters); a longer one is refused
    max_update_chars: int = UPDATE_MAX_CHARS

    def __post_init__(self) -> None:
        validate_rollout_id(self.conversation_id)
        if self.max_update_chars < 1:
            raise UserError(f"max_update_chars must be at least 1, not {self.max_update_chars}")
        if self.store is not None and self.allow_forget and not self.read_only:
            raise UserError(
                "memory_forget is not available on a layout in a remote store (--store): "
                "forget on a host whose workspace holds the layout, or drop --allow-forget"
            )

    @property
    def store(self) -> MemoryStore | None:
        """The layout's remote store, when it has one (the workspace is then a copy)."""
        store = self.layout.store
        return store if store is not None and store.remote else None

    @property
    def paths(self) -> MemoryPaths:
        return MemoryPaths.of(self.layout)

    def offered(self) -> list[ToolSpec]:
        """The tools this server offers."""
        names = ["memory_search", "memory_read", "memory_list", "memory_status"]
        if not self.read_only:
            names += ["memory_remember", "memory_update"]
            if self.allow_forget:
                names.append("memory_forget")
            if self.allow_generate:
                names.append("memory_generate")
        return [TOOL_SPECS[name] for name in names]


def memory_file(paths: MemoryPaths, given: str) -> str:
    """The workspace-relative path of the memory file ``given`` names, or ``ToolRefused``:
    only the summary, ``MEMORY.md``, rollout summaries and skill files are served."""
    raw = given.strip()
    if raw.startswith("memory://"):
        raw = raw[len("memory://") :]
    if os.path.isabs(raw) or "\\" in raw or "\x00" in raw:
        raise _outside(given)
    rel = posixpath.normpath(raw) if raw else "."
    prefix = paths.memories_dir + "/"
    if rel.startswith(prefix):
        rel = rel[len(prefix) :]
    parts = rel.split("/")
    if rel.startswith("..") or any(part in ("", ".", "..") for part in parts):
        raise _outside(given)
    hidden = any(p.startswith(".") for p in parts)
    allowed = (
        rel in READ_FILES
        or (len(parts) == 2 and parts[0] == SUMMARIES_DIR and rel.endswith(".md"))
        or (len(parts) >= 3 and parts[0] == SKILLS_DIR and not hidden)
    )
    if not allowed:
        raise _outside(given)
    return prefix + rel


def _outside(given: str) -> ToolRefused:
    return ToolRefused(
        f"{given!r} is not a memory file this server serves: give MEMORY.md, "
        "memory_summary.md, rollout_summaries/<file>.md or skills/<name>/<file> (paths inside "
        "the memory directory only)"
    )


def page(path: str, text: str, offset: int, limit: int) -> str:
    """Lines ``offset`` .. ``offset + limit - 1`` of ``text``, numbered, with a header and a
    pointer to the next page."""
    lines = text.splitlines()
    total = len(lines)
    if total == 0:
        return f"{path} is empty."
    if offset > total:
        raise ToolRefused(f"{path} has {total} lines; offset {offset} is past its end")
    end = min(total, offset + limit - 1)
    body = "\n".join(f"{n:>5}  {lines[n - 1]}" for n in range(offset, end + 1))
    head = f"{path}: lines {offset}-{end} of {total}"
    if end < total:
        head += f" (call memory_read with offset={end + 1} for more)"
    return f"{head}\n{body}"


class MemoryTools:
    """The tools of one server, each ``async (args, caller) -> text``."""

    def __init__(self, options: ServerOptions) -> None:
        self.options = options
        self.paths = options.paths
        #: called after a tool changed memory files (the server then looks for changes)
        self.on_change: Callable[[], Awaitable[object]] | None = None
        store = options.store
        #: moves the workspace's copy to and from the layout's remote store, when there is one
        self.sync = StoreSync(options.workspace, options.layout, store) if store else None

    async def call(self, name: str, arguments: dict[str, Any], caller: Caller) -> str:
        """Run tool ``name``; ``ToolRefused`` when it is not offered or the arguments are bad
        (the message names the fields)."""
        spec = next((s for s in self.options.offered() if s.name == name), None)
        if spec is None:
            raise ToolRefused(_not_offered(name, self.options))
        from pydantic import ValidationError

        try:
            args = spec.args.model_validate(arguments)
        except ValidationError as exc:
            raise ToolRefused(f"bad arguments for {name}: {_problems(exc)}") from None
        attributes = {
            "gen_ai.operation.name": spec.operation,
            "gen_ai.memory.store.id": self.paths.memories_dir,
            "gen_ai.tool.name": name,
            "mcp.method.name": "tools/call",
            "mcp.session.id": caller.session,
            "mcp.client.name": caller.client,
        }
        with span(spec.operation, attributes, enabled=self.options.tracing) as handle:
            handler: Callable[[Any, Caller, Span], Awaitable[str]] = getattr(self, "_" + name)
            try:
                if self.sync is not None and not spec.writes:
                    await self.sync.pull()  # what another host committed since
                result = await handler(args, caller, handle)
            except MemoryLockedError as exc:
                raise ToolRefused(
                    f"{exc}; memory was not changed. Try again in a minute."
                ) from None
            except ToolRefused:
                raise
            except SandmemError as exc:
                raise ToolRefused(f"{name} failed: {exc}") from None
        if spec.writes and self.on_change is not None:
            await self.on_change()
        return result

    @property
    def _target(self) -> str:
        return self.options.workspace

    async def _memory_search(self, args: SearchArgs, caller: Caller, handle: Span) -> str:
        found = await api.search(self._target, args.query, args.limit, layout=self.options.layout)
        handle.set_many({"gen_ai.memory.record.count": len(found.hits)})
        if not found.hits:
            return f"No memory matches {args.query!r}."
        return "\n".join(hit_line(hit) for hit in found.hits)

    async def _memory_read(self, args: ReadArgs, caller: Caller, handle: Span) -> str:
        path = memory_file(self.paths, args.path)
        handle.set_many({"gen_ai.memory.record.id": path})
        async with api.open_target(self._target, self.options.layout) as (session, _paths, _):
            text = await read_text(session, path)
        if text is None:
            raise ToolRefused(f"{path} does not exist; memory_search or memory_list find files")
        return page(path, text, args.offset, args.limit)

    async def _memory_list(self, args: ListArgs, caller: Caller, handle: Span) -> str:
        async with api.open_target(self._target, self.options.layout) as (session, paths, _):
            found, total = await conversation_page(session, paths, limit=args.limit)
        keep = ("rollout_id", "status", "updated_at", "task", "summary_file")
        rows = [c.model_dump(include=set(keep)) for c in found]  # one page, from the index
        more = total - len(rows)
        text = json.dumps(rows, ensure_ascii=False, indent=1)
        return text + (f"\n({more} older conversations not shown)" if more > 0 else "")

    async def _memory_status(self, args: NoArgs, caller: Caller, handle: Span) -> str:
        found = await api.status(self._target, layout=self.options.layout)
        return found.model_dump_json(indent=1)

    async def _memory_remember(self, args: RememberArgs, caller: Caller, handle: Span) -> str:
        rid = self.options.conversation_id
        handle.set_many({"gen_ai.memory.record.id": rid})
        segment = note_segment(rid, args.text, kind=args.kind, source=caller.source())
        async with api.open_target(self._target, self.options.layout) as (session, paths, _owned):
            recorder = RolloutRecorder(
                session, paths, Redactor(self.options.config.redact_patterns)
            )
            try:
                await recorder.record(segment, lock_timeout=self.options.lock_timeout)
            except SandboxError as exc:
                raise api.lock_error(exc) from exc
        where = self.paths.rollout_file(rid)
        if self.sync is not None:
            await self.sync.push_segments()
            where += f", pushed to {self.sync.describe()}"
        return (
            f"Recorded as a segment of conversation {rid} ({where}). "
            "It becomes memory at the next generation."
        )

    async def _memory_update(self, args: UpdateArgs, caller: Caller, handle: Span) -> str:
        if self.sync is not None:
            await self.sync.pull(fresh=True)  # edit the current version
        result = await self._edit(args, caller)
        if self.sync is not None and await self.sync.push_edits():
            return f"{result}\nCommitted to {self.sync.describe()}."
        return result

    async def _edit(self, args: UpdateArgs, caller: Caller) -> str:
        limit = self.options.max_update_chars
        if len(args.patch) > limit:
            raise ToolRefused(
                f"the patch is {len(args.patch):,} characters; memory_update takes at most "
                f"{limit:,} (edit only the entries that are wrong), so nothing was changed"
            )
        async with api.open_target(self._target, self.options.layout) as (session, paths, _):
            patch = in_memory_dir(args.patch, paths)
            targets = patch_targets(patch)
            if targets is None:
                targets = []  # apply_live_edit reports what is wrong with the patch
            for target in targets:
                _editable(paths, workspace_relative(session, target), target)
            redactor = Redactor(self.options.config.redact_patterns)
            guards = [(paths.memories_dir, redactor)]
            # one memory version, attributed to the client (`sandmem memory log`): the lock is
            # held from before the edit until its version is made, and a change made before
            # it (a hand edit) is versioned first, so the version holds this edit alone
            attribution = Attribution(
                "live_edit" if caller.run else "mcp_write",
                run=caller.run,
                client=caller.label(),
                note="memory_update",
            )
            wait = self.options.lock_timeout
            if self.options.config.review:
                return await _propose_edit(session, paths, patch, attribution, redactor, wait)
            try:
                async with _files.lock(session, paths.lock, timeout=wait):
                    await journal.notice(
                        session, paths, Attribution("hand_edit"), redactor=redactor
                    )
                    result = await apply_live_edit(session, patch, guards, lock_timeout=wait)
                    await journal.notice(session, paths, attribution, redactor=redactor)
            except SandboxError as exc:
                raise api.lock_error(exc) from exc
        return result.render()

    async def _memory_forget(self, args: ForgetArgs, caller: Caller, handle: Span) -> str:
        handle.set_many({"gen_ai.memory.record.id": args.rollout_id})
        found = await api.forget(
            self._target, args.rollout_id, layout=self.options.layout, config=self.options.config
        )
        return found.model_dump_json(indent=1)

    async def _memory_generate(self, args: NoArgs, caller: Caller, handle: Span) -> str:
        if self.sync is not None:
            flushed = await self.sync.generate(self.options.config)
            return api.generation_report(flushed).model_dump_json(indent=1)
        report = await api.generate(
            self._target, layout=self.options.layout, config=self.options.config
        )
        return report.model_dump_json(indent=1)


async def _propose_edit(
    session: SandboxSession,
    paths: MemoryPaths,
    patch: str,
    attribution: Attribution,
    redactor: Redactor,
    wait: float,
) -> str:
    """Review mode (``sandmem mcp --review``): the patch is applied to an overlay of the
    memory files, never to them, and the result becomes a proposal in the inbox."""
    overlay: dict[str, bytes | None] = {}
    guards = [(paths.memories_dir, redactor)]
    try:
        async with _files.lock(session, paths.lock, timeout=wait):
            result = await apply_live_edit(
                session, patch, guards, overlays={paths.memories_dir: overlay}, lock_timeout=wait
            )
            root = paths.memories_dir + "/"
            changes = {p[len(root) :]: d for p, d in overlay.items() if p.startswith(root)}
            proposal = await journal.propose(
                session, paths, changes, attribution, redactor=redactor
            )
    except SandboxError as exc:
        raise api._locked(exc) from exc
    if proposal is None:
        return "The patch changes nothing in memory: no proposal was made."
    changed = result.render().split("\n", 1)[-1]
    return (
        f"Proposed as {proposal.id} (review mode): memory changes only once it is approved "
        f"(`sandmem memory inbox`, `sandmem memory approve {proposal.id}`). Files:\n{changed}"
    )


def hit_line(hit: SearchHit) -> str:
    """One search hit as ``memory_search`` shows it: ``path:line [section] text``, or for a
    transcript passage its conversation, segment and the summary ``memory_read`` serves."""
    if hit.tier == "transcript":
        summary = f"; summary {hit.summary_file}" if hit.summary_file else ""
        where = f"[transcript {hit.rollout_id} segment {hit.segment}, {hit.heading}{summary}]"
        return f"{hit.path}:{hit.line} {where} {' '.join((hit.text or '').split())}"
    section = f" [{hit.heading}]" if hit.heading else ""
    return f"{hit.path}:{hit.line}{section} {hit.snippet}"


_PATCH_HEADS = ("*** Add File: ", "*** Delete File: ", "*** Update File: ", "*** Move to: ")


def in_memory_dir(patch: str, paths: MemoryPaths) -> str:
    """``patch`` with each file it names relative to the memory directory (``MEMORY.md``,
    ``skills/<name>/SKILL.md``: the forms the tool descriptions, ``memory_read`` and the
    resources use) given its workspace path (``memories/MEMORY.md``); other paths unchanged,
    for the check that follows to judge."""
    lines = patch.split("\n")
    for n, line in enumerate(lines):
        head = next((h for h in _PATCH_HEADS if line.startswith(h)), None)
        if head is not None:
            lines[n] = head + _from_memory_dir(line[len(head) :], paths)
    return "\n".join(lines)


def _from_memory_dir(given: str, paths: MemoryPaths) -> str:
    raw = given.strip()
    if raw.startswith("memory://"):
        raw = raw[len("memory://") :]
    if not raw or raw.startswith("/"):
        return given
    rel = posixpath.normpath(raw)
    if rel == MEMORY_MD or rel.startswith(f"{SKILLS_DIR}/"):
        return f"{paths.memories_dir}/{rel}"
    return given


def _editable(paths: MemoryPaths, rel: str, given: str) -> None:
    inside = rel == paths.memory_md or rel.startswith(paths.skills_dir + "/")
    if not inside:
        raise ToolRefused(
            f"memory_update edits only MEMORY.md and files under skills/ of the memory directory "
            f"({paths.memory_md}, {paths.skills_dir}/...); the patch touches {given!r}, so "
            "nothing was changed"
        )


def _not_offered(name: str, options: ServerOptions) -> str:
    if name in TOOL_SPECS:
        if options.read_only:
            return f"{name} is not available: this memory server is read-only (--read-only)"
        flag = "--allow-forget" if name == "memory_forget" else "--allow-generate"
        return f"{name} is not available: the server was started without {flag}"
    offered = ", ".join(s.name for s in options.offered())
    return f"there is no tool {name!r}; this server offers {offered}"


def _problems(exc: Any) -> str:
    found = []
    for err in exc.errors():
        where = ".".join(str(part) for part in err["loc"]) or "arguments"
        found.append(f"{where}: {err['msg']}")
    return "; ".join(found)
