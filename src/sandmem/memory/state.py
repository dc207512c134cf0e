"""Generation state: per-rollout retry state and the last consolidation, as pydantic models.

The sole reader and writer of a layout's state files: ``generation_state.json`` (``load`` /
``save``), ``phase_two_selection.json`` (``load_selection`` / ``save_selection``; a
consolidation commits it through ``memory.journal``), ``generation_log.jsonl``
(``append_log`` / ``read_log``) and ``.settled.json`` (``load_settled`` / ``save_settled``:
what the last flush with nothing to do saw, so the next one can tell it has nothing to do
from directory listings alone). Everything else asks here, in typed values.

``generation_state.json`` is derived data. The raw memory headers say which rollouts are up to
date; the state adds what files cannot say: attempts, the last error and its class, when to
retry. This module owns the rules both the manager and ``maintenance`` apply:

- ``reconcile`` — a rollout's state from its file fingerprint and whether its raw memory is
  up to date (a raw memory that records the rollout's current content wins over the file);
- ``is_due`` — whether a flush should extract a rollout now;
- ``record_failure`` — what a failure does to a rollout: an ``environment`` failure (the
  model server unreachable, timing out, rate limiting or failing with 5xx, or the flush
  timeout) never consumes an attempt; it sets an exponential, capped, jittered
  ``next_retry_at``. A ``configuration`` failure (HTTP 401, 403 or 404, or a reply saying
  the model does not exist: a wrong key, URL or model name) never consumes an attempt either
  and sets no retry time: the backlog stays pending until the setting is fixed. A ``rollout``
  failure (bad output after retries, context too long, a refusal) counts toward
  ``max_attempts``.

``parse_state`` never raises: a file of the wrong shape is rebuilt (an empty state that
``reconcile`` fills from the files), and a bad entry is dropped alone; each problem is
returned as a message with the path so the caller can report it.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
from collections.abc import Collection
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from sandmem._errors import (
    MaxTurnsExceeded,
    MemoryGenerationError,
    ModelRequestError,
    SandboxError,
)
from sandmem.memory import _files
from sandmem.memory._json import loads_bounded
from sandmem.memory._records import Problem
from sandmem.memory.layout import SELECTION_JSON, MemoryPaths, write_json
from sandmem.memory.rollouts import ROLLOUT_ID_PATTERN
from sandmem.memory.selection import (
    RawMemoryRef,
    SavedSelection,
    parse_selection_file,
    parse_time,
    selection_document,
)
from sandmem.sandboxes._session import SandboxSession

STATE_VERSION = 1

FailureKind = Literal["environment", "configuration", "rollout"]
RolloutStatus = Literal["pending", "done", "failed", "skipped"]
#: ``fallback``: the model's consolidation failed or was incomplete and the extractive engine's
#: was committed instead (the model is tried again at the next flush)
PhaseTwoStatus = Literal[
    "done", "incomplete", "proposed", "fallback", "failed", "skipped", "not_run"
]


class RolloutState(BaseModel):
    """One rollout's entry in ``generation_state.json``."""

    model_config = ConfigDict(extra="ignore", defer_build=True)

    status: RolloutStatus = "pending"
    attempts: int = Field(default=0, ge=0)
    segments: int | None = None
    updated_at: str | None = None
    last_error: str | None = None
    last_attempt_at: str | None = None
    failure_kind: FailureKind | None = None
    #: environment failures in a row (the backoff exponent); reset by any success
    environment_failures: int = Field(default=0, ge=0)
    next_retry_at: str | None = None
    #: (size, mtime in ns) of the rollout file and of its raw memory when this entry was last
    #: checked against them: a flush that finds both unchanged trusts the entry without
    #: reading either file (``None``: not known, the files are read)
    file_stat: tuple[int, int] | None = None
    raw_stat: tuple[int, int] | None = None

    def same_version(self, segments: int, updated_at: str) -> bool:
        return self.segments == segments and self.updated_at == updated_at


