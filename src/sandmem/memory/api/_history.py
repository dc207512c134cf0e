"""The public memory-history API: log, diff, restore, redact-history, and the review inbox.

Like the rest of ``sandmem.memory`` each function takes a target (a live ``SandboxSession``
or a workspace directory) and an optional ``MemoryLayoutConfig``, and has a ``*_sync`` twin.
The storage is ``memory.history``; every change goes through ``memory.journal``
(``docs/history.md``).
"""

from __future__ import annotations

import json
from collections.abc import Callable

from pydantic import BaseModel, ConfigDict

from sandmem._errors import SandboxError, UserError
from sandmem.memory import (
    _files,
    _history_prune,
    _redact_names,
    history,
    journal,
    proposals,
    tombstones,
)
from sandmem.memory import state as gen_state
from sandmem.memory._records import Problem, report
from sandmem.memory._secret_forms import case_blind
from sandmem.memory.api._target import MemoryTarget, lock_error, open_target, run_sync
from sandmem.memory.config import MemoryLayoutConfig
from sandmem.memory.history import Attribution, Version, unified
from sandmem.memory.layout import MemoryPaths
from sandmem.memory.rollouts import ROLLOUT_ID_PATTERN
from sandmem.memory.store._history_sync import replace_mirror, sync_history
from sandmem.memory.store._sync import redact_store
from sandmem.memory.views import _index_search, _transcripts
from sandmem.memory.views._index import INDEX_NAME, remove_index
from sandmem.redaction import Redactor
from sandmem.sandboxes._session import SandboxSession


class _Result(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)


class VersionInfo(_Result):
    """One version of a layout's memory files (``sandmem memory log``)."""

    version: int
    """The version's number (``sandmem memory restore <version>``)."""
    time: str
    """When it was made (ISO-8601 UTC)."""
    kind: str
    """What made it: ``consolidation``, ``live_edit``, ``hand_edit``, ``forget``, ``ingest``,
    ``mcp_write`` or ``restore``."""
    engine: str | None = None
    """For a consolidation: ``model`` or ``extractive``."""
    model: str | None = None
    """The consolidation model's name."""
    rollouts_added: list[str] = []
    """Conversations folded in."""
    rollouts_removed: list[str] = []
    """Conversations dropped (forgotten, or fallen out of the selection)."""
    run: str | None = None
    """The conversation (rollout id) of the run that made the change."""
    client: str | None = None
    """The person or program that made it (``cli``, ``api``, an MCP client)."""
    note: str | None = None
    proposal: str | None = None
    """The review proposal whose approval made it."""
    restored_from: int | None = None
    """For a restore: the version restored."""
    parent: int | None = None
    changed: list[str] = []
    """Files that differ from the previous version."""
    redacted: bool = False
    """``redact-history`` rewrote this version."""
    forgotten_back: list[str] = []
    """Set by ``restore`` and ``approve``: conversations ``forget`` removed whose memory the
    new version brings back (their raw memories and transcripts stay deleted)."""


class HistoryDiff(_Result):
    """A unified diff between two versions (``sandmem memory diff``)."""

    old: int | None
    new: int | None
    files: list[str]
    """Files that differ."""
    diff: str


class ProposalInfo(_Result):
    """A change waiting in the review inbox."""

    id: str
    time: str
    kind: str
    run: str | None = None
    base: int | None = None
    """The version it was made against."""
    stale: list[str] = []
    """Files that changed since it was made: it no longer applies (dismiss and regenerate)."""
    files: list[str]
    diff: str
    """The change, as a unified diff against the live files."""


class RedactResult(_Result):
    """What ``redact-history`` rewrote."""

    versions: list[int]
    """Versions whose stored files held a match (rewritten, attribution kept)."""
    files: list[str]
    """Workspace files under the memories dir rewritten."""
    still_in: list[str]
    """Files outside the memories dir (rollout transcripts) that still hold a match, in their
    text or their name (a conversation id)."""
    renamed: list[str] = []
    """Memory files whose name held the secret in some form (a rollout summary's slug, a
    skill's name), renamed: their new names, relative to the memories dir (the old names are
    not shown: they hold the secret)."""


# ---------------------------------------------------------------- helpers


