"""The files of a memory layout — the one list of them — and their headers, all read and
written through the sandbox session API (so every backend gets them for free).

Names are relative to ``memories_dir``; ``MemoryPaths`` turns them into workspace paths.
What a run reads (``READ_FILES``, ``READ_DIRS``), what an edit may write (``is_editable``) and
what phase one writes (``PHASE_ONE_DIRS``) are named here once; every other module asks.
"""

from __future__ import annotations

import array
import hashlib
import json
import logging
import operator
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sandmem._errors import SandboxError
from sandmem.memory import _files
from sandmem.memory._files import MAX_DEPTH as MAX_DEPTH
from sandmem.memory._files import Stat as Stat
from sandmem.memory._files import read_isolated as read_isolated
from sandmem.memory._files import read_text as read_text
from sandmem.memory._json import loads_bounded
from sandmem.memory.rollouts import parse_segment
from sandmem.sandboxes._hostfs import is_stale_write_temp
from sandmem.sandboxes._session import SandboxSession
from sandmem.sandboxes._types import EntryKind

if TYPE_CHECKING:
    from sandmem.memory.config import MemoryLayoutConfig

logger = logging.getLogger("sandmem.memory")

STATE_VERSION = 1

# ---------------------------------------------------------------- the files of a layout
MEMORY_MD = "MEMORY.md"
SUMMARY_MD = "memory_summary.md"
RAW_MEMORIES_MD = "raw_memories.md"
SELECTION_JSON = "phase_two_selection.json"
STATE_JSON = "generation_state.json"
LOG_JSONL = "generation_log.jsonl"
#: what the last flush with nothing to do saw (``state.load_settled``; derived, hidden)
SETTLED_JSON = ".settled.json"
RAW_DIR = "raw_memories"
SUMMARIES_DIR = "rollout_summaries"
SKILLS_DIR = "skills"
LOCK = ".lock"
BACKUP_DIR = ".phase_two_backup"
CONSOLIDATED_MD = ".consolidated_MEMORY.md"
HISTORY_DIR = ".history"
HISTORY_SUBDIRS = ("objects", "versions", "proposals")
INDEX_DB = ".index.sqlite"
INDEX_LOCK = ".index.lock"
#: what a remote store's sync keeps in the layout (``memory.store._sync``)
STORE_DIR = ".store"
#: the files sandmem keeps in ``sessions_dir`` besides the rollouts: the lock of appends and
#: of ingest, and how far each rollout was pushed to a remote store
INGEST_LOCK = ".ingest.lock"
PUSHED_OFFSETS = ".store-pushed.json"
SESSIONS_FILES = (LOCK, INGEST_LOCK, PUSHED_OFFSETS)
#: what a run reads (and a store's version carries into every workspace)
READ_FILES = (SUMMARY_MD, MEMORY_MD)
READ_DIRS = (f"{SUMMARIES_DIR}/", f"{SKILLS_DIR}/")
#: what phase one writes, per conversation
PHASE_ONE_DIRS = (f"{RAW_DIR}/", f"{SUMMARIES_DIR}/")


def is_read_file(name: str) -> bool:
    """A file (relative to ``memories_dir``) that runs read."""
    return name in READ_FILES or name.startswith(READ_DIRS)


def is_editable(name: str) -> bool:
    """A file (relative to ``memories_dir``) that a consolidation or a live edit may write:
    ``MEMORY.md``, ``memory_summary.md`` and anything under ``skills/``."""
    return name in (MEMORY_MD, SUMMARY_MD) or name.startswith(f"{SKILLS_DIR}/")


