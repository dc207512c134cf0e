"""The memory viewer's data: everything one HTML page shows about a layout's memory.

``collect`` reads a layout through a ``SandboxSession`` (any backend) and never fails because
a file is missing, empty, corrupt or unreadable: what cannot be read is left out and named in
``ViewerData.problems``. Every string it returns is passed through the default ``Redactor``
(the files are redacted when written; this guards files edited by hand). Rendering is in
``_viewer_html`` (pure: data in, HTML out).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from sandmem._truncate import truncate_head_tail
from sandmem.memory import _files
from sandmem.memory import state as gen_state
from sandmem.memory._results import ConversationInfo
from sandmem.memory.layout import SKILLS_DIR, SUMMARIES_DIR, MemoryPaths, parse_header
from sandmem.memory.recording import rollout_ids
from sandmem.memory.selection import SavedSelection
from sandmem.memory.state import PhaseTwoState
from sandmem.sandboxes._session import SandboxSession

if TYPE_CHECKING:  # imported by ``collect``: the memory API imports this module for PAGE_SIZE
    from sandmem.memory.views._index import LayoutIndex
    from sandmem.redaction import Redactor

logger = logging.getLogger("sandmem.memory")

T = TypeVar("T")

#: files larger than this are shown cut (head and tail), so a huge file cannot bloat the page
_SHOW_MAX_TOKENS = 50_000
_ERROR_CLASS = re.compile(r"^([A-Za-z_][A-Za-z0-9_.]*)(?::|$)")


@dataclass(frozen=True)
class Summary:
    """One rollout summary file: ``path`` relative to ``memories_dir``."""

    path: str
    fields: dict[str, str]
    body: str


@dataclass(frozen=True)
class SizePoint:
    """Memory size at a moment: ``series`` names what was measured."""

    time: str
    series: str
    bytes: int


@dataclass
class ViewerData:
    """What the viewer page shows (all text already redacted)."""

    workspace: str
    memories_dir: str
    sessions_dir: str
    generated_at: str
    summary: str = ""
    #: the size of memory_summary.md on disk (what `sandmem memory tree` reports)
    summary_bytes: int = 0
    summary_injected: str = ""
    #: the whole memory prompt a run with ``MemoryReadConfig(live_update=True)`` receives
    memory_prompt: str = ""
    memory_md: str = ""
    summaries: list[Summary] = field(default_factory=list)
    skills: list[tuple[str, str]] = field(default_factory=list)
    conversations: list[dict[str, Any]] = field(default_factory=list)
    selection: dict[str, list[str]] = field(default_factory=dict)
    selection_updated_at: str | None = None
    log: list[dict[str, Any]] = field(default_factory=list)
    sizes: list[SizePoint] = field(default_factory=list)
    #: the newest versions of memory, newest first (``_viewer_history``)
    history: list[dict[str, Any]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    #: paging: this page (1-based) of ``pages``, over ``total`` conversations (``pages`` is 1
    #: when every conversation is on the page)
    page: int = 1
    pages: int = 1
    total: int = 0
    #: the last consolidation's state (for ``selection``)
    phase_two: PhaseTwoState = field(default_factory=PhaseTwoState)


def error_class(error: Any) -> str | None:
    """``"RuntimeError"`` from ``"RuntimeError: boom"``; ``None`` when there is no error."""
    if not error:
        return None
    match = _ERROR_CLASS.match(str(error).strip())
    return match.group(1) if match else "error"


class _Reader:
    """Defensive reads: each failure is logged, remembered, and turned into a default."""

    def __init__(self, session: SandboxSession, redactor: Redactor) -> None:
        self.session = session
        self.redactor = redactor
        self.problems: list[str] = []

    async def guard(self, what: str, fn: Callable[[], Awaitable[T]], default: T) -> T:
        try:
            return await fn()
        except Exception as exc:
            logger.debug("viewer: could not read %s", what, exc_info=True)
            self.problems.append(f"{what}: {type(exc).__name__}: {exc}")
            return default

    async def text(self, path: str) -> str | None:
        async def read() -> str | None:
            if not await _files.exists(self.session, path):
                return None
            data = (await _files.read_bytes(self.session, path)).decode("utf-8", "replace")
            data = truncate_head_tail(data, _SHOW_MAX_TOKENS, what=path)
            return self.redactor.redact(data)

        return await self.guard(path, read, None)

    async def texts(self, paths: list[str]) -> dict[str, str]:
        """``text`` of several files, read at once (missing or unreadable ones are left
        out; a batch that fails is read file by file)."""
        from sandmem.memory.layout import read_isolated

        found: dict[str, str] = {}
        for start in range(0, len(paths), 64):
            batch = paths[start : start + 64]
            data, bad = await read_isolated(self.session, batch)
            for path, reason in bad.items():
                self.problems.append(f"{path}: {reason}")
            for path, value in data.items():
                if value is not None:
                    text = truncate_head_tail(
                        value.decode("utf-8", "replace"), _SHOW_MAX_TOKENS, what=path
                    )
                    found[path] = self.redactor.redact(text)
        return found

    async def listing(self, path: str) -> list[str]:
        async def ls() -> list[str]:
            if not await _files.is_dir(self.session, path):
                return []
            return sorted(
                n for n in await _files.listdir(self.session, path) if not n.startswith(".")
            )

        return await self.guard(path, ls, [])


async def _summaries(
    reader: _Reader, paths: MemoryPaths, only: set[str] | None = None
) -> list[Summary]:
    """The rollout summaries (``only``: those of these names relative to ``memories_dir``,
    read at once without listing the others)."""
    if only is None:
        names = [n for n in await reader.listing(paths.summaries_dir) if n.endswith(".md")]
    else:
        prefix = f"{SUMMARIES_DIR}/"
        names = sorted(
            n[len(prefix) :]
            for n in only
            if n.startswith(prefix) and n.endswith(".md") and "/" not in n[len(prefix) :]
        )
    texts = await reader.texts([f"{paths.summaries_dir}/{name}" for name in names])
    found = []
    for name in names:
        text = texts.get(f"{paths.summaries_dir}/{name}")
        if text is not None:
            fields, body = parse_header(text)
            found.append(Summary(f"{SUMMARIES_DIR}/{name}", fields, body.strip()))
    return found


async def _skills(reader: _Reader, paths: MemoryPaths) -> list[tuple[str, str]]:
    found = []
    for name in await reader.listing(paths.skills_dir):
        text = await reader.text(f"{paths.skills_dir}/{name}/SKILL.md")
        if text is not None:
            found.append((f"{SKILLS_DIR}/{name}/SKILL.md", text))
    return found


async def _log(
    reader: _Reader, paths: MemoryPaths, rollouts: set[str] | None = None
) -> list[dict[str, Any]]:
    """The phase runs of the log, oldest first (``rollouts``: the consolidations and the
    phase-one runs of these conversations only; the others are not parsed)."""

    async def read() -> list[dict[str, Any]]:
        return await gen_state.read_log(reader.session, paths, rollouts)

    empty: list[dict[str, Any]] = []
    records = [
        reader.redactor.redact_obj(record)
        for record in await reader.guard(paths.log_jsonl, read, empty)
        if record.get("phase") in ("one", "two")
    ]
    return sorted(records, key=lambda r: str(r.get("time") or ""))


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _tokens_by_rollout(log: list[dict[str, Any]]) -> dict[str, tuple[int, int]]:
    totals: dict[str, tuple[int, int]] = {}
    for record in log:
        rollouts = record.get("rollouts")
        if record.get("phase") != "one" or not isinstance(rollouts, list) or len(rollouts) != 1:
            continue
        rid = str(rollouts[0])
        before = totals.get(rid, (0, 0))
        totals[rid] = (
            before[0] + _int(record.get("input_tokens")),
            before[1] + _int(record.get("output_tokens")),
        )
    return totals


async def _raw_headers(
    reader: _Reader, paths: MemoryPaths
) -> dict[str, tuple[dict[str, str], int]]:
    """Each raw memory's header fields and size in bytes, by rollout id."""
    found = {}
    for name in await reader.listing(paths.raw_dir):
        text = await reader.text(f"{paths.raw_dir}/{name}") if name.endswith(".md") else None
        if text is not None:
            found[name[:-3]] = (parse_header(text)[0], len(text.encode("utf-8")))
    return found


