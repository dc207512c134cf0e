"""Moving a layout between a workspace and a remote memory store: pull, push, merge.

- ``pull``: at run start, the current version's read files (summary, ``MEMORY.md``, rollout
  summaries, skills) are copied into the workspace, unless the workspace holds live edits
  not pushed yet. What was pulled is kept in ``<memories_dir>/.store/`` (the version and a
  copy of each file: the base of a three-way merge).
- ``push``: at stop, the bytes appended to each rollout file since the last push become one
  segment object each; live edits of memory files are committed as a new version, merged
  three-way (nothing of either side dropped) when the store moved on meanwhile.

The generation job that runs on a store's layout is ``memory.generation._job``; the stop path
that calls ``push`` is ``memory.generation._stop``.
"""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from sandmem._errors import SandboxError
from sandmem.memory import _files
from sandmem.memory._store_seam import (
    MalformedStoreObject,
    MemoryStore,
    MemoryStoreConflict,
    MemoryStoreError,
    MemoryVersion,
    new_sequence,
    sha256,
)
from sandmem.memory.history import redact_bytes
from sandmem.memory.layout import PUSHED_OFFSETS, READ_DIRS, READ_FILES, STORE_DIR, is_read_file
from sandmem.memory.recording import rollout_id_of

if TYPE_CHECKING:
    from sandmem.memory.layout import MemoryPaths
    from sandmem.sandboxes._session import SandboxSession

logger = logging.getLogger("sandmem.memory.store")

STATE_DIR = STORE_DIR
_PUSHED = PUSHED_OFFSETS
#: the segment being pushed per rollout file: [start, end, sequence] (see push_segments)
_INFLIGHT = "~inflight"
_COMMIT_ATTEMPTS = 6


class Lease(Protocol):
    """One writer per layout across hosts (``sandmem.distributed.RedisLease``)."""

    token: int

    async def check(self) -> None:
        """Raise when the lease was lost (another holder may be writing)."""


# --- workspace side ----------------------------------------------------------------------


def _state_path(paths: MemoryPaths, name: str) -> str:
    return f"{paths.memories_dir}/{STATE_DIR}/{name}"


async def _read(session: SandboxSession, path: str) -> bytes | None:
    return await _files.read(session, path)


async def _pulled(session: SandboxSession, paths: MemoryPaths) -> MemoryVersion | None:
    raw = await _read(session, _state_path(paths, "version.json"))
    if raw is None:
        return None
    try:
        return MemoryVersion.from_json(raw, json.loads(raw).get("etag", ""))
    except (ValueError, KeyError, AttributeError, MemoryStoreError):
        return None


async def _local_read_files(session: SandboxSession, paths: MemoryPaths) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    for name in READ_FILES:
        data = await _read(session, f"{paths.memories_dir}/{name}")
        if data is not None:
            out[name] = data
    for sub in (d.rstrip("/") for d in READ_DIRS):
        out.update(await walk_files(session, paths.memories_dir, sub))
    return out


async def walk_files(session: SandboxSession, root: str, sub: str = "") -> dict[str, bytes]:
    """Every regular file under ``root/sub`` (names starting with a dot left out, links never
    followed), by its path relative to ``root``."""
    top = f"{root}/{sub}" if sub else root
    found = await _files.walk(session, top, depth=_files.MAX_DEPTH * 4)
    data = await _files.read_many(session, sorted(found))
    return {path[len(root) + 1 :]: d for path, d in data.items() if d is not None}


def _local_edits(local: dict[str, bytes], base: MemoryVersion | None) -> dict[str, bytes | None]:
    """Read files changed in the workspace since the pull (``None``: deleted)."""
    base_files = {p: h for p, h in (base.files if base else {}).items() if is_read_file(p)}
    edits: dict[str, bytes | None] = {
        path: data for path, data in local.items() if base_files.get(path) != sha256(data)
    }
    edits.update({path: None for path in base_files if path not in local})
    return {
        p: d
        for p, d in edits.items()
        if not (d is not None and not d.strip() and p not in base_files)
    }


