"""The record of one flush: its report, its log lines, its state writes and its problems.

``FlushReport`` is what a flush returns. ``FlushRecord`` is what the flush's steps write
through: a problem is reported once by path (``state.Problem``: no string is split again),
each finished step appends a line to ``generation_log.jsonl``, and ``generation_state.json`` is
rewritten at most every ``STATE_WRITE_INTERVAL_S`` while phase one runs (``StateWrites``, one
per manager so the interval holds across flushes) and whenever a step forces it.
``record_timeout`` records what a flush cut short by ``flush_timeout_s`` left unfinished.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sandmem._errors import SandboxError
from sandmem._usage import Usage
from sandmem.memory import _files
from sandmem.memory import state as gen_state
from sandmem.memory._records import Problem
from sandmem.memory.config import MemoryGenerateConfig
from sandmem.memory.layout import MemoryPaths
from sandmem.memory.rollouts import utc_now
from sandmem.memory.state import FailureKind, GenerationState, PhaseTwoStatus, append_log
from sandmem.redaction import Redactor
from sandmem.sandboxes._session import SandboxSession

logger = logging.getLogger("sandmem.memory")

#: during phase one the state file is rewritten at most this often (and once at the end)
STATE_WRITE_INTERVAL_S = 1.0


@dataclass
class FlushReport:
    """What one flush did. ``failed`` maps rollout ids to their error (``failure_kinds`` to
    ``environment`` or ``rollout``); ``pending`` lists the rollouts this flush set out to
    extract; ``deferred`` the pending ones it left for later (their retry time after an
    environment failure has not come). ``phase_two`` is ``incomplete`` when the consolidation
    was committed but left out ``phase_two_missing``. ``problems`` maps each file left out
    (bad input) to the reason."""

    processed: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    failure_kinds: dict[str, FailureKind] = field(default_factory=dict)
    pending: list[str] = field(default_factory=list)
    deferred: list[str] = field(default_factory=list)
    phase_two: PhaseTwoStatus = "not_run"
    phase_two_error: str | None = None
    phase_two_failure_kind: FailureKind | None = None
    phase_two_missing: list[str] = field(default_factory=list)
    problems: dict[str, str] = field(default_factory=dict)
    phase_one_usage: Usage = field(default_factory=Usage)
    phase_two_usage: Usage = field(default_factory=Usage)
    timed_out: bool = False


def usage_fields(usage: Usage) -> dict[str, int]:
    """A log line's request and token counts."""
    return {
        "requests": usage.requests,
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
    }


class StateWrites:
    """One layout's state-file writes, throttled (see ``FlushRecord.save``)."""

    def __init__(self) -> None:
        self.lock = asyncio.Lock()
        self.written_at = 0.0