class PhaseTwoState(BaseModel):
    """The last consolidation of the layout."""

    model_config = ConfigDict(extra="ignore", defer_build=True)

    status: PhaseTwoStatus | None = None
    last_error: str | None = None
    last_attempt_at: str | None = None
    last_success_at: str | None = None
    #: JSON text of the added/retained/removed ids of the last consolidation
    selection: str | None = None
    failure_kind: FailureKind | None = None
    environment_failures: int = Field(default=0, ge=0)
    #: conversations an ``incomplete`` consolidation did not fold in (added) or drop (removed)
    missing_added: list[str] = Field(default_factory=list)
    still_cited: list[str] = Field(default_factory=list)
    #: a digest of what phase two's plan read (the raw memories' names, sizes and mtimes, the
    #: selection file's, the cap) when it last found nothing to do or committed a complete
    #: consolidation: a flush with the same digest skips phase two without reading them
    inputs_digest: str | None = None

    def selection_diff(self) -> dict[str, list[str]]:
        """The last consolidation's ``added`` / ``retained`` / ``removed`` ids (empty when
        unknown or unreadable)."""
        if not self.selection:
            return {}
        try:
            parsed = loads_bounded(self.selection)
        except ValueError:
            return {}
        if not isinstance(parsed, dict):
            return {}
        return {
            key: [str(v) for v in value] if isinstance(value, list) else []
            for key in ("added", "retained", "removed")
            for value in [parsed.get(key)]
        }


class GenerationState(BaseModel):
    """The whole ``generation_state.json``."""

    model_config = ConfigDict(extra="ignore", defer_build=True)

    version: int = STATE_VERSION
    rollouts: dict[str, RolloutState] = Field(default_factory=dict)
    phase_two: PhaseTwoState = Field(default_factory=PhaseTwoState)

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


# ---------------------------------------------------------------- parsing


def parse_state(text: str | None, path: str) -> tuple[GenerationState, list[Problem]]:
    """The state in ``text`` and the problems met (all about ``path``). Never raises."""
    if text is None or not text.strip():
        return GenerationState(), []
    try:
        data = loads_bounded(text)
    except ValueError as exc:
        return GenerationState(), [Problem(path, f"unreadable ({exc}); rebuilt from the files")]
    if not isinstance(data, dict) or not isinstance(data.get("rollouts", {}), dict):
        return GenerationState(), [Problem(path, "not a state object; rebuilt from the files")]
    problems: list[Problem] = []
    rollouts: dict[str, RolloutState] = {}
    for rid, entry in data.get("rollouts", {}).items():
        if not ROLLOUT_ID_PATTERN.fullmatch(rid):
            shown = repr(rid) if len(rid) <= 80 else repr(rid[:77]) + "..."
            problems.append(Problem(path, f"entry {shown} dropped (not a rollout id)"))
            continue
        try:
            rollouts[str(rid)] = RolloutState.model_validate(entry)
        except ValidationError as exc:
            reason = exc.errors()[0].get("msg", "invalid")
            problems.append(
                Problem(path, f"entry {rid!r} dropped ({reason}); rebuilt from the files")
            )
    try:
        phase_two = PhaseTwoState.model_validate(data.get("phase_two") or {})
    except ValidationError:
        problems.append(Problem(path, "phase_two entry dropped (wrong shape)"))
        phase_two = PhaseTwoState()
    return GenerationState(rollouts=rollouts, phase_two=phase_two), problems


async def load(
    session: SandboxSession, paths: MemoryPaths
) -> tuple[GenerationState, list[Problem]]:
    """``generation_state.json`` parsed with ``parse_state`` (an unreadable file — a
    directory, a symlink leaving the workspace — is rebuilt too)."""
    try:
        data = (await _files.read_many(session, [paths.state_json]))[paths.state_json]
    except SandboxError as exc:
        return GenerationState(), [Problem(paths.state_json, f"unreadable ({exc}); rebuilt")]
    text = None if data is None else data.decode("utf-8", "replace")
    return parse_state(text, paths.state_json)


