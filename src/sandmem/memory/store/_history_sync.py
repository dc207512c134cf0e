"""Memory history across hosts: a remote store keeps a mirror of every layout's history
(``<memories_dir>/history/`` in the store: the same ``versions/`` records and ``objects/``
blobs as ``memory.history`` keeps in a workspace).

``sync_history`` brings a workspace's history and the store's mirror together: versions made
elsewhere (a worker's consolidation, another host's live edit) that are at least as new as
the workspace's newest are downloaded with their objects, and the workspace's versions the
store lacks are uploaded (objects first, records last, like a local version). Pulls, pushes
and generation jobs call it, so ``sandmem memory log`` on any host shows every host's and
worker's versions. The mirror is pruned by the retention from its names alone (numbers and
times are in them), in the same batches as a workspace.
"""

from __future__ import annotations

import hashlib
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sandmem.memory import _files, history
from sandmem.memory._json import loads_bounded
from sandmem.memory._store_seam import MemoryStore
from sandmem.memory.history import (
    DEFAULT_RETENTION,
    Retention,
    Version,
    _version_name,
    name_order,
    parse_version,
)

if TYPE_CHECKING:
    from sandmem.memory.layout import MemoryPaths
    from sandmem.sandboxes._session import SandboxSession

logger = logging.getLogger("sandmem.memory.store")


@dataclass
class MirrorNames:
    """The store mirror's names as a caller last saw them (``None``: not listed yet)."""

    names: set[str] | None = None


async def _mirror_names(store: MemoryStore, md: str, mirror: MirrorNames | None) -> set[str]:
    if mirror is not None and mirror.names is not None:
        return set(mirror.names)
    return set(await store.history_names(md))


def _blobs_of(version: Version) -> set[str]:
    return set(version.files.values()) | ({version.selection} if version.selection else set())


async def sync_history(
    session: SandboxSession,
    paths: MemoryPaths,
    store: MemoryStore,
    *,
    full: bool = True,
    retention: Retention = DEFAULT_RETENTION,
    mirror: MirrorNames | None = None,
) -> int:
    """Download the store's newer versions and upload the workspace's new ones; returns how
    many were downloaded. ``full=False`` (a generation job's fresh workspace) downloads only
    the newest version when the workspace has none. ``mirror``, when given, carries the
    mirror's names from one call to the next (a job syncs at its start and its end and lists
    the mirror once)."""
    if not store.remote:
        return 0
    md = paths.memories_dir
    local = history.Store(session, paths)
    names = await _mirror_names(store, md, mirror)
    remote_versions = {n[9:] for n in names if n.startswith("versions/") and _version_name(n[9:])}
    remote_objects = {n[8:] for n in names if n.startswith("objects/")}
    local_versions = await local.version_names()
    head = _version_name(local_versions[-1]) if local_versions else None
    wanted = sorted((n for n in remote_versions - set(local_versions)), key=name_order)
    if head is not None:
        wanted = [n for n in wanted if (_version_name(n) or (0, 0))[0] >= head[0]]
    elif not full:
        wanted = wanted[-1:]
    records = await store.read_history(md, [f"versions/{n}" for n in wanted])
    for name in wanted:
        raw = records.get(f"versions/{name}")
        if raw is not None:
            await _download(session, local, store, name, raw)
    uploaded = 0
    for name in local_versions:
        if name not in remote_versions and await _upload(
            session, local, store, name, remote_objects
        ):
            remote_versions.add(name)
            uploaded += 1
    await _prune_mirror(store, md, remote_versions, remote_objects, retention)
    if mirror is not None:
        mirror.names = {f"versions/{n}" for n in remote_versions}
        mirror.names |= {f"objects/{d}" for d in remote_objects}
    if wanted or uploaded:
        logger.debug("history of %s: %d down, %d up", md, len(wanted), uploaded)
    return len(wanted)