def _info(version: Version, parent: Version | None) -> VersionInfo:
    a = version.attribution
    before = parent.files if parent is not None else {}
    names = set(before) | set(version.files)
    return VersionInfo(
        version=version.seq,
        time=version.time,
        kind=a.kind,
        engine=a.engine,
        model=a.model,
        rollouts_added=list(a.rollouts_added),
        rollouts_removed=list(a.rollouts_removed),
        run=a.run,
        client=a.client,
        note=a.note,
        proposal=a.proposal,
        restored_from=a.restored_from,
        parent=version.parent,
        changed=sorted(n for n in names if before.get(n) != version.files.get(n)),
        redacted=version.redacted,
    )


async def _sync(
    session: SandboxSession, paths: MemoryPaths, layout: MemoryLayoutConfig | None
) -> None:
    """With a remote store: bring the store's history mirror and the workspace's together
    (versions made by workers and other hosts)."""
    store = layout.store if layout is not None else None
    if store is not None and store.remote:
        await sync_history(session, paths, store)


# ---------------------------------------------------------------- log, diff, restore


async def log(
    target: MemoryTarget, *, layout: MemoryLayoutConfig | None = None, limit: int | None = None
) -> list[VersionInfo]:
    """The layout's versions, newest first, with their attribution. Reads only."""
    async with open_target(target, layout) as (session, paths, _owned):
        await _sync(session, paths, layout)
        found = await history.versions(session, paths)
    by_seq = {v.seq: v for v in found}
    infos = [_info(v, by_seq.get(v.parent) if v.parent else None) for v in found]
    return infos[:limit] if limit is not None else infos


async def diff(
    target: MemoryTarget,
    old: str | int | None = None,
    new: str | int | None = None,
    *,
    layout: MemoryLayoutConfig | None = None,
) -> HistoryDiff:
    """The unified diff from version ``old`` to ``new`` (numbers, ``head``, ``head~N``).
    Neither given: the last change (the newest version against its parent); only ``old``:
    that version against the newest."""
    async with open_target(target, layout) as (session, paths, _owned):
        await _sync(session, paths, layout)
        found = await history.versions(session, paths)
        if old is None and new is None:
            b = history.resolve("head", found)
            a = next((v for v in found if v.seq == b.parent), None)
        else:
            a = history.resolve(old if old is not None else "head", found)
            b = history.resolve(new if new is not None else "head", found)
        before = await history.version_files(session, paths, a) if a is not None else {}
        after = await history.version_files(session, paths, b)
    changed, text = unified(before, dict(after))
    return HistoryDiff(old=a.seq if a else None, new=b.seq, files=changed, diff=text)


async def restore(
    target: MemoryTarget,
    version: str | int,
    *,
    layout: MemoryLayoutConfig | None = None,
    client: str = "api",
) -> VersionInfo:
    """Make a new version whose memory files equal ``version``'s (files it did not have are
    removed); the conversations state (``phase_two_selection.json``) follows, so the next
    consolidation folds in what came after it. Raises ``UserError`` for an unknown version."""
    async with open_target(target, layout) as (session, paths, _owned):
        try:
            async with _files.lock(session, paths.lock):
                found = await history.versions(session, paths)
                old = history.resolve(version, found)
                files: dict[str, bytes | None] = dict(
                    await history.version_files(session, paths, old)
                )
                live = await journal.versioned_files(session, paths)
                files.update({n: None for n in live if n not in files})
                raw = await history.version_selection(session, paths, old)
                selection = gen_state.selection_copy(raw)
                now = {r.rollout_id for r in (await gen_state.load_selection(session, paths)).refs}
                then = {r["rollout_id"] for r in selection["selected"]}
                attribution = Attribution(
                    "restore",
                    client=client,
                    restored_from=old.seq,
                    rollouts_added=tuple(sorted(then - now)),
                    rollouts_removed=tuple(sorted(now - then)),
                )
                await journal.write_files(session, paths, files, attribution, selection=selection)
                head, parent = await _head_and_parent(session, paths)
                back = await _forgotten_back(session, paths, attribution)
            await _sync(session, paths, layout)
        except SandboxError as exc:
            raise lock_error(exc) from exc
    assert head is not None
    return _info(head, parent).model_copy(update={"forgotten_back": back})


async def _forgotten_back(
    session: SandboxSession, paths: MemoryPaths, attribution: Attribution
) -> list[str]:
    """The conversations ``attribution`` folds in that ``forget`` removed."""
    if not attribution.rollouts_added:
        return []
    forgotten = await tombstones.load(session, paths)
    return [r for r in attribution.rollouts_added if tombstones.find(forgotten, r) is not None]