async def _conversations(
    reader: _Reader,
    session: SandboxSession,
    paths: MemoryPaths,
    log: list[dict[str, Any]],
    page: list[ConversationInfo] | None = None,
) -> list[dict[str, Any]]:
    """``maintenance.conversations`` (the public memory API's rows; ``page``: these rows,
    newest first), with the error's class and the phase-one tokens from the log; newest
    first, as ``sandmem memory list`` shows them."""
    from sandmem.memory.views._status import conversations

    async def rows() -> list[dict[str, Any]]:
        found = page if page is not None else await conversations(session, paths)
        return [info.model_dump() for info in found]

    empty: list[dict[str, Any]] = []
    tokens = _tokens_by_rollout(log)
    result = []
    for row in await reader.guard("conversations", rows, empty):
        rid = str(row.get("rollout_id"))
        error = row.get("last_error")
        redact = reader.redactor.redact
        result.append(
            {
                **row,
                "task": redact(str(row["task"])) if row.get("task") else None,
                "last_error": redact(str(error)) if error else None,
                "error_class": row.get("failure_class") or error_class(error),
                "input_tokens": tokens.get(rid, (0, 0))[0],
                "output_tokens": tokens.get(rid, (0, 0))[1],
            }
        )
    return result


def _selection(
    phase_two: PhaseTwoState, saved: SavedSelection
) -> tuple[dict[str, list[str]], str | None]:
    """added / retained / removed at the last consolidation, and when it was."""
    result = phase_two.selection_diff()
    if not result and saved.refs:
        result = {"selected": [ref.rollout_id for ref in saved.refs]}
    return result, saved.updated_at


