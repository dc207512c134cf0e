"""Memory stores: where a layout's files live besides the workspace.

``LocalMemoryStore`` (the default, the same as no store) keeps everything in the workspace.
A remote store (``sandmem.distributed.S3MemoryStore``) keeps the layout's rollouts and memory
files in object storage, so sessions on many hosts share one memory:

- **rollouts** are pushed as segments, one object each (object stores have no append), keyed
  ``<sessions_dir>/<rollout-id>/<sequence>-<random>.jsonl``; the sequence orders them;
- **memory files** are committed as a whole **version** (the S3 store uploads the files that
  changed as one pack, ``<memories_dir>/versions/<id>.pack``; the record names each file's
  digest and place) and made current by one conditional write of ``<memories_dir>/CURRENT``
  (``If-Match`` the version it was based on, ``If-None-Match: *`` for the first). A writer
  that lost the race gets ``MemoryStoreConflict`` and never overwrites: ``MEMORY.md``,
  ``memory_summary.md`` and ``skills/`` change together or not at all, for every reader;
- **pending marks** (``<memories_dir>/pending/<sequence>.json``): a stop that defers generation
  writes one before it pushes, naming the layout; the job that processed the layout removes the
  marks it saw when it started. A mark left behind (a lost enqueue, a broker restarted empty)
  is what a worker's sweeper finds and enqueues again.

This module holds the store seam and the pure helpers; it imports no client library.
"""

from __future__ import annotations

import abc
import hashlib
import json
import logging
import math
import os
import re
import time
import unicodedata
from dataclasses import dataclass, field
from typing import Any, ClassVar

from sandmem._errors import SandmemError
from sandmem.memory._json import loads_bounded

logger = logging.getLogger("sandmem.memory.store")


class MemoryStoreConflict(SandmemError):
    """Another writer made a new memory version first; re-read the current one and retry."""


class MemoryStoreError(SandmemError):
    """A memory store request failed (``retryable`` when trying again later may succeed)."""

    def __init__(self, message: str, *, retryable: bool = True) -> None:
        super().__init__(message)
        self.retryable = retryable


class MalformedStoreObject(MemoryStoreError):
    """An object of the store is not what sandmem writes there (not a version, too large):
    never retryable. A run start reports it and goes on with the workspace's memory."""

    def __init__(self, message: str) -> None:
        super().__init__(message, retryable=False)


#: a version id and a rollout id as the store may name them (what sandmem itself writes)
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_MAX_NAME = 1024
#: the longest file name component a filesystem takes (bytes of UTF-8)
_MAX_COMPONENT = 255
#: Unicode categories a file name may not hold: control and format characters (escape
#: sequences, bidirectional overrides, zero-width characters), line and paragraph separators
_HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})
#: the largest object sandmem reads from a store (a memory file or a rollout segment is far
#: smaller): a larger one is skipped and reported, never loaded into memory
MAX_OBJECT_BYTES = 128 * 1024 * 1024


def safe_name(name: object) -> bool:
    """Whether a file name that came from a store is a relative, normalized path inside the
    layout: no empty, ``.`` or ``..`` component, not absolute, no backslash or NUL, no
    control or format character (a terminal escape, a bidirectional override), no component
    over 255 bytes, not under ``.store/`` (the sync's own state) and not the layout's
    ``.lock``, at most 1,024 characters."""
    if not isinstance(name, str) or not plain_path(name):
        return False
    if "\\" in name or name.startswith("/") or name == ".lock":
        return False
    parts = name.split("/")
    return parts[0] != ".store" and all(part not in ("", ".", "..") for part in parts)


def plain_path(name: str) -> bool:
    """Whether ``name`` can name a file as it reads: not empty, at most 1,024 characters, no
    control or format character, no component over 255 bytes (``safe_name``'s character
    rule; a layout directory follows it too)."""
    return (
        0 < len(name) <= _MAX_NAME
        and not any(unicodedata.category(char) in _HIDDEN_CATEGORIES for char in name)
        and all(
            len(part.encode("utf-8", "surrogatepass")) <= _MAX_COMPONENT for part in name.split("/")
        )
    )


def _without_conflicts(names: list[str]) -> set[str]:
    """The names that would need to be a file and a directory at once (``a`` and ``a/b``):
    the shorter one of each pair, which no workspace can hold next to the other."""
    known = set(names)
    return {
        "/".join(parts[:depth])
        for parts in (name.split("/") for name in names)
        for depth in range(1, len(parts))
        if "/".join(parts[:depth]) in known
    }


def checked_segments(found: dict[str, list[bytes]], where: str) -> dict[str, list[bytes]]:
    """A store's segments with every rollout whose id is not a valid rollout id left out
    (logged): one hostile key never blocks the layout or names a file outside it."""
    kept: dict[str, list[bytes]] = {}
    for rollout_id, segments in found.items():
        if isinstance(rollout_id, str) and _ID.fullmatch(rollout_id):
            kept[rollout_id] = segments
        else:
            logger.warning(
                "store %s: skipped segments of the invalid rollout id %r", where, rollout_id
            )
    return kept