async def _head_and_parent(
    session: SandboxSession, paths: MemoryPaths
) -> tuple[Version | None, Version | None]:
    """The newest version and the one before it (what its ``changed`` is counted against)."""
    store = history.Store(session, paths)
    head = await store.head()
    if head is not None and head.parent is not None:
        for name in reversed(await store.version_names()):
            if name.startswith(f"{head.parent:08d}-"):
                return head, await store.read_version(name)
    return head, None


async def redact_history(
    target: MemoryTarget,
    pattern: str | None = None,
    *,
    secrets: bool = False,
    layout: MemoryLayoutConfig | None = None,
) -> RedactResult:
    """Remove a secret from memory and its whole history: ``pattern`` (a regular expression)
    and/or ``secrets=True`` (the built-in secret detectors) are replaced with
    ``[REDACTED:<kind>]`` in every stored version, proposal and file under the memories dir;
    the old bytes are deleted, and so is the layout's search index (``.index.sqlite``, built
    again from the redacted files at its next use). Numbers and attribution are kept.

    What sandmem derived from a secret goes too (``_secret_forms``): its lower-case, upper-case,
    slug and ASCII-folded forms, its words on a ``Keywords:`` line, a prefix or suffix a cut
    left beside an ellipsis; a memory file whose name holds one is renamed and every text
    naming it (history included) names the new file."""
    if pattern is None and not secrets:
        raise UserError("redact-history needs a PATTERN or --secret")
    rules = [("history", pattern)] if pattern is not None else []
    try:
        redactor = Redactor(rules, defaults=secrets)
    except ValueError as exc:
        raise UserError(f"invalid pattern {pattern!r}: {exc}") from exc
    async with open_target(target, layout) as (session, paths, _owned):
        try:
            async with _files.lock(session, paths.lock):
                finders = (redactor, case_blind(rules))
                forms = await _redact_names.gather(session, paths, finders, _is_index)
                rids = await _redact_names.rollout_ids(session, paths.raw_dir, paths)
                renamer = _redact_names.Renamer(redactor, forms, rids)
                moved = await _redact_names.rename_files(
                    session, paths.memories_dir, renamer, _is_index
                )
                clean = renamer.cleaner()
                changed = await _history_prune.redact_history(
                    session, paths, clean, rename=renamer.names_of
                )
                rewritten = await _redact_tree(session, paths.memories_dir, clean)
                await remove_index(session, paths)  # a search index keeps removed terms
                if await _files.exists(session, tombstones.tombstones_path(paths)):
                    async with _files.lock(session, f"{paths.sessions_dir}/.lock"):
                        await tombstones.seal(session, paths, renamer.holds)
                still = await _matching(session, paths.sessions_dir, clean, renamer.holds)
                if still:  # the transcript tier never indexes those passages again
                    await _withhold_from_search(session, paths, lambda t: clean(t) != t)
                store = layout.store if layout is not None else None
                if store is not None and store.remote:
                    await replace_mirror(session, paths, store)
                    await redact_store(session, paths, store, clean, rename=renamer.name)
        except SandboxError as exc:
            raise lock_error(exc) from exc
    return RedactResult(
        versions=changed, files=rewritten, still_in=still, renamed=[new for _old, new in moved]
    )


def _is_index(path: str) -> bool:
    """The search index's files: removed whole (``remove_index``), never read or rewritten."""
    return path.rsplit("/", 1)[-1].startswith(INDEX_NAME)


async def _tree(session: SandboxSession, top: str, skip: str | None = None) -> list[str]:
    """Every regular file below ``top`` (hidden ones too; not the lock, nothing under
    ``skip``), never through a link."""
    found = await _files.walk(session, top, depth=_files.MAX_DEPTH * 4, hidden=True)
    return sorted(
        path
        for path in found
        if not path.endswith("/.lock") and not (skip and path.startswith(skip + "/"))
    )


async def _redact_tree(
    session: SandboxSession, top: str, redact: Callable[[str], str]
) -> list[str]:
    rewritten = []
    for path in await _tree(session, top, skip=f"{top}/{history.HISTORY_DIR}"):
        if _is_index(path):
            continue  # removed whole (``remove_index``): a rewrite would only damage it
        data = (await _files.read_many(session, [path]))[path]
        if data is None:
            continue
        clean = history.redact_bytes(data, redact)
        if clean != data:
            await _files.write(session, path, clean)
            rewritten.append(path)
    return rewritten