async def save(session: SandboxSession, paths: MemoryPaths, state: GenerationState) -> None:
    await _files.write(session, paths.state_json, state_text(state.to_json()))


def state_text(data: dict[str, Any]) -> str:
    """``generation_state.json``'s text: sorted keys, one rollout entry a line (a flush
    rewrites it every second while it extracts; written entry by entry with the C encoder,
    10,000 entries take a quarter of an indented dump's time, and the file stays readable)."""
    rest = {k: v for k, v in data.items() if k != "rollouts"}
    entries = sorted(data.get("rollouts", {}).items())
    lines = ",\n".join(
        f"    {json.dumps(rid)}: {json.dumps(entry, sort_keys=True)}" for rid, entry in entries
    )
    rollouts = "{\n" + lines + "\n  }" if entries else "{}"
    head = json.dumps({**rest, "rollouts": None}, indent=2, sort_keys=True)
    return head.replace('"rollouts": null', f'"rollouts": {rollouts}', 1) + "\n"


async def load_selection(session: SandboxSession, paths: MemoryPaths) -> SavedSelection:
    """``phase_two_selection.json`` parsed (``selection.parse_selection_file``); an unreadable
    file counts as no selection, with the reason in ``problems``."""
    try:
        data = (await _files.read_many(session, [paths.selection_json]))[paths.selection_json]
    except SandboxError as exc:
        return SavedSelection([], None, {paths.selection_json: f"unreadable ({exc})"})
    return parse_selection_file(data, paths.selection_json)


def selection_copy(data: bytes | None) -> dict[str, Any]:
    """A kept copy of ``phase_two_selection.json`` (a version's, a proposal's) as the document
    to write back: parsed like the file itself; no copy is an empty selection."""
    saved = parse_selection_file(data, SELECTION_JSON)
    return selection_document(saved.refs, saved.updated_at)


async def save_selection(
    session: SandboxSession, paths: MemoryPaths, selected: list[RawMemoryRef], updated_at: str
) -> None:
    await write_json(session, paths.selection_json, selection_document(selected, updated_at))


async def load_settled(session: SandboxSession, paths: MemoryPaths) -> dict[str, Any] | None:
    """What the last flush that found nothing to do saw (``.settled.json``: derived data,
    written by the manager; ``None`` when missing or unreadable)."""
    try:
        data = (await _files.read_many(session, [paths.settled_json]))[paths.settled_json]
        value = loads_bounded(data.decode("utf-8", "replace")) if data else None
    except (SandboxError, ValueError):
        return None
    return value if isinstance(value, dict) else None


async def save_settled(
    session: SandboxSession, paths: MemoryPaths, value: dict[str, Any] | None
) -> None:
    """Write ``.settled.json`` (``None``: remove it)."""
    if value is not None:
        await write_json(session, paths.settled_json, value)
    elif await _files.exists(session, paths.settled_json):
        await _files.remove(session, paths.settled_json)


def log_line(record: dict[str, Any]) -> bytes:
    """One record of ``generation_log.jsonl`` as its line."""
    return (json.dumps(record, sort_keys=True, default=str) + "\n").encode("utf-8")


async def append_log(session: SandboxSession, paths: MemoryPaths, record: dict[str, Any]) -> None:
    """One line in ``generation_log.jsonl`` per phase run."""
    await _files.append(session, paths.log_jsonl, log_line(record))


async def read_log(
    session: SandboxSession, paths: MemoryPaths, rollouts: Collection[str] | None = None
) -> list[dict[str, Any]]:
    """The records of ``generation_log.jsonl``, oldest first (malformed lines are skipped;
    ``rollouts``: see ``parse_log``)."""
    try:
        data = (await _files.read_many(session, [paths.log_jsonl]))[paths.log_jsonl]
    except SandboxError:
        return []
    return parse_log(data or b"", rollouts)


