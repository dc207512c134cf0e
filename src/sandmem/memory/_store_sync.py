"""Moving a layout between a workspace and a remote memory store, and the generation job.

- ``pull``: at run start, the current version's read files (summary, ``MEMORY.md``, rollout
  summaries, skills) are copied into the workspace, unless the workspace holds live edits
  not pushed yet. What was pulled is kept in ``<memories_dir>/.store/`` (the version and a
  copy of each file: the base of a three-way merge).
- ``push``: at stop, the bytes appended to each rollout file since the last push become one
  segment object each; live edits of memory files are committed as a new version, merged
  three-way (nothing of either side dropped) when the store moved on meanwhile.
- ``run_job``: stage the layout from the store into a temporary workspace, run the ordinary
  two-phase pipeline on it, commit the result as a new version (phase-one artifacts first,
  so a job that dies in phase two never extracts a rollout version again). A commit that
  loses the race re-stages from the newer version, keeps its phase-one artifacts, and runs
  phase two again: no update is lost, no rollout version extracted twice.
"""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from sandmem.memory._store import (
    MemoryStore,
    MemoryStoreConflict,
    MemoryStoreError,
    MemoryVersion,
    is_read_file,
    sha256,
)

if TYPE_CHECKING:
    from sandmem.memory.config import MemoryGenerateConfig
    from sandmem.memory.manager import FlushReport, MemoryGenerationManager
    from sandmem.memory.storage import MemoryPaths
    from sandmem.sandboxes._session import SandboxSession

logger = logging.getLogger("sandmem.memory.store")

STATE_DIR = ".store"
_PUSHED = ".store-pushed.json"
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
    if not await session.exists(path):
        return None
    data = await session.read(path)
    return data if isinstance(data, bytes) else data.read()


async def _pulled(session: SandboxSession, paths: MemoryPaths) -> MemoryVersion | None:
    raw = await _read(session, _state_path(paths, "version.json"))
    if raw is None:
        return None
    try:
        return MemoryVersion.from_json(raw, json.loads(raw).get("etag", ""))
    except (ValueError, KeyError):
        return None


async def _local_read_files(session: SandboxSession, paths: MemoryPaths) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    for name in ("memory_summary.md", "MEMORY.md"):
        data = await _read(session, f"{paths.memories_dir}/{name}")
        if data is not None:
            out[name] = data
    for sub in ("rollout_summaries", "skills"):
        out.update(await _walk(session, paths.memories_dir, sub))
    return out


async def _walk(session: SandboxSession, root: str, sub: str) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    stack = [sub]
    while stack:
        rel = stack.pop()
        path = f"{root}/{rel}"
        if not await session.exists(path):
            continue
        if await session.is_dir(path):
            for entry in await session.ls(path):
                name = entry if isinstance(entry, str) else str(getattr(entry, "name", entry))
                name = name.rsplit("/", 1)[-1]
                if not name.startswith("."):
                    stack.append(f"{rel}/{name}")
            continue
        data = await _read(session, path)
        if data is not None:
            out[rel] = data
    return out


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
        await session.write(f"{paths.memories_dir}/{name}", data)
        await session.write(_state_path(paths, f"base/{name}"), data)
    for name in set(local) - set(files):
        await session.remove(f"{paths.memories_dir}/{name}")
    record = json.loads(current.to_json()) | {"etag": current.etag}
    await session.write(_state_path(paths, "version.json"), json.dumps(record).encode())
    return True


async def push_segments(session: SandboxSession, paths: MemoryPaths, store: MemoryStore) -> int:
    """Push what each rollout file gained since the last push; return the segment count."""
    offsets_path = f"{paths.sessions_dir}/{_PUSHED}"
    raw = await _read(session, offsets_path)
    offsets: dict[str, int] = json.loads(raw) if raw else {}
    pushed = 0
    if not await session.exists(paths.sessions_dir):
        return 0
    for entry in await session.ls(paths.sessions_dir):
        name = entry if isinstance(entry, str) else str(getattr(entry, "name", entry))
        name = name.rsplit("/", 1)[-1]
        if not name.endswith(".jsonl") or name.startswith("."):
            continue
        data = await _read(session, f"{paths.sessions_dir}/{name}") or b""
        start = offsets.get(name, 0)
        end = data.rfind(b"\n", start) + 1  # whole lines only
        if end <= start:
            continue
        await store.put_segment(paths.sessions_dir, name[: -len(".jsonl")], data[start:end])
        offsets[name] = end
        pushed += 1
        await session.write(offsets_path, json.dumps(offsets).encode())
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
        for name, data in files.items():
            if is_read_file(name):
                await session.write(f"{paths.memories_dir}/{name}", data)
                await session.write(_state_path(paths, f"base/{name}"), data)
        record = json.loads(committed.to_json()) | {"etag": committed.etag}
        await session.write(_state_path(paths, "version.json"), json.dumps(record).encode())
        return True
    raise MemoryStoreConflict(
        f"could not commit live memory edits to {store.describe()} after "
        f"{_COMMIT_ATTEMPTS} attempts; they are still in the workspace"
    )