async def _matching(
    session: SandboxSession, top: str, redact: Callable[[str], str], holds: Callable[[str], bool]
) -> list[str]:
    hits = []
    for path in await _tree(session, top):
        if holds(path.rsplit("/", 1)[-1]):
            hits.append(path)  # a conversation id holds it: ``forget`` that conversation
            continue
        data = (await _files.read_many(session, [path]))[path]
        if data is not None and history.redact_bytes(data, redact) != data:
            hits.append(path)
    return hits


async def _withhold_from_search(
    session: SandboxSession, paths: MemoryPaths, matches: Callable[[str], bool]
) -> int:
    """Record, for the transcript tier, every passage of the rollout files that ``matches``
    (``redact-history``'s pattern; the rollout files themselves are not rewritten), so a
    rebuilt index never holds them again; added to what was recorded before. Returns how
    many passages are newly withheld."""
    known, _digest = await _index_search.load_withheld(session, paths)
    record = {rid: set(d) for rid, d in (known or {}).items()}
    if not await _files.is_dir(session, paths.sessions_dir):
        return 0
    redact = _index_search.redactor()
    added = 0
    for name in sorted(await _files.listdir(session, paths.sessions_dir)):
        rid = name[:-6] if name.endswith(".jsonl") else ""
        if not ROLLOUT_ID_PATTERN.fullmatch(rid):
            continue
        try:
            data = await _files.read(session, paths.rollout_file(rid))
        except SandboxError:
            continue
        found = _transcripts.withheld_passages(data or b"", matches, redact)
        new = found - record.get(rid, set())
        if new:
            record.setdefault(rid, set()).update(new)
            added += len(new)
    if added or known is None:
        text = json.dumps({rid: sorted(d) for rid, d in sorted(record.items())}, indent=1)
        await _files.write(session, _index_search.withheld_path(paths), text + "\n")
    return added


# ---------------------------------------------------------------- review inbox


async def _proposal_info(
    session: SandboxSession, paths: MemoryPaths, proposal: proposals.Proposal
) -> ProposalInfo:
    new = await proposals.contents(session, paths, proposal)
    live = await _files.read_many(session, [_files.member(paths.memories_dir, n) for n in new])
    old = {n: d for n in new if (d := live[_files.member(paths.memories_dir, n)]) is not None}
    _changed, text = unified(old, new)
    return _described(proposal, text)


def _described(proposal: proposals.Proposal, diff: str) -> ProposalInfo:
    return ProposalInfo(
        id=proposal.id,
        time=proposal.time,
        kind=proposal.attribution.kind,
        run=proposal.attribution.run,
        base=proposal.base,
        stale=list(proposal.stale),
        files=sorted(proposal.files),
        diff=diff,
    )


async def inbox(
    target: MemoryTarget, *, layout: MemoryLayoutConfig | None = None
) -> list[ProposalInfo]:
    """The pending proposals (review mode), oldest first, each with its diff and whether it
    is stale. Reads only."""
    async with open_target(target, layout) as (session, paths, _owned):
        found: list[ProposalInfo] = []
        for proposal in await proposals.load_all(session, paths):
            try:
                found.append(await _proposal_info(session, paths, proposal))
            except UserError as exc:  # an object it names is missing: one line, not the inbox
                report(
                    [
                        Problem(
                            f"{paths.memories_dir}/{history.HISTORY_DIR}/proposals/"
                            f"{proposal.id}.json",
                            f"skipped ({exc})",
                        )
                    ]
                )
        return found