async def _upload(
    session: SandboxSession, local: history.Store, store: MemoryStore, name: str, objects: set[str]
) -> bool:
    """One of the workspace's version records and the objects the store lacks (``objects``,
    updated), into the store; a record that does not parse (reported) is not uploaded."""
    md = local.paths.memories_dir
    version = await local.read_version(name)
    if version is None:
        return False
    new = sorted(_blobs_of(version) - objects)
    if new:
        await store.put_history(
            md, {f"objects/{d}": data for d, data in (await local.blobs(new)).items()}
        )
        objects.update(new)
    path = f"{local.root}/versions/{name}"
    raw = (await _files.read_many(session, [path]))[path]
    if raw is None:
        return False
    await store.put_history(md, {f"versions/{name}": raw})
    return True


async def _download(
    session: SandboxSession, local: history.Store, store: MemoryStore, name: str, raw: bytes
) -> None:
    """One of the store's version records and the objects it names, into the workspace. The
    record is untrusted: a malformed one, or an object whose bytes do not match its digest, is
    skipped (logged) and nothing of it is written."""
    md = local.paths.memories_dir
    try:
        version = Version.from_json(loads_bounded(raw))
    except (ValueError, KeyError, TypeError) as exc:
        logger.warning("history record %s in %s skipped: %s", name, store.describe(), exc)
        return
    missing = [
        d for d in _blobs_of(version) if not await _files.exists(session, local.object_path(d))
    ]
    blobs = await store.read_history(md, [f"objects/{d}" for d in missing])
    if any(hashlib.sha256(data).hexdigest() != key[8:] for key, data in blobs.items()):
        logger.warning(
            "history record %s in %s skipped: an object does not match its digest",
            name,
            store.describe(),
        )
        return
    for key, data in blobs.items():
        await _files.write(session, local.object_path(key[8:]), data)
    await _files.write(session, f"{local.root}/versions/{name}", raw)


async def _prune_mirror(
    store: MemoryStore,
    md: str,
    versions: set[str],
    objects: set[str],
    retention: Retention,
) -> None:
    ordered = sorted(versions, key=name_order)
    if len(ordered) <= 1:
        return
    now = time.time()
    limit_s = retention.keep_days * 86400.0
    slack = max(1, retention.keep_versions // 20)
    oldest = (_version_name(ordered[0]) or (0, 0))[1]
    if len(ordered) <= retention.keep_versions + slack and now - oldest <= limit_s + 86400.0:
        return
    drop = ordered[: max(0, len(ordered) - retention.keep_versions)]
    drop += [n for n in ordered[len(drop) : -1] if now - (_version_name(n) or (0, 0))[1] > limit_s]
    kept = [n for n in ordered if n not in set(drop)]
    records = await store.read_history(md, [f"versions/{n}" for n in kept])
    referenced: set[str] = set()
    for key, raw in records.items():
        found = parse_version(key, key.rpartition("/")[2], raw)
        if isinstance(found, Version):  # a bad record in the store names nothing kept
            referenced |= _blobs_of(found)
    await store.delete_history(md, [f"versions/{n}" for n in drop])
    await store.delete_history(md, [f"objects/{d}" for d in sorted(objects - referenced)])
    versions.difference_update(drop)
    objects.intersection_update(referenced)


async def replace_mirror(session: SandboxSession, paths: MemoryPaths, store: MemoryStore) -> None:
    """Make the store's mirror equal the workspace's history (after ``redact-history``):
    every record uploaded again, then every name the workspace lacks deleted."""
    if not store.remote:
        return
    md = paths.memories_dir
    local = history.Store(session, paths)
    names = await local.version_names()
    objects = {d for v in await local.read_versions(names) for d in _blobs_of(v)}
    await store.put_history(
        md, {f"objects/{d}": data for d, data in (await local.blobs(sorted(objects))).items()}
    )
    for name in names:
        raw = (await _files.read_many(session, [f"{local.root}/versions/{name}"]))[
            f"{local.root}/versions/{name}"
        ]
        if raw is not None:
            await store.put_history(md, {f"versions/{name}": raw})
    keep = {f"versions/{n}" for n in names} | {f"objects/{d}" for d in objects}
    stale = [n for n in await store.history_names(md) if n not in keep]
    await store.delete_history(md, stale)