@dataclass(frozen=True)
class MemoryPaths:
    """Workspace-relative paths of one layout."""

    memories_dir: str
    sessions_dir: str

    @classmethod
    def of(cls, layout: MemoryLayoutConfig) -> MemoryPaths:
        return cls(layout.memories_dir, layout.sessions_dir)

    def _m(self, name: str) -> str:
        return f"{self.memories_dir}/{name}"

    @property
    def memory_md(self) -> str:
        return self._m(MEMORY_MD)

    @property
    def summary_md(self) -> str:
        return self._m(SUMMARY_MD)

    @property
    def raw_memories_md(self) -> str:
        return self._m(RAW_MEMORIES_MD)

    @property
    def selection_json(self) -> str:
        return self._m(SELECTION_JSON)

    @property
    def raw_dir(self) -> str:
        return self._m(RAW_DIR)

    @property
    def summaries_dir(self) -> str:
        return self._m(SUMMARIES_DIR)

    @property
    def skills_dir(self) -> str:
        return self._m(SKILLS_DIR)

    @property
    def state_json(self) -> str:
        return self._m(STATE_JSON)

    @property
    def settled_json(self) -> str:
        return self._m(SETTLED_JSON)

    @property
    def log_jsonl(self) -> str:
        return self._m(LOG_JSONL)

    @property
    def lock(self) -> str:
        return self._m(LOCK)

    @property
    def backup_dir(self) -> str:
        """Phase two's journal: the files as they were before the running consolidation."""
        return self._m(BACKUP_DIR)

    @property
    def consolidated_memory_md(self) -> str:
        """``MEMORY.md`` as the last consolidation left it (to show later edits as a diff)."""
        return self._m(CONSOLIDATED_MD)

    def rollout_file(self, rollout_id: str) -> str:
        return f"{self.sessions_dir}/{rollout_id}.jsonl"

    def raw_memory_file(self, rollout_id: str) -> str:
        return f"{self.raw_dir}/{rollout_id}.md"

    def summary_file(self, rollout_id: str, slug: str) -> str:
        return f"{self.summaries_dir}/{rollout_id}_{slug}.md"


_DIR, _FILE = EntryKind.DIRECTORY, EntryKind.FILE
#: every name the layout uses in ``memories_dir``: (the kind it must be, created when missing)
MEMORY_ENTRIES: dict[str, tuple[EntryKind, bool]] = {
    RAW_DIR: (_DIR, True),
    SUMMARIES_DIR: (_DIR, True),
    SKILLS_DIR: (_DIR, True),
    MEMORY_MD: (_FILE, True),
    SUMMARY_MD: (_FILE, True),
    HISTORY_DIR: (_DIR, False),
    BACKUP_DIR: (_DIR, False),
    STORE_DIR: (_DIR, False),
    RAW_MEMORIES_MD: (_FILE, False),
    SELECTION_JSON: (_FILE, False),
    STATE_JSON: (_FILE, False),
    LOG_JSONL: (_FILE, False),
    LOCK: (_FILE, False),
    CONSOLIDATED_MD: (_FILE, False),
    INDEX_DB: (_FILE, False),
    INDEX_LOCK: (_FILE, False),
    SETTLED_JSON: (_FILE, False),
}


#: why a listed file was not read (``read_many`` under ``no_symlinks`` skips these)
NOT_REGULAR = "not a regular file (a symlink or a special file); skipped"

#: how long layout repair waits for the layout lock; a holder (a flush, an edit) is a sandmem
#: process that repairs the layout itself, so a busy lock is not waited for
REPAIR_LOCK_WAIT_S = 0.05


async def ensure_layout(
    session: SandboxSession, paths: MemoryPaths, *, create: bool = True
) -> None:
    """Create the layout's directories and empty ``MEMORY.md`` / ``memory_summary.md`` when
    missing (not with ``create=False``, which the views use); never overwrite. Something
    planted where the layout needs a directory or a file — at any name the layout uses
    (``generation_state.json``, ``.lock``, ``.history/``, the index, the locks in
    ``sessions_dir``, ...), a symlink, a FIFO or socket, a file in place of a directory or the
    reverse — is reported, moved aside to ``<name>.moved-<time>`` (as the link itself:
    nothing is followed) and, where the layout creates it, replaced: it never blocks the
    layout.

    Safe to run from any number of tasks and processes at once: directories are made with
    ``mkdir`` (one wins, the others find it), empty files are created by an append of nothing
    (never truncating what another writer just wrote), an entry is moved aside only when it
    was seen to be of a wrong kind (never a file another writer is creating), and the repair of
    ``memories_dir`` runs under the layout lock (skipped when another holder has it: that
    holder is a sandmem process preparing the same layout)."""
    for directory in (paths.sessions_dir, paths.memories_dir):
        parts = directory.split("/")
        for depth in range(1, len(parts) + 1):
            parent = "/".join(parts[: depth - 1]) or "."
            await _ensure_entries(session, parent, {parts[depth - 1]: (_DIR, create)})
    if not await _files.is_dir(session, paths.memories_dir):
        return  # create=False on a workspace without memory: nothing to repair
    await make_way(session, paths.lock)
    wanted = {name: (kind, made and create) for name, (kind, made) in MEMORY_ENTRIES.items()}
    try:
        async with _files.lock(session, paths.lock, timeout=REPAIR_LOCK_WAIT_S):
            await _ensure_entries(session, paths.memories_dir, wanted)
            history = f"{paths.memories_dir}/{HISTORY_DIR}"
            if await _files.is_dir(session, history):
                subdirs = dict.fromkeys(HISTORY_SUBDIRS, (_DIR, False))
                await _ensure_entries(session, history, subdirs)
    except SandboxError as exc:
        if exc.operation != "lock":
            raise
        if create:  # the holder repairs; still make what this caller needs
            await _ensure_entries(session, paths.memories_dir, wanted, repair=False)
    for name in SESSIONS_FILES:
        await make_way(session, f"{paths.sessions_dir}/{name}")