async def approve(
    target: MemoryTarget,
    proposal_id: str,
    *,
    layout: MemoryLayoutConfig | None = None,
    client: str = "api",
) -> VersionInfo:
    """Apply a proposal as a new version (its attribution kept, ``proposal`` set). Raises
    ``UserError`` for an unknown or stale proposal (stale: a file it changes moved on since;
    dismiss it and regenerate)."""
    async with open_target(target, layout) as (session, paths, _owned):
        try:
            async with _files.lock(session, paths.lock):
                proposal = await proposals.get(session, paths, proposal_id)
                if proposal.stale:
                    raise UserError(
                        f"proposal {proposal.id} is stale: {', '.join(proposal.stale)} changed "
                        "since it was made; dismiss it and regenerate it (`sandmem memory "
                        "generate` for a consolidation, the run for a live edit)"
                    )
                files = await proposals.contents(session, paths, proposal)
                selection = None
                if proposal.selection is not None:
                    store = history.Store(session, paths)
                    raw = (await store.blobs([proposal.selection]))[proposal.selection]
                    selection = gen_state.selection_copy(raw)
                a = proposal.attribution
                attribution = Attribution(
                    a.kind,
                    engine=a.engine,
                    model=a.model,
                    rollouts_added=a.rollouts_added,
                    rollouts_removed=a.rollouts_removed,
                    run=a.run,
                    client=client,
                    proposal=proposal.id,
                )
                await journal.write_files(session, paths, files, attribution, selection=selection)
                await proposals.remove(session, paths, proposal)
                head, parent = await _head_and_parent(session, paths)
                back = await _forgotten_back(session, paths, attribution)
            await _sync(session, paths, layout)
        except SandboxError as exc:
            raise lock_error(exc) from exc
    assert head is not None
    return _info(head, parent).model_copy(update={"forgotten_back": back})


async def _replan(session: SandboxSession, paths: MemoryPaths) -> None:
    """The next generation consolidates again (a dismissed consolidation proposal is
    regenerated, instead of being skipped as "nothing changed")."""
    state, _problems = await gen_state.load(session, paths)
    if state.phase_two.inputs_digest is not None:
        state.phase_two = state.phase_two.model_copy(update={"inputs_digest": None})
        await gen_state.save(session, paths, state)


async def dismiss(
    target: MemoryTarget, proposal_id: str, *, layout: MemoryLayoutConfig | None = None
) -> ProposalInfo:
    """Drop a proposal; memory is unchanged. Returns what was dropped."""
    async with open_target(target, layout) as (session, paths, _owned):
        try:
            async with _files.lock(session, paths.lock):
                proposal = await proposals.get(session, paths, proposal_id)
                try:
                    info = await _proposal_info(session, paths, proposal)
                except UserError:  # an object it names is missing: it can still be dropped
                    info = _described(proposal, "")
                await proposals.remove(session, paths, proposal)
                await _history_prune.collect_garbage(session, paths)
                if proposal.attribution.kind == "consolidation":
                    await _replan(session, paths)
        except SandboxError as exc:
            raise lock_error(exc) from exc
    return info


# ---------------------------------------------------------------- sync twins

Spec = str | int


def log_sync(
    target: MemoryTarget, *, layout: MemoryLayoutConfig | None = None, limit: int | None = None
) -> list[VersionInfo]:
    """``log``, blocking."""
    return run_sync(log(target, layout=layout, limit=limit))


def diff_sync(
    target: MemoryTarget,
    old: Spec | None = None,
    new: Spec | None = None,
    *,
    layout: MemoryLayoutConfig | None = None,
) -> HistoryDiff:
    """``diff``, blocking."""
    return run_sync(diff(target, old, new, layout=layout))


def restore_sync(
    target: MemoryTarget,
    version: Spec,
    *,
    layout: MemoryLayoutConfig | None = None,
    client: str = "api",
) -> VersionInfo:
    """``restore``, blocking."""
    return run_sync(restore(target, version, layout=layout, client=client))


def redact_history_sync(
    target: MemoryTarget,
    pattern: str | None = None,
    *,
    secrets: bool = False,
    layout: MemoryLayoutConfig | None = None,
) -> RedactResult:
    """``redact_history``, blocking."""
    return run_sync(redact_history(target, pattern, secrets=secrets, layout=layout))


def inbox_sync(
    target: MemoryTarget, *, layout: MemoryLayoutConfig | None = None
) -> list[ProposalInfo]:
    """``inbox``, blocking."""
    return run_sync(inbox(target, layout=layout))


def approve_sync(
    target: MemoryTarget,
    proposal_id: str,
    *,
    layout: MemoryLayoutConfig | None = None,
    client: str = "api",
) -> VersionInfo:
    """``approve``, blocking."""
    return run_sync(approve(target, proposal_id, layout=layout, client=client))


def dismiss_sync(
    target: MemoryTarget, proposal_id: str, *, layout: MemoryLayoutConfig | None = None
) -> ProposalInfo:
    """``dismiss``, blocking."""
    return run_sync(dismiss(target, proposal_id, layout=layout))