@dataclass(frozen=True)
class MemoryVersion:
    """One committed set of memory files. ``files`` maps each path (relative to the
    memories dir) to its SHA-256. Where the bytes are: ``homes`` maps a path whose bytes an
    earlier version uploaded (unchanged since) to that version's id (``home``), so a commit
    uploads only what changed; ``spans`` maps a path to its ``(offset, length)`` in its home's
    pack (the one object a commit uploads for all its files; a path without a span is an
    object of its own). ``fence`` is the lease token of the writer (0 without a lease);
    ``etag`` is the store's tag of the ``CURRENT`` object that named it.

    A version is where store data enters: a version id that is not a plain id raises
    ``MemoryStoreError``; a file whose name is not ``safe_name`` (or that would need to be a
    file and a directory at once), whose home is not a plain id or whose span is not two
    non-negative integers is left out of ``files`` (logged, and listed in ``skipped``), so one
    bad object is reported and never blocks a pull, a job or a run start."""

    version: str
    files: dict[str, str]
    fence: int = 0
    etag: str = ""
    updated_at: float = 0.0
    skipped: tuple[str, ...] = ()
    homes: dict[str, str] = field(default_factory=dict)
    spans: dict[str, tuple[int, int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.version, str) or not _ID.fullmatch(self.version):
            raise MemoryStoreError(
                f"the store's current memory version has an invalid id {self.version!r}",
                retryable=False,
            )
        bad = tuple(name for name in self.files if not self._valid(name))
        bad += tuple(sorted(_without_conflicts([n for n in self.files if n not in bad])))
        if bad:
            logger.warning("memory version %s: skipped invalid file names %r", self.version, bad)
            files = {k: v for k, v in self.files.items() if k not in bad}
            object.__setattr__(self, "files", files)
            object.__setattr__(self, "skipped", self.skipped + bad)
        homes = {k: v for k, v in self.homes.items() if k in self.files and v != self.version}
        object.__setattr__(self, "homes", homes)
        spans = {k: (int(v[0]), int(v[1])) for k, v in self.spans.items() if k in self.files}
        object.__setattr__(self, "spans", spans)

    def _valid(self, name: str) -> bool:
        span = self.spans.get(name, (0, 0))
        home = self.homes.get(name, self.version)
        return (
            safe_name(name)
            and isinstance(home, str)
            and _ID.fullmatch(home) is not None
            and isinstance(span, tuple | list)
            and len(span) == 2
            and all(type(n) is int and 0 <= n < 2**63 for n in span)
        )

    def home(self, path: str) -> str:
        """The id of the version whose upload holds ``path``'s bytes."""
        return self.homes.get(path, self.version)

    def to_json(self) -> bytes:
        data: dict[str, Any] = {
            "version": self.version,
            "files": self.files,
            "fence": self.fence,
            "updated_at": self.updated_at,
        }
        if self.homes:
            data["homes"] = self.homes
        if self.spans:
            data["spans"] = {k: list(v) for k, v in self.spans.items()}
        return json.dumps(data, sort_keys=True).encode()

    @classmethod
    def from_json(cls, raw: bytes, etag: str) -> MemoryVersion:
        """The version in a ``CURRENT`` object; ``MalformedStoreObject`` for anything that is
        not one (not JSON, nested too deep, a field of the wrong type, a number out of range,
        an invalid version id). A file's bad home or span skips that file only."""
        try:
            data = loads_bounded(raw)
            if not isinstance(data, dict):
                raise ValueError("not a JSON object")
            files = data.get("files")
            homes, spans = data.get("homes", {}), data.get("spans", {})
            fence, updated = data.get("fence") or 0, data.get("updated_at") or 0.0
            if (
                not isinstance(files, dict)
                or not all(isinstance(v, str) for v in files.values())
                or not isinstance(homes, dict)
                or not isinstance(spans, dict)
                or not isinstance(data.get("version"), str)
                or not isinstance(fence, int)
                or isinstance(fence, bool)
                or not 0 <= fence < 2**63
                or not isinstance(updated, int | float)
                or not math.isfinite(updated)
            ):
                raise ValueError("a field is missing or of the wrong type")
            return cls(
                version=data["version"],
                files=dict(files),
                fence=fence,
                etag=etag,
                updated_at=float(updated),
                homes=dict(homes),
                spans={k: tuple(v) if isinstance(v, list) else v for k, v in spans.items()},
            )
        except (ValueError, UnicodeDecodeError, MemoryStoreError) as exc:
            raise MalformedStoreObject(
                f"the store's CURRENT object is not a memory version ({exc})"
            ) from None


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def new_sequence() -> str:
    """A key part that sorts by creation time across hosts (ties broken at random)."""
    return f"{time.time_ns():020d}-{os.urandom(4).hex()}"


class MemoryStore(abc.ABC):
    """The seam a remote store implements: segments in, versions in and out."""

    #: False for the store that keeps everything in the workspace
    remote: ClassVar[bool] = True

    @abc.abstractmethod
    async def put_segment(
        self, sessions_dir: str, rollout_id: str, data: bytes, *, sequence: str | None = None
    ) -> str:
        """Store one rollout segment (whole JSON lines) as a new object; return its key.
        ``sequence`` (from ``new_sequence``) names it; a segment already stored under it
        raises ``MemoryStoreConflict`` (a retried push)."""

    @abc.abstractmethod
    async def segments(self, sessions_dir: str) -> dict[str, list[bytes]]:
        """Every rollout's segments, in sequence order."""

    @abc.abstractmethod
    async def current(self, memories_dir: str) -> MemoryVersion | None:
        """The current memory version, or ``None`` before the first commit."""

    @abc.abstractmethod
    async def read_files(
        self, memories_dir: str, version: MemoryVersion, paths: list[str]
    ) -> dict[str, bytes]:
        """The contents of ``paths`` (relative to the memories dir) in ``version``."""

    @abc.abstractmethod
    async def commit(
        self,
        memories_dir: str,
        base: MemoryVersion | None,
        files: dict[str, bytes],
        *,
        fence: int = 0,
        fresh: bool = False,
    ) -> MemoryVersion:
        """Make ``files`` the new current version if ``base`` is still current; raise
        ``MemoryStoreConflict`` otherwise. Files unchanged since ``base`` may be reused, unless
        ``fresh``: then nothing of an older version's uploads is (``redact-history`` needs the
        old uploads gone)."""

    # optional: pending marks (a store without them relies on the enqueue alone)

    async def mark_pending(self, memories_dir: str, sessions_dir: str) -> None:
        """Record that the layout may have work no job has seen yet (a new object each)."""
        return None

    async def pending_marks(self, memories_dir: str) -> list[str]:
        """The layout's pending marks (their keys)."""
        return []

    async def clear_marks(self, memories_dir: str, marks: list[str]) -> None:
        """Remove ``marks`` (those a finished job saw when it started)."""
        return None

    async def prefetch(self, memories_dir: str) -> None:
        """A generation job is about to list the layout's pending marks, history mirror and
        memory uploads: a store may list them in one request here (optional)."""
        return None

    # -- the history mirror (optional: a store without it keeps history per workspace) ------

    async def put_history(self, memories_dir: str, files: dict[str, bytes]) -> None:
        """Store files of the layout's memory history (names like ``versions/...`` and
        ``objects/<sha256>``, see ``memory.history``); replaces files of the same name."""
        return None

    async def history_names(self, memories_dir: str) -> list[str]:
        """The names of the history files stored."""
        return []

    async def read_history(self, memories_dir: str, names: list[str]) -> dict[str, bytes]:
        """The contents of history files (a missing one is left out)."""
        return {}

    async def delete_history(self, memories_dir: str, names: list[str]) -> None:
        """Remove history files (pruned versions, redacted or unreferenced objects)."""
        return None

    def describe(self) -> str:
        return type(self).__name__


@dataclass
class LocalMemoryStore(MemoryStore):
    """Today's behaviour: the layout's files live only in the workspace (no pull, no push).
    ``Memory(layout=MemoryLayoutConfig(store=LocalMemoryStore()))`` is the same as no store."""

    remote: ClassVar[bool] = False

    async def put_segment(
        self, sessions_dir: str, rollout_id: str, data: bytes, *, sequence: str | None = None
    ) -> str:
        raise MemoryStoreError("LocalMemoryStore keeps rollouts in the workspace", retryable=False)

    async def segments(self, sessions_dir: str) -> dict[str, list[bytes]]:
        return {}

    async def current(self, memories_dir: str) -> MemoryVersion | None:
        return None

    async def read_files(
        self, memories_dir: str, version: MemoryVersion, paths: list[str]
    ) -> dict[str, bytes]:
        return {}

    async def commit(
        self,
        memories_dir: str,
        base: MemoryVersion | None,
        files: dict[str, bytes],
        *,
        fence: int = 0,
        fresh: bool = False,
    ) -> MemoryVersion:
        raise MemoryStoreError("LocalMemoryStore keeps memory in the workspace", retryable=False)


class GenerationScheduler(abc.ABC):
    """Defers memory generation: at a session's stop (after the push) ``enqueue`` asks for one
    generation job for the layout; workers run it (``sandmem.distributed.RedisScheduler``).
    ``stop_timeout_s`` bounds the whole deferred stop (pending mark, push, enqueue): past it
    the stop returns and leaves the work to the next stop, run start or a worker's sweep."""

    stop_timeout_s: float = 10.0

    @abc.abstractmethod
    async def enqueue(self, store: MemoryStore, paths: Any) -> None:
        """Ask for a generation job of ``paths`` in ``store``; must not wait for any model."""