async def read_current(
    store: MemoryStore, memories_dir: str, select: Callable[[str], bool] = lambda _: True
) -> tuple[MemoryVersion | None, dict[str, bytes]]:
    """The current version and its selected files. A version can be pruned while it is read
    (two newer commits replaced it): then the newer current version is read instead."""
    for _ in range(_COMMIT_ATTEMPTS):
        current = await store.current(memories_dir)
        if current is None:
            return None, {}
        try:
            names = [name for name in current.files if select(name)]
            return current, await store.read_files(memories_dir, current, names)
        except FileNotFoundError:
            continue
    raise MemoryStoreError(f"memory of {store.describe()} kept changing while it was read")


async def pull(session: SandboxSession, paths: MemoryPaths, store: MemoryStore) -> bool:
    """Bring the current version's read files into the workspace; False when there was
    nothing new or the workspace has unpushed live edits (kept; merged at stop)."""
    try:
        return await _pull(session, paths, store)
    except MalformedStoreObject as exc:  # one bad object never blocks the layout's runs
        logger.error(
            "memory of %s not pulled: %s; the run goes on with the memory in the workspace",
            store.describe(),
            exc,
        )
        return False


async def _pull(session: SandboxSession, paths: MemoryPaths, store: MemoryStore) -> bool:
    from sandmem.memory.store._history_sync import sync_history

    await sync_history(session, paths, store)  # versions made elsewhere, before their files
    current = await store.current(paths.memories_dir)
    pulled = await _pulled(session, paths)
    if current is None or (pulled is not None and pulled.version == current.version):
        return False
    local = await _local_read_files(session, paths)
    if _local_edits(local, pulled):
        logger.info("memory in the workspace has live edits; pulling at the next stop")
        return False
    current, files = await read_current(store, paths.memories_dir, is_read_file)
    if current is None:
        return False
    for name, data in files.items():
        try:
            await _files.write(session, f"{paths.memories_dir}/{name}", data)
        except SandboxError as exc:  # e.g. a directory of the workspace where it would go
            logger.warning("memory of %s: skipped %s: %s", store.describe(), name, exc)
            continue
        await _files.write(session, _state_path(paths, f"base/{name}"), data)
    for name in set(local) - set(current.files):
        await _files.remove(session, f"{paths.memories_dir}/{name}")
    record = json.loads(current.to_json()) | {"etag": current.etag}
    await _files.write(session, _state_path(paths, "version.json"), json.dumps(record).encode())
    return True


async def push_segments(session: SandboxSession, paths: MemoryPaths, store: MemoryStore) -> int:
    """Push what each rollout file gained since the last push; return the segment count.

    Each segment's key is chosen and recorded in the workspace before it is sent, so a push
    cut short (a stop past its bound, a killed process) sends the same bytes under the same
    key next time: the store refuses the duplicate and no rollout line is pushed twice."""
    offsets_path = f"{paths.sessions_dir}/{_PUSHED}"
    raw = await _read(session, offsets_path)
    offsets: dict[str, Any] = json.loads(raw) if raw else {}
    inflight: dict[str, list[Any]] = offsets.setdefault(_INFLIGHT, {})
    pushed = 0
    if not await _files.exists(session, paths.sessions_dir):
        return 0
    for entry in await _files.ls(session, paths.sessions_dir):
        name = entry if isinstance(entry, str) else str(getattr(entry, "name", entry))
        name = name.rsplit("/", 1)[-1]
        rid = rollout_id_of(name)
        if rid is None:
            continue
        data = await _read(session, f"{paths.sessions_dir}/{name}") or b""
        start = int(offsets.get(name, 0))
        began = inflight.get(name)
        if began and int(began[0]) == start and int(began[1]) <= len(data):
            end, sequence = int(began[1]), str(began[2])
        else:
            end = data.rfind(b"\n", start) + 1  # whole lines only
            if end <= start:
                continue
            sequence = new_sequence()
            inflight[name] = [start, end, sequence]
            await _files.write(session, offsets_path, json.dumps(offsets).encode())
        try:
            await store.put_segment(paths.sessions_dir, rid, data[start:end], sequence=sequence)
        except MemoryStoreConflict:
            pass  # an earlier push sent it under this key before it was cut short
        offsets[name] = end
        inflight.pop(name, None)
        pushed += 1
        await _files.write(session, offsets_path, json.dumps(offsets).encode())
    return pushed


