"""Keeping memory history bounded and clean: retention, garbage collection, redaction.

``prune`` applies a ``Retention`` (see ``memory.history``); ``collect_garbage`` removes
objects that no version or pending proposal names; ``redact_history`` rewrites every stored
record with a redaction and then collects garbage, so no copy of the old bytes is left.
Called by ``memory.journal`` (after a version is made) and the memory API, under the layout
lock.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from sandmem.memory import _files, proposals
from sandmem.memory.history import (
    DEFAULT_RETENTION,
    Retention,
    Store,
    _version_name,
    redact_bytes,
    versions,
)
from sandmem.memory.layout import MemoryPaths
from sandmem.sandboxes._session import SandboxSession


async def referenced_blobs(session: SandboxSession, paths: MemoryPaths) -> set[str]:
    """Every blob a kept version or a pending proposal names."""
    keep: set[str] = set()
    for version in await versions(session, paths):
        keep.update(version.files.values())
        if version.selection:
            keep.add(version.selection)
    for proposal in await proposals.load_all(session, paths):
        keep.update(d for d in proposal.files.values() if d is not None)
        if proposal.selection:
            keep.add(proposal.selection)
    return keep


async def collect_garbage(session: SandboxSession, paths: MemoryPaths) -> int:
    """Remove objects no version or proposal names (and temp files of killed writes)."""
    store = Store(session, paths)
    keep = await referenced_blobs(session, paths)
    removed = 0
    for name in await store._names("objects"):
        if name not in keep:
            await _files.remove(session, f"{store.root}/objects/{name}")
            removed += 1
    for sub in ("versions", "proposals"):
        for name in await store._names(sub):
            if not name.endswith(".json"):
                await _files.remove(session, f"{store.root}/{sub}/{name}")
    return removed


async def prune(
    session: SandboxSession,
    paths: MemoryPaths,
    retention: Retention = DEFAULT_RETENTION,
    *,
    eager: bool = True,
    store: Store | None = None,
) -> int:
    """Drop versions past the retention (the newest always stays) and the objects only they
    named; returns how many versions were dropped. ``eager=False`` (when a version is made)
    prunes only past the batch thresholds in the module docstring. ``store``: the locked
    store the caller made its version with (its listing is reused)."""
    store = store or Store(session, paths)
    names = await store.version_names()
    if not names:
        return 0
    now = time.time()
    limit_s = retention.keep_days * 86400.0
    slack = 0 if eager else max(1, retention.keep_versions // 20)
    oldest_epoch = (_version_name(names[0]) or (0, 0))[1]
    too_many = len(names) > retention.keep_versions + slack
    too_old = now - oldest_epoch > limit_s + (0 if eager else 86400.0)
    if not (too_many or too_old) or len(names) <= 1:
        return 0
    drop = names[: max(0, len(names) - retention.keep_versions)]
    drop += [n for n in names[len(drop) : -1] if now - (_version_name(n) or (0, 0))[1] > limit_s]
    store.forget_listing()
    for name in drop:
        await _files.remove(session, f"{store.root}/versions/{name}")
    await collect_garbage(session, paths)
    return len(drop)


# ---------------------------------------------------------------- redaction


async def redact_history(
    session: SandboxSession,
    paths: MemoryPaths,
    redact: Any,
    *,
    rename: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
) -> list[int]:
    """Rewrite every stored version (and proposal) with ``redact`` (``str -> str``) applied to
    each file, conversations state and attribution text (a client's self-declared name, a
    note), and ``rename`` to its ``{file name: digest}`` maps (names that held a secret),
    keeping numbers and the rest of the attribution; then delete every
    object no record names, so the old bytes are gone. Returns the versions that changed.
    A process killed midway leaves every record naming blobs that exist; run it again."""
    store = Store(session, paths)
    changed: list[int] = []
    rewritten: dict[str, str] = {}

    async def rewrite(digest: str) -> str:
        if digest not in rewritten:
            old = (await store.blobs([digest]))[digest]
            rewritten[digest] = await store.put_blob(redact_bytes(old, redact))
        return rewritten[digest]

    renamed = rename or (lambda files: files)
    for name, version in await store.read_named(await store.version_names()):
        files = renamed({n: await rewrite(d) for n, d in version.files.items()})
        selection = await rewrite(version.selection) if version.selection else None
        attribution = version.attribution.redacted(redact)
        if (files, selection, attribution) != (
            version.files,
            version.selection,
            version.attribution,
        ):
            await store.write_version(
                replace(
                    version,
                    files=files,
                    selection=selection,
                    attribution=attribution,
                    redacted=True,
                ),
                name,  # the record keeps its name: the old bytes are overwritten
            )
            changed.append(version.seq)
    for proposal in await proposals.load_all(session, paths):
        files2 = renamed({n: (await rewrite(d) if d else None) for n, d in proposal.files.items()})
        before = renamed(dict(proposal.before))
        attribution = proposal.attribution.redacted(redact)
        if (files2, before, attribution) != (proposal.files, proposal.before, proposal.attribution):
            await proposals.save(
                session,
                paths,
                replace(proposal, files=files2, before=before, attribution=attribution),
            )
    await _redact_unparsed(store, redact)
    await collect_garbage(session, paths)
    return changed


async def _redact_unparsed(store: Store, redact: Any) -> None:
    """Records that do not parse (skipped everywhere else) rewritten as text with ``redact``:
    a damaged record must not keep a secret either."""
    known_versions = {name for name, _ in await store.read_named(await store.version_names())}
    known_proposals = {f"{p.id}.json" for p in await proposals.load_all(store.session, store.paths)}
    for sub, known in (("versions", known_versions), ("proposals", known_proposals)):
        names = [n for n in await store._names(sub) if n.endswith(".json") and n not in known]
        found = await _files.read_many(store.session, [f"{store.root}/{sub}/{n}" for n in names])
        for path, data in found.items():
            if data is not None and (clean := redact_bytes(data, redact)) != data:
                await _files.write(store.session, path, clean)