class FlushRecord:
    """Where one flush's steps record what they did (see the module docstring)."""

    def __init__(
        self,
        session: SandboxSession,
        paths: MemoryPaths,
        config: MemoryGenerateConfig,
        redactor: Redactor,
        writes: StateWrites,
    ) -> None:
        self.session = session
        self.paths = paths
        self.config = config
        self.redactor = redactor
        self.report = FlushReport()
        self._writes = writes
        #: requests of extractions cancelled by the flush timeout (logged by record_timeout)
        self.unlogged = Usage()
        #: whether phase two started the consolidation (a timeout from then on cuts it short,
        #: even before its first request returns)
        self.consolidating = False

    def problem(self, problem: Problem) -> None:
        """A file left out: logged the first time, reported by path."""
        if problem.path not in self.report.problems:
            logger.warning("memory: %s left out: %s", problem.path, problem.reason)
        self.report.problems[problem.path] = problem.reason

    def problems(self, problems: Iterable[Problem]) -> None:
        for problem in problems:
            self.problem(problem)

    def note(self, problem: Problem) -> None:
        """A repair (the journal's recovery): reported, the first reason kept, not logged."""
        self.report.problems.setdefault(problem.path, problem.reason)

    def failure(
        self, entry: gen_state.RolloutState, kind: FailureKind, error: str
    ) -> gen_state.RolloutState:
        """``entry`` after a failed extraction, with the configured attempts and backoff."""
        return gen_state.record_failure(
            entry,
            kind,
            error,
            datetime.now(UTC),
            max_attempts=self.config.max_attempts,
            backoff_s=self.config.retry_backoff_s,
            backoff_max_s=self.config.retry_backoff_max_s,
            rng=random.Random(),
        )

    async def save_state(self, state: GenerationState) -> None:
        async with self._writes.lock:
            await gen_state.save(self.session, self.paths, state)
            self._writes.written_at = time.monotonic()

    async def save(self, state: GenerationState, log: dict[str, Any], *, force: bool) -> None:
        """Append a log record, and write the state file when ``force`` or when the last write
        is older than ``STATE_WRITE_INTERVAL_S`` (a flush over many rollouts would otherwise
        rewrite a growing file after each one). The log and the raw memory headers are the
        record of what was done; the state file adds attempts, errors and retry times."""
        async with self._writes.lock:
            await append_log(self.session, self.paths, {"time": utc_now(), **log})
            now = time.monotonic()
            if force or now - self._writes.written_at >= STATE_WRITE_INTERVAL_S:
                await gen_state.save(self.session, self.paths, state)
                self._writes.written_at = now

    async def save_forced(self, state: GenerationState, log: dict[str, Any]) -> None:
        await self.save(state, log, force=True)

    async def log_problems(self) -> None:
        """The files this flush left out, as one ``check`` line of the log."""
        if self.report.problems:
            await append_log(
                self.session,
                self.paths,
                {"time": utc_now(), "phase": "check", "problems": self.report.problems},
            )

    async def memory_bytes(self) -> int:
        """``MEMORY.md`` + ``memory_summary.md`` as consolidated (the viewer's size chart)."""
        paths = [self.paths.memory_md, self.paths.summary_md]
        found = await _files.stat_many(self.session, paths)
        return sum(stat.size for stat in found.values() if stat is not None)


async def record_timeout(record: FlushRecord) -> None:
    """After ``flush_timeout_s``: the rollouts the flush did not finish are environment
    failures (pending, a retry time, no attempt used), and so is a consolidation it cut
    short; the requests they made are logged. Best effort: skipped when another process
    holds the lock."""
    report, session, paths = record.report, record.session, record.paths
    finished = {*report.processed, *report.skipped, *report.failed}
    unfinished = [rid for rid in report.pending if rid not in finished]
    error = f"memory flush timed out after {record.config.flush_timeout_s}s"
    for rid in unfinished:
        report.failed[rid] = error
        report.failure_kinds[rid] = "environment"
    cut_short = report.phase_two == "not_run" and (
        record.consolidating or report.phase_two_usage.requests > 0
    )
    if cut_short:
        report.phase_two, report.phase_two_error = "failed", error
        report.phase_two_failure_kind = "environment"
    base = {"time": utc_now(), "status": "pending", "error": error}
    records = []
    if unfinished:
        records.append(
            {**base, "phase": "one", "rollouts": unfinished, **usage_fields(record.unlogged)}
        )
    if cut_short:
        two = {**base, "phase": "two", "status": "failed", **usage_fields(report.phase_two_usage)}
        records.append(two)
    try:
        async with _files.lock(session, paths.lock, timeout=1.0):
            state, _ = await gen_state.load(session, paths)
            for rid in unfinished:
                if rid in state.rollouts:
                    state.rollouts[rid] = record.failure(state.rollouts[rid], "environment", error)
            if cut_short:
                state.phase_two = gen_state.record_phase_two_failure(
                    state.phase_two, "environment", error, base["time"]
                )
            await gen_state.save(session, paths, state)
            for line in records:
                await append_log(session, paths, {**line, "failure_kind": "environment"})
    except (SandboxError, OSError) as exc:
        logger.warning("could not record the flush timeout: %s", exc)