async def stop_with_store(manager: MemoryGenerationManager, store: MemoryStore) -> None:
    """A session's stop with a remote store: push, then generate (inline) or enqueue."""
    session, paths, config = manager.session, manager.paths, manager.config
    await push_segments(session, paths, store)
    await push_edits(session, paths, store)
    schedule = config.schedule
    if schedule == "inline":
        report = await run_job(store, paths, config)
        logger.info("memory generated in the store: %s", report)
        await pull(session, paths, store)
        return
    if schedule == "explicit":  # refused by Memory(); a hand-made manager only pushes
        return
    await schedule.enqueue(store, paths)


# --- the generation job ------------------------------------------------------------------


async def _stage(
    root: Path, store: MemoryStore, paths: MemoryPaths
) -> tuple[MemoryVersion | None, dict[str, bytes]]:
    """Write the layout's rollouts and the current version's files under ``root``; return
    that version and its files."""
    current, files = await read_current(store, paths.memories_dir)
    memories = root / paths.memories_dir
    for name, data in files.items():
        target = memories / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    sessions = root / paths.sessions_dir
    sessions.mkdir(parents=True, exist_ok=True)
    for rollout_id, segments in (await store.segments(paths.sessions_dir)).items():
        (sessions / f"{rollout_id}.jsonl").write_bytes(b"".join(segments))
    return current, files


def _collect(root: Path, paths: MemoryPaths) -> dict[str, bytes]:
    memories = root / paths.memories_dir
    out: dict[str, bytes] = {}
    for path in sorted(memories.rglob("*")):
        rel = path.relative_to(memories).as_posix()
        if (
            path.is_file()
            and not path.is_symlink()
            and not any(part.startswith(".") for part in rel.split("/"))
        ):
            out[rel] = path.read_bytes()
    return out


_PHASE_ONE_DIRS = ("raw_memories/", "rollout_summaries/")


async def run_job(
    store: MemoryStore,
    paths: MemoryPaths,
    config: MemoryGenerateConfig,
    *,
    lease: Lease | None = None,
    retry_failed: bool = False,
) -> FlushReport:
    """Generate memory for one layout of ``store`` (see the module docstring)."""
    inline = config.model_copy(update={"schedule": "inline"})
    carry: dict[str, bytes] = {}
    for _ in range(_COMMIT_ATTEMPTS):
        with tempfile.TemporaryDirectory(prefix="sandmem-job-") as tmp:
            job = _Job(Path(tmp) / "workspace", store, paths, lease)
            try:
                return await job.run(inline, carry, retry_failed)
            except MemoryStoreConflict:
                carry.update(job.phase_one_files())
                logger.info("memory of %s moved during the job; running again", store.describe())
    raise MemoryStoreConflict(
        f"memory of {store.describe()} changed under the job {_COMMIT_ATTEMPTS} times; the "
        "job will run again"
    )


class _Job:
    """One attempt: stage, flush (committing phase one before phase two), commit."""

    def __init__(
        self, root: Path, store: MemoryStore, paths: MemoryPaths, lease: Lease | None
    ) -> None:
        self.root = root
        self.store = store
        self.paths = paths
        self.lease = lease
        self.base: MemoryVersion | None = None
        self.committed: dict[str, bytes] = {}

    def phase_one_files(self) -> dict[str, bytes]:
        if not self.root.exists():
            return {}
        files = _collect(self.root, self.paths)
        return {name: data for name, data in files.items() if name.startswith(_PHASE_ONE_DIRS)}

    async def _commit(self) -> None:
        files = _collect(self.root, self.paths)
        if files == self.committed:
            return
        if self.lease is not None:
            await self.lease.check()
        fence = self.lease.token if self.lease is not None else 0
        self.base = await self.store.commit(self.paths.memories_dir, self.base, files, fence=fence)
        self.committed = files

    async def run(
        self,
        config: MemoryGenerateConfig,
        carry: dict[str, bytes],
        retry_failed: bool,
    ) -> FlushReport:
        from sandmem.memory.manager import MemoryGenerationManager
        from sandmem.sandboxes import Manifest, UnixLocalSandboxClient

        self.root.mkdir(parents=True)
        self.base, self.committed = await _stage(self.root, self.store, self.paths)
        for name, data in carry.items():
            target = self.root / self.paths.memories_dir / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        client = UnixLocalSandboxClient()
        session = await client.create(manifest=Manifest(root=self.root))
        try:
            await session.start()
            manager = MemoryGenerationManager(session, self.paths, config)
            manager.detach_stop_hook()
            manager.after_phase_one = self._commit
            report = await manager.flush(retry_failed=retry_failed)
            await self._commit()
            await session.stop()
        finally:
            await client.delete(session)
        return report