#: how ``append_log`` writes a phase-one run and the conversations of a run
_PHASE_ONE = '"phase": "one"'
_ROLLOUTS = re.compile(r'"rollouts": \[([^\]]*)\]')
_IDS = re.compile(r'"([^"\\]*)"')


def parse_log(data: bytes, rollouts: Collection[str] | None = None) -> list[dict[str, Any]]:
    """The records of (a run of whole lines of) ``generation_log.jsonl``; malformed lines
    are skipped. ``rollouts``: the phase-one runs of other conversations are left out, told
    apart by their text before parsing (one page of 10,000 conversations does not parse the
    whole log)."""
    wanted = None if rollouts is None else set(rollouts)
    records = []
    for line in data.decode("utf-8", "replace").splitlines():
        if wanted is not None and _PHASE_ONE in line:
            named = _ROLLOUTS.search(line)
            if named is not None and not wanted.intersection(_IDS.findall(named.group(1))):
                continue
        try:
            record = loads_bounded(line)
        except ValueError:
            continue
        if isinstance(record, dict) and _well_typed(record):
            records.append(record)
    return records


#: the types of the fields readers of the log act on (a record holding another type is
#: skipped like a malformed line: ``status`` must never stop on a crafted line)
_LOG_FIELDS: dict[str, type | tuple[type, ...]] = {
    "phase": str,
    "time": str,
    "status": str,
    "error": str,
    "failure_kind": str,
    "missing": list,
    "rollouts": list,
    "duration_s": (int, float),
    "requests": int,
    "input_tokens": int,
    "output_tokens": int,
}


def _well_typed(record: dict[str, Any]) -> bool:
    return all(
        record.get(key) is None
        or (isinstance(record[key], kind) and not isinstance(record[key], bool))
        for key, kind in _LOG_FIELDS.items()
    )


# ---------------------------------------------------------------- rules


def status_of(status: RolloutStatus | None, same_version: bool, up_to_date: bool) -> RolloutStatus:
    """The status ``reconcile`` gives a rollout, from its entry's status (``None``: no entry)
    and whether the entry records the file's current version, without building the entry
    (the views count 10,000 of these)."""
    if up_to_date:
        return "done"
    if status is None or not same_version or status == "done":
        return "pending"
    return status


def reconcile(
    entry: RolloutState | None, segments: int, updated_at: str, up_to_date: bool
) -> RolloutState:
    """A rollout's state given its file: ``done`` when its raw memory is up to date; a fresh
    ``pending`` entry when the content changed since the entry was written (a new segment is
    a new chance: attempts restart); otherwise the entry as it is (its status is
    ``status_of``'s)."""
    if up_to_date:
        if (
            entry is not None
            and entry.status == "done"
            and entry.same_version(segments, updated_at)
        ):
            return entry
        return RolloutState(
            status="done",
            segments=segments,
            updated_at=updated_at,
            last_attempt_at=entry.last_attempt_at if entry else None,
        )
    if entry is None or not entry.same_version(segments, updated_at):
        return RolloutState(segments=segments, updated_at=updated_at)
    if entry.status == "done":  # the raw memory is gone or stale: extract again
        return entry.model_copy(update={"status": "pending"})
    return entry