def merge3(base: bytes, ours: bytes, theirs: bytes) -> bytes:
    """A three-way line merge that keeps both sides of a conflict (``git merge-file
    --union``); with no ``git``, ours' added lines are appended to theirs."""
    if ours == base or ours == theirs:
        return theirs
    if theirs == base:
        return ours
    git = shutil.which("git")
    if git is not None:
        with tempfile.TemporaryDirectory(prefix="sandmem-merge-") as tmp:
            names = []
            for label, data in (("ours", ours), ("base", base), ("theirs", theirs)):
                path = Path(tmp) / label
                path.write_bytes(data)
                names.append(str(path))
            done = subprocess.run(
                [git, "merge-file", "-p", "--union", *names],
                capture_output=True,
                timeout=30,
                check=False,
            )
            if done.returncode >= 0 and done.stdout:
                return done.stdout
    theirs_lines = set(theirs.splitlines())
    added = [line for line in ours.splitlines() if line not in theirs_lines]
    return theirs.rstrip(b"\n") + b"\n" + b"\n".join(added) + b"\n"


async def _synced(
    session: SandboxSession,
    paths: MemoryPaths,
    version: MemoryVersion,
    files: dict[str, bytes],
    *,
    live: bool,
) -> None:
    """Record that the workspace is on ``version``: each read file of ``files`` becomes the
    base of the next three-way merge (and, with ``live``, the workspace's file too)."""
    for name, data in files.items():
        if is_read_file(name):
            if live:
                await _files.write(session, f"{paths.memories_dir}/{name}", data)
            await _files.write(session, _state_path(paths, f"base/{name}"), data)
    record = json.loads(version.to_json()) | {"etag": version.etag}
    await _files.write(session, _state_path(paths, "version.json"), json.dumps(record).encode())


async def push_edits(session: SandboxSession, paths: MemoryPaths, store: MemoryStore) -> bool:
    """Commit live edits of memory files; True when a new version was committed."""
    pulled = await _pulled(session, paths)
    edits = _local_edits(await _local_read_files(session, paths), pulled)
    if not edits:
        return False
    for _ in range(_COMMIT_ATTEMPTS):
        current, files = await read_current(store, paths.memories_dir)
        for name, data in edits.items():
            base = await _read(session, _state_path(paths, f"base/{name}")) or b""
            if data is None:
                if current is None or current.files.get(name) == sha256(base):
                    files.pop(name, None)
                continue
            files[name] = merge3(base, data, files.get(name, base))
        try:
            committed = await store.commit(paths.memories_dir, current, files)
        except MemoryStoreConflict:
            continue
        await _synced(session, paths, committed, files, live=True)
        return True
    raise MemoryStoreConflict(
        f"could not commit live memory edits to {store.describe()} after "
        f"{_COMMIT_ATTEMPTS} attempts; they are still in the workspace"
    )


async def redact_store(
    session: SandboxSession,
    paths: MemoryPaths,
    store: MemoryStore,
    redact: Any,
    *,
    rename: Any = None,
) -> bool:
    """After ``redact-history``: the store's current memory version (every file of it: the
    ones hosts pull, raw memories, state) rewritten with ``redact`` (``str -> str``) and
    committed twice, the first time uploading every file anew, so the store's own pruning (a
    commit removes the uploads older than the version it replaced that neither version uses)
    drops every upload that held the old bytes. A workspace that was on the
    redacted version moves its sync state to the new one (its files were redacted the same
    way), so its next push finds no edit to merge back. ``rename`` (``str -> str``) gives a
    file whose name held the secret its new name. True when the store changed."""
    if not store.remote:
        return False
    md = paths.memories_dir
    for _ in range(_COMMIT_ATTEMPTS):
        current, files = await read_current(store, md)
        if current is None:
            return False
        clean = {
            (rename(name) if rename else name): redact_bytes(data, redact)
            for name, data in files.items()
        }
        try:
            # uploaded anew (an old pack holds the old bytes), then once more on top, so the
            # second commit's pruning removes ``current``'s uploads and everything older
            first = await store.commit(md, current, clean, fresh=True)
            second = await store.commit(md, first, clean)
        except MemoryStoreConflict:
            continue
        pulled = await _pulled(session, paths)
        if pulled is not None and pulled.version == current.version:
            await _synced(session, paths, second, clean, live=False)
        return True
    raise MemoryStoreConflict(
        f"could not rewrite the memory of {store.describe()}: other writers kept committing; "
        "run redact-history again"
    )
