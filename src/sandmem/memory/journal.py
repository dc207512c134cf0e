"""Memory commits: the one place where consolidated memory files change.

A consolidation never edits the live files. It works on a *stage*
(``<memories_dir>/.phase_two_stage/``): ``begin`` copies ``MEMORY.md``, ``memory_summary.md``
and the visible files of ``skills/`` there, and ``StagedFiles`` makes the consolidation agent's
tools read and write those copies under their usual names. While it runs, and after a crash
in it, the live files are exactly what they were.

``commit`` switches the set in one step that a crash cannot split:

1. it checks that no live file changed since ``begin`` (an edit made meanwhile is kept: the
   commit is refused, and the next consolidation sees the edit);
2. it writes the commit record ``.phase_two_commit.json`` (atomically): for every file, the
   hash it had before and the hash it gets, and the new ``phase_two_selection.json``;
3. it applies the record, file by file, then removes the stage and the record.

``commit`` is also where versions are made (``memory.history``): once the record is applied,
the live set and the conversations state become a new version carrying the record's
attribution, before the record is removed (so a recovered commit is versioned too). Every
writer of memory files goes through here and gets its version: a consolidation
(``commit``), a writer with new contents (``write_files``: restore, approval, ingest, MCP
writes), and a change made on the live files directly (``notice``: a run's live edit, a hand
edit noticed at the next flush, forget). Review mode turns a commit into a proposal instead
(``propose_stage``, ``propose``).

``recover`` runs at the start of every flush (and before a run reads the summary): a record
means a commit was interrupted, so it is rolled *forward*; a file is replaced only while it
still holds its *before* bytes, so an edit made after the crash (bytes that are neither before
nor after) is never overwritten. A stage without a record is an interrupted consolidation: it
is discarded, and the live files were never touched. Hidden files are never copied, changed or
removed.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
from collections.abc import Iterator, Sequence
from contextvars import ContextVar
from dataclasses import replace
from typing import Any

from sandmem._errors import MemoryGenerationError, SandboxError
from sandmem.memory import _files, _history_prune, _redact_names, history, proposals
from sandmem.memory._json import loads_bounded
from sandmem.memory._records import Problem, is_digest, is_memory_name
from sandmem.memory._redact_names import unreadable
from sandmem.memory._secret_forms import SecretForms, secret_values
from sandmem.memory.history import DEFAULT_RETENTION, Attribution, Retention
from sandmem.memory.layout import MemoryPaths, write_json
from sandmem.memory.rollouts import utc_now
from sandmem.memory.state import append_log
from sandmem.redaction import Redactor
from sandmem.sandboxes._session import SandboxSession

logger = logging.getLogger("sandmem.memory")

RECORD_VERSION = 1


def stage_dir(paths: MemoryPaths) -> str:
    return f"{paths.memories_dir}/.phase_two_stage"


def record_path(paths: MemoryPaths) -> str:
    return f"{paths.memories_dir}/.phase_two_commit.json"


def _legacy_backup(paths: MemoryPaths) -> str:
    return f"{paths.memories_dir}/.phase_two_backup"


def digest(data: bytes | None) -> str | None:
    return None if data is None else hashlib.sha256(data).hexdigest()


def is_staged_path(paths: MemoryPaths, path: str) -> bool:
    """The live paths a consolidation may change: ``MEMORY.md``, ``memory_summary.md``,
    ``skills/**``."""
    root = paths.memories_dir
    return path in (paths.memory_md, paths.summary_md, paths.skills_dir) or path.startswith(
        f"{root}/skills/"
    )


def staged(paths: MemoryPaths, path: str) -> str:
    """The stage copy of a live path (``path`` itself when it is not staged)."""
    if not is_staged_path(paths, path):
        return path
    return f"{stage_dir(paths)}/{path[len(paths.memories_dir) + 1 :]}"


async def _read(session: SandboxSession, path: str) -> bytes | None:
    return (await _files.read_many(session, [path]))[path]


async def _visible_files(session: SandboxSession, top: str) -> list[str]:
    """Every visible regular file below ``top`` (links and special files are left alone,
    never followed)."""
    return sorted(await _files.walk(session, top, depth=_files.MAX_DEPTH * 4))


async def live_files(session: SandboxSession, paths: MemoryPaths) -> list[str]:
    """The live set's paths: ``MEMORY.md``, ``memory_summary.md`` and the visible files of
    ``skills/`` whose names a version can hold (``_records.is_memory_name``: a name with a
    control character, say, made by an agent's shell, is not a memory file)."""
    files = [p for p in (paths.memory_md, paths.summary_md) if await _files.exists(session, p)]
    skills = await _visible_files(session, paths.skills_dir)
    return files + [p for p in skills if is_memory_name(_name(paths, p))]


async def begin(session: SandboxSession, paths: MemoryPaths) -> dict[str, str | None]:
    """Copy the live set into a fresh stage; returns each copied file's hash (the base)."""
    stage = stage_dir(paths)
    if await _files.exists(session, stage):
        await _files.remove(session, stage, recursive=True)
    await _files.mkdir(session, f"{stage}/skills", parents=True)
    base: dict[str, str | None] = {}
    for path in await live_files(session, paths):
        data = await _read(session, path)
        if data is None:
            continue
        await _files.write(session, staged(paths, path), data)
        base[path] = digest(data)
    return base


async def discard(session: SandboxSession, paths: MemoryPaths) -> None:
    if await _files.exists(session, stage_dir(paths)):
        await _files.remove(session, stage_dir(paths), recursive=True)


async def staged_files(session: SandboxSession, paths: MemoryPaths) -> list[str]:
    """The live paths the stage now holds."""
    stage = stage_dir(paths)
    found = [
        p
        for p in (paths.memory_md, paths.summary_md)
        if await _files.exists(session, staged(paths, p))
    ]
    for path in await _visible_files(session, f"{stage}/skills"):
        found.append(f"{paths.memories_dir}/{path[len(stage) + 1 :]}")
    return found


async def commit(
    session: SandboxSession,
    paths: MemoryPaths,
    base: dict[str, str | None],
    selection: dict[str, Any] | None,
    attribution: Attribution | None = None,
    *,
    redactor: Redactor | None = None,
    retention: Retention = DEFAULT_RETENTION,
    consolidated: bool = True,
) -> history.Version | None:
    """Switch the live set to the stage (see the module docstring). Raises
    ``MemoryGenerationError`` (and discards the stage) when a live file was edited since
    ``begin``."""
    changed = []
    for path in sorted(set(base) | set(await live_files(session, paths))):
        if digest(await _read(session, path)) != base.get(path):
            changed.append(path)
    if changed:
        await discard(session, paths)
        raise MemoryGenerationError(
            f"{', '.join(changed)} changed while consolidating; the edit is kept and the next "
            "consolidation folds it in"
        )
    entries: list[dict[str, Any]] = []
    for path in sorted(set(base) | set(await staged_files(session, paths))):
        new = await _read(session, staged(paths, path))
        after = digest(new)
        if after != base.get(path):
            entries.append({"path": path, "before": base.get(path), "after": after})
    memory = await _read(session, staged(paths, paths.memory_md)) or b""
    record = {
        "version": RECORD_VERSION,
        "files": entries,
        "consolidated": digest(memory) if consolidated else None,
        "selection": selection,
        "attribution": _attributed(attribution or Attribution("consolidation"))
        .redacted((redactor or Redactor()).redact)
        .to_json(),
    }
    await write_json(session, record_path(paths), record)
    await _apply(session, paths, record, redactor=redactor, retention=retention)
    return await _head_if_new(session, paths, record)


async def _head_if_new(
    session: SandboxSession, paths: MemoryPaths, record: dict[str, Any]
) -> history.Version | None:
    head = await history.Store(session, paths).head()
    return head if head is not None and head.seq == record.get("_version") else None


async def _apply(
    session: SandboxSession,
    paths: MemoryPaths,
    record: dict[str, Any],
    *,
    redactor: Redactor | None = None,
    retention: Retention = DEFAULT_RETENTION,
) -> list[str]:
    """Apply a commit record and make its version; returns the live files kept because they
    were edited after the interrupted commit."""
    kept: list[str] = []
    for entry in record["files"]:
        path, before, after = entry["path"], entry["before"], entry["after"]
        current = digest(await _read(session, path))
        if current == after:
            continue
        if current != before:
            kept.append(path)
            continue
        if after is None:
            await _files.remove(session, path)
            continue
        data = await _read(session, staged(paths, path))
        if digest(data) != after:  # the stage is gone or damaged: nothing safe to apply
            kept.append(path)
            continue
        assert data is not None
        await _files.write(session, path, data)
    memory = await _read(session, staged(paths, paths.memory_md))
    if memory is not None and digest(memory) == record.get("consolidated"):
        await _files.write(session, paths.consolidated_memory_md, memory)
    if isinstance(record.get("selection"), dict):
        await write_json(session, paths.selection_json, record["selection"])
    try:
        attribution = Attribution.from_json(record.get("attribution"))
    except ValueError:
        attribution = Attribution("consolidation")
    made = await _version(session, paths, attribution, redactor=redactor, retention=retention)
    record["_version"] = made.seq if made is not None else None
    await discard(session, paths)
    await _files.remove(session, record_path(paths))
    return kept


def _valid_record(paths: MemoryPaths, value: Any) -> bool:
    """Whether a commit record read back can be applied: every entry names a memory file of
    this layout (``MEMORY.md``, ``memory_summary.md``, ``skills/**``, normalized: a record
    naming ``package.json`` must not make recovery delete it) and SHA-256 digests or ``None``."""
    if not isinstance(value, dict) or not isinstance(value.get("files"), list):
        return False
    prefix = paths.memories_dir + "/"
    return all(
        isinstance(e, dict)
        and isinstance(e.get("path"), str)
        and e["path"].startswith(prefix)
        and is_memory_name(e["path"][len(prefix) :])
        and all(e.get(k) is None or is_digest(e.get(k)) for k in ("before", "after"))
        for e in value["files"]
    )


async def recover(session: SandboxSession, paths: MemoryPaths) -> list[Problem]:
    """Finish or discard an interrupted consolidation (call under the layout lock). Returns
    notes for the report, by path: what was rolled forward or discarded, and edits kept."""
    notes: list[Problem] = []
    record_file = record_path(paths)
    data = await _read(session, record_file)
    if data is not None:
        try:
            record = loads_bounded(data)
        except ValueError:
            record = None
        if _valid_record(paths, record):
            kept = await _apply(session, paths, record)
            notes.append(Problem(record_file, "finished an interrupted memory commit"))
            notes += [
                Problem(p, "edited after an interrupted commit; the edit is kept") for p in kept
            ]
        else:
            await _files.remove(session, record_file)
            notes.append(Problem(record_file, "unreadable commit record removed"))
    if await _files.exists(session, stage_dir(paths)):
        await discard(session, paths)
        notes.append(Problem(stage_dir(paths), "interrupted consolidation discarded"))
    if await _files.exists(session, _legacy_backup(paths)):
        await _files.remove(session, _legacy_backup(paths), recursive=True)
    for note in notes:
        logger.warning("%s", note)
    return notes


async def try_recover(session: SandboxSession, paths: MemoryPaths) -> None:
    """``recover`` when a commit record is left and the layout lock is free at once (a
    reader must not wait for a running consolidation)."""
    if not await _files.exists(session, record_path(paths)):
        return
    try:
        async with _files.lock(session, paths.lock, timeout=0.05):
            notes = await recover(session, paths)
            if notes:
                problems = {note.path: note.reason for note in notes}
                record = {"time": utc_now(), "phase": "check", "problems": problems}
                await append_log(session, paths, record)
    except SandboxError:
        logger.debug("memory commit recovery deferred: %s is held", paths.lock)


# ---------------------------------------------------------------- versions

_OVERRIDE: ContextVar[Attribution | None] = ContextVar("sandmem_memory_change", default=None)


@contextlib.contextmanager
def attributed(attribution: Attribution) -> Iterator[None]:
    """Within this block, every version made by this task (a consolidation, a noticed change)
    carries ``attribution``'s kind and fields (``forget`` wraps its re-consolidation)."""
    token = _OVERRIDE.set(attribution)
    try:
        yield
    finally:
        _OVERRIDE.reset(token)


def _attributed(attribution: Attribution) -> Attribution:
    override = _OVERRIDE.get()
    if override is None:
        return attribution
    return replace(
        override,
        engine=override.engine or attribution.engine,
        model=override.model or attribution.model,
        rollouts_added=override.rollouts_added or attribution.rollouts_added,
    )


def _name(paths: MemoryPaths, path: str) -> str:
    return path[len(paths.memories_dir) + 1 :]


async def versioned_files(
    session: SandboxSession, paths: MemoryPaths, redactor: Redactor | None = None
) -> dict[str, bytes]:
    """The live set (names relative to ``memories_dir``), redacted: a file that held a
    secret is rewritten redacted first (what the secret became elsewhere in the set too:
    ``_secret_forms``), and one whose name held one renamed, so nothing unredacted enters
    the history."""
    redactor = redactor or Redactor()
    for _attempt in range(2):  # again once after a rename: the references were rewritten
        files: dict[str, bytes] = {}
        found: list[tuple[str, str]] = []
        for path in await live_files(session, paths):
            data = await _read(session, path)
            if data is None:
                continue
            clean = history.redact_bytes(data, redactor.redact)
            if clean != data:
                found += secret_values(redactor, data.decode("utf-8", "surrogateescape"))
                await _files.write(session, path, clean)
            files[path] = clean
        forms = SecretForms(found)
        for path, data in files.items() if forms else ():
            if (clean := history.redact_bytes(data, forms.redact)) != data:
                await _files.write(session, path, clean)
                files[path] = clean
        md = paths.memories_dir
        if not await _redact_names.clean_names(session, md, redactor, forms, files, unreadable):
            break
    return {_name(paths, path): data for path, data in files.items()}


async def _version(
    session: SandboxSession,
    paths: MemoryPaths,
    attribution: Attribution,
    *,
    redactor: Redactor | None = None,
    retention: Retention = DEFAULT_RETENTION,
    own: frozenset[str] = frozenset(),
) -> history.Version | None:
    """Make a version of the live set and the conversations state (``None`` when they equal
    the newest version), then prune. The one function that makes versions. When ``own``
    names files (relative to ``memories_dir``: what the writer changed), a change to any
    other file made meanwhile is versioned first, apart, as a ``hand_edit`` (the ``own``
    files as the newest version has them), so ``attribution``'s version holds only its own
    change. The live set is read, redacted and hashed once, the versions listed once."""
    files = await versioned_files(session, paths, redactor)
    selection = await _read(session, paths.selection_json)
    redact = (redactor or Redactor()).redact
    store = history.Store(session, paths, locked=True)
    other = None
    if own:
        head = await store.head()
        before = {} if head is None else await history.version_files(session, paths, head)
        others = {n: d for n, d in files.items() if n not in own}
        others.update({n: d for n, d in before.items() if n in own})
        hand_edit = _attributed(Attribution("hand_edit"))
        other = await history.make_version(
            session, paths, others, selection, hand_edit, redact, store=store
        )
    mine = await history.make_version(
        session, paths, files, selection, _attributed(attribution), redact, store=store
    )
    if other is not None or mine is not None:
        await _history_prune.prune(session, paths, retention, eager=False, store=store)
    return mine


async def notice(
    session: SandboxSession,
    paths: MemoryPaths,
    attribution: Attribution,
    *,
    redactor: Redactor | None = None,
    retention: Retention = DEFAULT_RETENTION,
    own: frozenset[str] = frozenset(),
) -> history.Version | None:
    """Version a change made on the live files directly (a run's live edit, a hand edit, a
    forget), if there is one; with ``own`` (the files the writer changed), a change to any
    other file is versioned first, apart, as a ``hand_edit`` (``_version``). Call under the
    layout lock."""
    return await _version(
        session, paths, attribution, redactor=redactor, retention=retention, own=own
    )


async def unversioned(session: SandboxSession, paths: MemoryPaths) -> bool:
    """Whether the live set differs from the newest version (a cheap check without the
    lock: a run's end takes the lock only when it has something to version)."""
    head = await history.Store(session, paths).head()
    files: dict[str, bytes] = {}
    for path in await live_files(session, paths):
        data = await _read(session, path)
        if data is not None:
            files[_name(paths, path)] = data
    if head is None:
        return any(data.strip() for data in files.values())
    return {name: digest(data) for name, data in files.items()} != head.files


async def write_files(
    session: SandboxSession,
    paths: MemoryPaths,
    files: dict[str, bytes | None],
    attribution: Attribution,
    *,
    selection: dict[str, Any] | None = None,
    redactor: Redactor | None = None,
    retention: Retention = DEFAULT_RETENTION,
) -> history.Version | None:
    """Commit new contents for memory files (names relative to ``memories_dir``, ``None``
    deletes; only ``MEMORY.md``, ``memory_summary.md`` and ``skills/**``) as one version:
    the way a new writer (restore, approval, ingest, an MCP write) changes memory. Redacted
    first; crash-safe like a consolidation. Call under the layout lock."""
    redactor = redactor or Redactor()
    targets = {name: _files.member(paths.memories_dir, name) for name in files}
    for name, path in targets.items():
        if not is_staged_path(paths, path) or path == paths.skills_dir:
            raise ValueError(
                f"{name!r} is not a memory file (MEMORY.md, memory_summary.md, skills/)"
            )
    await notice(session, paths, Attribution("hand_edit"), redactor=redactor)
    base = await begin(session, paths)
    for name, data in files.items():
        path = targets[name]
        if data is None:
            if await _files.exists(session, staged(paths, path)):
                await _files.remove(session, staged(paths, path))
        else:
            await _files.write(
                session, staged(paths, path), history.redact_bytes(data, redactor.redact)
            )
    return await commit(
        session,
        paths,
        base,
        selection,
        attribution,
        redactor=redactor,
        retention=retention,
        consolidated=attribution.kind in ("consolidation", "restore"),
    )


async def propose_stage(
    session: SandboxSession,
    paths: MemoryPaths,
    base: dict[str, str | None],
    selection: dict[str, Any],
    attribution: Attribution,
) -> proposals.Proposal | None:
    """Review mode's ``commit``: the stage becomes a proposal and the live files stay as they
    are (the stage is discarded)."""
    files: dict[str, bytes | None] = {}
    for path in sorted(set(base) | set(await staged_files(session, paths))):
        new = await _read(session, staged(paths, path))
        if digest(new) != base.get(path):
            files[_name(paths, path)] = new
    await discard(session, paths)
    for older in await proposals.load_all(session, paths):
        if older.attribution.kind == "consolidation":  # superseded: this one folds in more
            await proposals.remove(session, paths, older)
    encoded = (json.dumps(selection, indent=2, sort_keys=True) + "\n").encode()
    clean = attribution.redacted(Redactor().redact)
    return await proposals.create(session, paths, files, clean, selection=encoded)


async def propose(
    session: SandboxSession,
    paths: MemoryPaths,
    files: dict[str, bytes | None],
    attribution: Attribution,
    *,
    redactor: Redactor | None = None,
) -> proposals.Proposal | None:
    """Review mode for a run: ``files`` become a proposal (redacted first: the secrets found
    in them in every derived form, and a name that holds one cleaned)."""
    redactor = redactor or Redactor()
    kept = {n: d for n, d in files.items() if is_staged_path(paths, f"{paths.memories_dir}/{n}")}
    texts = [d.decode("utf-8", "surrogateescape") for d in kept.values() if d is not None]
    forms = SecretForms(v for t in texts for v in secret_values(redactor, t))
    redact = (lambda t: forms.redact(redactor.redact(t))) if forms else redactor.redact
    clean = {n: (None if d is None else history.redact_bytes(d, redact)) for n, d in kept.items()}
    clean = _redact_names.Renamer(redactor, forms, set(), words=False).names_of(clean)
    return await proposals.create(session, paths, clean, attribution.redacted(redactor.redact))


class StagedFiles:
    """The session primitives the consolidation's tools use, with the live set mapped onto
    the stage: ``memories/MEMORY.md`` reads and writes the stage's copy."""

    def __init__(self, session: SandboxSession, paths: MemoryPaths) -> None:
        self._session = session
        self._paths = paths

    def _map(self, path: str) -> str:
        return staged(self._paths, path.rstrip("/"))

    async def read_bytes(self, path: str) -> bytes:
        return await _files.read_bytes(self._session, self._map(path))

    async def read_many(self, paths: Sequence[str]) -> dict[str, bytes | None]:
        found = await _files.read_many(self._session, [self._map(p) for p in paths])
        return dict(zip(paths, found.values(), strict=True))

    async def stat_many(self, paths: Sequence[str]) -> dict[str, Any]:
        found = await _files.stat_many(self._session, [self._map(p) for p in paths])
        return dict(zip(paths, found.values(), strict=True))

    async def write(self, path: str, data: bytes | str) -> None:
        await _files.write(self._session, self._map(path), data)

    async def exists(self, path: str) -> bool:
        return await _files.exists(self._session, self._map(path))

    async def is_dir(self, path: str) -> bool:
        return await _files.is_dir(self._session, self._map(path))

    async def listdir(self, path: str = ".") -> list[str]:
        names = await _files.listdir(self._session, self._map(path))
        if path.rstrip("/") == self._paths.memories_dir:
            names = [n for n in names if n != ".phase_two_stage"]
        return names

    async def mkdir(self, path: str, parents: bool = True) -> None:
        await _files.mkdir(self._session, self._map(path), parents=parents)

    async def remove(self, path: str, recursive: bool = False) -> None:
        await _files.remove(self._session, self._map(path), recursive=recursive)

    async def rename(self, src: str, dst: str) -> None:
        await _files.rename(self._session, self._map(src), self._map(dst))

    def lock(self, path: str, timeout: float = 30.0) -> Any:
        return _files.lock(self._session, path, timeout=timeout)