def format_time(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def is_due(
    entry: RolloutState, now: datetime, *, retry_failed: bool = False, wait_backoff: bool = True
) -> bool:
    """Whether a flush at ``now`` extracts the rollout: ``pending`` ones whose backoff has
    passed (or every pending one when ``wait_backoff`` is off), and ``failed`` ones only with
    ``retry_failed``."""
    if entry.status in ("done", "skipped"):
        return False
    if entry.status == "failed":
        return retry_failed
    if not wait_backoff:
        return True
    retry_at = parse_time(entry.next_retry_at)
    return retry_at is None or retry_at <= now


def backoff_delay(
    failures: int, base_s: float, max_s: float, rng: random.Random | None = None
) -> float:
    """Seconds to wait after ``failures`` environment failures in a row: ``base * 2**(n-1)``,
    capped at ``max_s``, with full jitter in its upper half (so processes sharing a server
    do not retry in step)."""
    ceiling = min(max_s, base_s * 2.0 ** max(0, failures - 1))
    jitter: float = (rng or random.Random()).random()
    return ceiling * (0.5 + 0.5 * jitter)


def record_failure(
    entry: RolloutState,
    kind: FailureKind,
    error: str,
    now: datetime,
    *,
    max_attempts: int,
    backoff_s: float,
    backoff_max_s: float,
    rng: random.Random | None = None,
) -> RolloutState:
    """The entry after a failed extraction (see the module docstring)."""
    update: dict[str, Any] = {
        "last_error": error,
        "last_attempt_at": format_time(now),
        "failure_kind": kind,
    }
    if kind == "configuration":  # the settings are wrong, not the rollout: retried once fixed
        update.update(status="pending", next_retry_at=None)
    elif kind == "environment":
        failures = entry.environment_failures + 1
        delay = backoff_delay(failures, backoff_s, backoff_max_s, rng)
        update.update(
            status="pending",
            environment_failures=failures,
            next_retry_at=format_time(now + timedelta(seconds=delay)),
        )
    else:
        attempts = entry.attempts + 1
        update.update(
            attempts=attempts,
            status="failed" if attempts >= max_attempts else "pending",
            environment_failures=0,
            next_retry_at=None,
        )
    return entry.model_copy(update=update)


def record_phase_two_failure(
    previous: PhaseTwoState, kind: FailureKind, error: str, attempted_at: str
) -> PhaseTwoState:
    """The last consolidation's state after it failed: the error and its class recorded,
    environment failures in a row counted (reset by any other kind), the rest kept."""
    failures = previous.environment_failures + 1 if kind == "environment" else 0
    return previous.model_copy(
        update={
            "status": "failed",
            "last_error": error,
            "last_attempt_at": attempted_at,
            "failure_kind": kind,
            "environment_failures": failures,
        }
    )


def record_success(
    entry: RolloutState, status: RolloutStatus, segments: int, updated_at: str, now: datetime
) -> RolloutState:
    return RolloutState(
        status=status,
        attempts=0,
        segments=segments,
        updated_at=updated_at,
        last_attempt_at=format_time(now),
    )


#: HTTP statuses that mean the request's settings are wrong (key, permissions, URL or model)
CONFIGURATION_STATUSES = frozenset({401, 403, 404})
_MODEL_MISSING = re.compile(
    r"model\b.{0,120}?\b(not found|does not exist|not exist|unknown|not available|"
    r"no such|invalid model)|(unknown|invalid|unsupported) model|no model named",
    re.IGNORECASE | re.DOTALL,
)


def is_configuration_error(exc: ModelRequestError) -> bool:
    """Whether a failed model request says the settings are wrong rather than the request:
    HTTP 401/403/404, or a 4xx whose message says the model does not exist."""
    status = exc.status_code
    if status in CONFIGURATION_STATUSES:
        return True
    return status is not None and 400 <= status < 500 and bool(_MODEL_MISSING.search(str(exc)))


def classify(exc: BaseException) -> FailureKind:
    """``environment`` for failures the rollout did not cause (connection refused, DNS,
    timeouts, HTTP 408/409/429/5xx, an unreadable reply, the flush timeout),
    ``configuration`` for a wrong key, URL or model name (``is_configuration_error``),
    ``rollout`` for the rest (invalid output after retries, context too long, a refusal,
    other HTTP 4xx)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, ModelRequestError):
            if is_configuration_error(current):
                return "configuration"
            return "environment" if current.retryable else "rollout"
        if isinstance(current, SandboxError | MaxTurnsExceeded):
            return "rollout"  # the rollout's own files or the consolidation's own turns
        if isinstance(current, OSError | asyncio.TimeoutError | asyncio.CancelledError):
            return "environment"
        if isinstance(current, MemoryGenerationError) and current.__cause__ is None:
            return "rollout"
        current = current.__cause__ or current.__context__
    return "rollout"