async def _ensure_entries(
    session: SandboxSession,
    directory: str,
    wanted: dict[str, tuple[EntryKind, bool]],
    *,
    repair: bool = True,
) -> None:
    """Give each name of ``wanted`` in ``directory`` its kind (one listing of the directory)."""
    try:
        found = {name: kind for name, kind, _, _ in await _files.stat_dir(session, directory)}
    except SandboxError:
        found = {}
    for name, (kind, create) in wanted.items():
        path = f"{directory}/{name}" if directory != "." else name
        present = found.get(name)
        if present is not None and present != kind:
            if not repair:
                continue
            await _move_aside(session, path, present, kind)
            present = None
        if present is None and create:
            if kind == _DIR:
                await _files.mkdir(session, path, parents=True)
            else:  # an append of nothing: never truncates a file written meanwhile
                await _files.append(session, path, b"")


async def make_way(session: SandboxSession, path: str) -> None:
    """Make sure ``path`` (a file the layout writes) is a regular file or missing: anything
    else there is moved aside, as ``ensure_layout`` does. A few calls, whatever the size of
    the directory (names in ``sessions_dir`` are checked at every record); only an entry seen
    to be a link, a directory or a special file is moved — never a file another writer is
    creating at that moment."""
    found = await _files.kind(session, path)
    if found is not None and found != _FILE:
        await _move_aside(session, path, found, _FILE)


def _aside(path: str) -> str:
    return f"{path}.moved-{time.time_ns()}"


async def _move_aside(
    session: SandboxSession, path: str, found: EntryKind, kind: EntryKind
) -> None:
    aside = _aside(path)
    logger.warning(
        "memory layout: %s is a %s where a %s is needed; moved it aside to %s",
        path,
        found.value,
        kind.value,
        aside,
    )
    await _files.rename(session, path, aside)


_SKILLS_SWEEP_DEPTH = 4


async def sweep_write_temps(
    session: SandboxSession, paths: MemoryPaths, *, skip: tuple[str, ...] = ()
) -> list[str]:
    """Remove the temp files an atomic write leaves when its process is killed before the
    rename (the target itself is whole: old or new). Called under the layout's generation
    lock; a temp whose write may still finish (its process is alive, e.g. a run making a live
    memory update, which does not take that lock) is kept. ``skip``: directories the caller
    knows hold none. Returns what was removed.
    """
    removed: list[str] = []

    async def sweep(directory: str, depth: int) -> None:
        if not await _files.is_dir(session, directory):
            return
        for name in await _files.listdir(session, directory):
            path = f"{directory}/{name}"
            if is_stale_write_temp(name):
                await _files.remove(session, path)
                removed.append(path)
            elif depth > 0 and await _files.is_dir(session, path):
                await sweep(path, depth - 1)

    for directory in (paths.memories_dir, paths.raw_dir, paths.summaries_dir, paths.backup_dir):
        if directory not in skip:
            await sweep(directory, 0)
    await sweep(paths.skills_dir, _SKILLS_SWEEP_DEPTH)
    return removed


async def list_files(
    session: SandboxSession, top: str, depth: int, dirs: list[str] | None = None
) -> dict[str, Stat]:
    """Regular, visible files below ``top`` (``depth`` levels of subdirectories), with their
    stat; symlinks and special files are left out (never followed). ``dirs``, when given,
    receives every visible subdirectory seen."""
    return await _files.walk(session, top, depth=depth, dirs=dirs)


#: a file modified this recently is not trusted to look changed: one rewritten twice within
#: one timestamp tick, with the same size, would otherwise look unchanged
RACY_NS = 2_000_000_000