def _size_points(
    log: list[dict[str, Any]], raw: dict[str, tuple[dict[str, str], int]]
) -> list[SizePoint]:
    """Two series: ``MEMORY.md + summary`` after each consolidation that recorded its size
    (``memory_bytes`` in the log), and the raw memories, accumulated by their ``updated_at``."""
    points = [
        SizePoint(str(r.get("time")), "consolidated", _int(r.get("memory_bytes")))
        for r in log
        if r.get("phase") == "two"
        and r.get("status") in ("done", "incomplete", "fallback")
        and "memory_bytes" in r
    ]
    dated = [
        (when, size)
        for fields, size in raw.values()
        if (when := fields.get("updated_at", "")) and when != "unknown"
    ]
    total = 0
    for when, size in sorted(dated):
        total += size
        points.append(SizePoint(when, "raw memories", total))
    return points


#: the newest conversations a page shows by default (``view_html(page_size=...)``)
PAGE_SIZE = 100
#: at most this many points per series of the size chart on a paged view
_MAX_POINTS = 400
_CITED = re.compile(re.escape(SUMMARIES_DIR) + r"/[^\s)\]`'\"<>]+\.md")


async def _one_page(
    reader: _Reader,
    session: SandboxSession,
    paths: MemoryPaths,
    data: ViewerData,
    page: int,
    page_size: int,
) -> None:
    """Page ``page`` of a layout with more than ``page_size`` conversations: those
    conversations, the rollout summaries they name or ``MEMORY.md`` cites, and the log's
    consolidations and their phase-one runs; nothing else is read."""
    data.pages = -(-data.total // page_size)
    data.page = min(max(1, page), data.pages)
    offset = (data.page - 1) * page_size

    async def indexed() -> _Indexed:
        return await _from_index(session, paths, page_size, offset)

    found = await reader.guard("the layout index", indexed, _Indexed())
    data.log = await _log(reader, paths, {row.rollout_id for row in found.rows})
    data.conversations = await _conversations(reader, session, paths, data.log, found.rows)
    consolidated = _size_points(data.log, {})[-_MAX_POINTS:]
    data.sizes = consolidated + [SizePoint(t, "raw memories", b) for t, b in found.raw_sizes]
    data.phase_two = found.phase_two
    wanted = set(_CITED.findall(data.memory_md))
    prefix = f"{paths.memories_dir}/"
    for row in data.conversations:
        name = row.get("summary_file")
        if isinstance(name, str):
            wanted.add(name.removeprefix(prefix))
    data.summaries = await _summaries(reader, paths, wanted)


@dataclass
class _Indexed:
    """What a page takes from the layout index: its rows, the raw memories' size series
    (``_raw_series``) and the last consolidation's state."""

    rows: list[ConversationInfo] = field(default_factory=list)
    raw_sizes: list[tuple[str, int]] = field(default_factory=list)
    phase_two: PhaseTwoState = field(default_factory=PhaseTwoState)


async def _from_index(
    session: SandboxSession, paths: MemoryPaths, limit: int, offset: int
) -> _Indexed:
    """One page's rows, the size series and the consolidation state, in one pass over the
    layout index (the directories listed once; nothing read when nothing changed)."""
    from sandmem.memory.views._index import opened_index

    async with opened_index(session, paths) as index:
        rows = index.infos(index.conversations(limit, offset))
        kept = index.cached("raw_sizes", lambda: _raw_series(paths, index))
        return _Indexed(rows, [(str(t), int(b)) for t, b in kept], index.phase_two())


def _raw_series(paths: MemoryPaths, index: LayoutIndex) -> list[tuple[str, int]]:
    """The raw memories' accumulated size by ``updated_at``, at most ``_MAX_POINTS``."""
    raw = index.listing.raw
    dated = sorted(
        (row.updated_at, raw[path][0])
        for row in index.conversations()
        if row.raw_present
        and (path := paths.raw_memory_file(row.rollout_id)) in raw
        and row.updated_at != "unknown"
    )
    total, series = 0, []
    for when, size in dated:
        total += size
        series.append((when, total))
    step = max(1, -(-len(series) // _MAX_POINTS))
    kept = series[step - 1 :: step]
    if series and (not kept or kept[-1] is not series[-1]):
        kept.append(series[-1])
    return kept


async def collect(
    session: SandboxSession,
    paths: MemoryPaths,
    *,
    workspace: str,
    generated_at: str,
    page: int = 1,
    page_size: int | None = None,
) -> ViewerData:
    """Read everything the viewer shows for ``paths``; never raises for bad files. With
    ``page_size``, a layout with more conversations than that shows one page of them
    (``page``, newest first) and only what that page needs."""
    from sandmem.memory.read_prompt import SUMMARY_MAX_TOKENS, memory_read_prompt
    from sandmem.memory.views._viewer_history import collect_history
    from sandmem.redaction import Redactor

    reader = _Reader(session, Redactor())
    data = ViewerData(workspace, paths.memories_dir, paths.sessions_dir, generated_at)
    summary = (await reader.text(paths.summary_md) or "").strip()
    data.summary = summary

    async def summary_size() -> int:
        return await _files.size(session, paths.summary_md) or 0

    data.summary_bytes = await reader.guard(paths.summary_md, summary_size, 0)
    if summary:
        data.summary_injected = truncate_head_tail(
            summary, SUMMARY_MAX_TOKENS, what="memory summary"
        )
        data.memory_prompt = memory_read_prompt(summary, paths.memories_dir, live_update=True) or ""
    data.memory_md = await reader.text(paths.memory_md) or ""
    data.skills = await _skills(reader, paths)
    data.total = len(await reader.guard("sessions", lambda: rollout_ids(session, paths), []))
    raw: dict[str, tuple[dict[str, str], int]] | None = None
    if page_size is None or data.total <= page_size:
        data.log = await _log(reader, paths)
        data.summaries = await _summaries(reader, paths)
        raw = await _raw_headers(reader, paths)
        data.conversations = await _conversations(reader, session, paths, data.log)
    else:
        await _one_page(reader, session, paths, data, page, page_size)
    if raw is not None:
        data.phase_two = (await gen_state.load(session, paths))[0].phase_two
        data.sizes = _size_points(data.log, raw)
    data.selection, data.selection_updated_at = _selection(
        data.phase_two, await gen_state.load_selection(session, paths)
    )
    data.history = await reader.guard(
        "history", lambda: collect_history(session, paths, reader.redactor), []
    )
    data.problems = reader.problems
    return data