def listing_digest(listings: Iterable[Iterable[tuple[str, int, int | None]]]) -> str | None:
    """A digest of directory listings (``(name, size, mtime_ns)`` entries), to tell cheaply
    that nothing in them changed; ``None`` when an entry has no mtime or was modified
    within ``RACY_NS`` (it cannot be trusted to show its next change). The names, sizes and
    mtimes are packed by C code (``join``, ``array``): a listing holds a file per
    conversation."""
    newest = time.time_ns() - RACY_NS
    digest = hashlib.sha1()
    for listing in listings:
        entries = listing if isinstance(listing, list) else list(listing)
        try:
            sizes = array.array("q", map(_SIZE, entries))
            mtimes = array.array("q", map(_MTIME, entries))  # a None mtime raises TypeError
        except (TypeError, OverflowError):
            return None
        if mtimes and max(mtimes) > newest:
            return None
        names = "\0".join(map(_NAME, entries)).encode("utf-8", "surrogateescape")
        for part in (names, sizes.tobytes(), mtimes.tobytes()):
            digest.update(len(part).to_bytes(8, "little"))
            digest.update(part)
    return digest.hexdigest()


_NAME, _SIZE, _MTIME = operator.itemgetter(0), operator.itemgetter(1), operator.itemgetter(2)


# ---------------------------------------------------------------- headers

_HEADER_LINE = re.compile(r"^([a-z_]+): ?(.*)$")


def render_with_header(fields: dict[str, str], body: str) -> str:
    """``key: value`` lines, a blank line, then the body (newline-terminated)."""
    head = "".join(f"{key}: {_one_line(value)}\n" for key, value in fields.items())
    return f"{head}\n{body.rstrip()}\n"


def _one_line(value: str) -> str:
    return " ".join(str(value).split())


def parse_header(text: str) -> tuple[dict[str, str], str]:
    """Split a file written by ``render_with_header`` into its fields and its body."""
    fields: dict[str, str] = {}
    lines = text.split("\n")
    for index, line in enumerate(lines):
        if line == "":
            return fields, "\n".join(lines[index + 1 :])
        match = _HEADER_LINE.match(line)
        if match is None:
            return fields, text
        fields[match.group(1)] = match.group(2)
    return fields, ""


# ---------------------------------------------------------------- rollout fingerprint


@dataclass(frozen=True)
class RolloutFingerprint:
    """What identifies the content of a rollout file: its segment count and the
    ``updated_at`` and terminal state of its last segment."""

    segments: int
    updated_at: str
    terminal_state: str


def fingerprint(data: bytes) -> RolloutFingerprint:
    """The fingerprint of a rollout file's bytes, without splitting the whole file (rollouts
    can be large): lines are counted, and only the last lines are parsed."""
    segments = data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)
    updated_at, terminal = "unknown", "unknown"
    end = len(data)
    while end > 0:
        start = data.rfind(b"\n", 0, end - 1) + 1
        line = data[start:end].strip()
        end = start
        if not line:
            continue
        segment = parse_segment(line)
        if segment is not None:
            updated_at = segment.updated_at or "unknown"
            terminal = segment.terminal_state
            break
    return RolloutFingerprint(segments, updated_at, terminal)


def is_up_to_date(raw_memory_text: str | None, fp: RolloutFingerprint) -> bool:
    """A raw memory is up to date when it records the rollout's last ``updated_at`` and its
    segment count."""
    if raw_memory_text is None:
        return False
    fields = parse_header(raw_memory_text)[0]
    return fields.get("updated_at") == fp.updated_at and fields.get("segments") == str(fp.segments)


#: rollouts larger than this are cut to their first and last half of it (at line boundaries)
#: before phase one; the rendered transcript is capped at 150,000 tokens anyway
ROLLOUT_READ_MAX_BYTES = 32 * 1024 * 1024


def bound_rollout(data: bytes, limit: int = ROLLOUT_READ_MAX_BYTES) -> tuple[bytes, int]:
    """``data`` cut to its head and tail (whole lines, about ``limit`` bytes) and the number of
    bytes omitted from the middle (0 when it fits)."""
    if len(data) <= limit:
        return data, 0
    half = limit // 2
    head_end = data.rfind(b"\n", 0, half) + 1
    tail_start = data.find(b"\n", len(data) - half) + 1
    if tail_start <= 0 or tail_start <= head_end:
        tail_start = len(data)
    kept = data[:head_end] + data[tail_start:]
    return kept, len(data) - len(kept)


# ---------------------------------------------------------------- state and log


async def load_json(session: SandboxSession, path: str) -> Any:
    """Parsed JSON, or ``None`` when the file is missing, empty or corrupt."""
    text = await read_text(session, path)
    if not text:
        return None
    try:
        return loads_bounded(text)
    except ValueError:
        return None


async def write_json(session: SandboxSession, path: str, value: Any) -> None:
    await _files.write(session, path, json.dumps(value, indent=2, sort_keys=True) + "\n")
