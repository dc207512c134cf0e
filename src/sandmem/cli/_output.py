"""Rendering: JSON, sizes, file trees, flush reports, and the progress display (on stderr)."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import logging
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)

from sandmem._usage import Usage
from sandmem.memory import FileSize
from sandmem.memory.maintenance import read_log, rollout_statuses
from sandmem.memory.manager import FlushReport, MemoryGenerationManager

if TYPE_CHECKING:
    from sandmem.cli._live import LiveView
    from sandmem.cli._models import ModelChoice

#: how often the progress display looks at ``generation_log.jsonl``
PROGRESS_POLL_S = 0.2


def stderr_console() -> Console:
    return Console(stderr=True, highlight=False)


def emit_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, ensure_ascii=False, default=str))


def human_size(size: int | None) -> str:
    if size is None:
        return "missing"
    if size < 1024:
        return f"{size} B"
    value = float(size)
    for unit in ("KB", "MB", "GB"):
        value /= 1024
        if value < 1024 or unit == "GB":
            break
    return f"{value:.1f} {unit}"


def render_tree(entries: list[FileSize]) -> list[str]:
    """Files as an indented tree (one tree per top-level directory), sizes on the right."""
    root: dict[str, Any] = {}
    for entry in entries:
        node = root
        parts = entry.path.split("/")
        for part in parts[:-1]:
            node = node.setdefault(part + "/", {})
        node[parts[-1]] = entry.bytes or 0
    lines: list[str] = []

    def walk(node: dict[str, Any], prefix: str) -> None:
        names = sorted(node)
        for index, name in enumerate(names):
            last = index == len(names) - 1
            value = node[name]
            branch = "└── " if last else "├── "
            if isinstance(value, dict):
                lines.append(f"{prefix}{branch}{name}")
                walk(value, prefix + ("    " if last else "│   "))
            else:
                lines.append(f"{prefix}{branch}{name}  {human_size(value)}")

    for top in sorted(root):
        value = root[top]
        if isinstance(value, dict):
            lines.append(top)
            walk(value, "")
        else:
            lines.append(f"{top}  {human_size(value)}")
    return lines


def usage_dict(usage: Usage) -> dict[str, int]:
    return {
        "requests": usage.requests,
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
    }


def report_dict(report: FlushReport) -> dict[str, Any]:
    """A flush report as JSON-ready data. ``not_reached``: pending rollouts the flush did not
    get to (it timed out, or another process held the lock)."""
    finished = {*report.processed, *report.skipped, *report.failed}
    return {
        "processed": sorted(report.processed),
        "skipped": sorted(report.skipped),
        "failed": dict(sorted(report.failed.items())),
        "failure_kinds": dict(sorted(report.failure_kinds.items())),
        "not_reached": [rid for rid in report.pending if rid not in finished],
        "deferred": sorted(report.deferred),
        "phase_two": report.phase_two,
        "phase_two_error": report.phase_two_error,
        "phase_two_failure_kind": report.phase_two_failure_kind,
        "phase_two_missing": list(report.phase_two_missing),
        "problems": dict(sorted(report.problems.items())),
        "timed_out": report.timed_out,
        "usage": {
            "phase_one": usage_dict(report.phase_one_usage),
            "phase_two": usage_dict(report.phase_two_usage),
        },
    }


#: consolidation outcomes that are not a failure
_PHASE_TWO_FINE = frozenset({"done", "skipped", "not_run"})


def report_incomplete(report: FlushReport) -> bool:
    return bool(incomplete_text(report))


def incomplete_text(report: FlushReport) -> str:
    """What did not complete in a flush ("" when everything did), for people."""
    problems = []
    if report.failed:
        problems.append(f"{len(report.failed)} conversation(s) failed: {', '.join(report.failed)}")
    if report.phase_two == "incomplete":
        missing = ", ".join(report.phase_two_missing)
        problems.append(f"consolidation incomplete (what was written is kept; pending: {missing})")
    elif report.phase_two not in _PHASE_TWO_FINE:
        problems.append(f"consolidation {report.phase_two} (previous memory kept)")
    if report.timed_out:
        problems.append("generation timed out")
    return ", ".join(problems)


_PHASE_TWO_TEXT = {
    "done": "consolidated",
    "skipped": "nothing new to consolidate",
    "failed": "consolidation failed (previous memory kept)",
    "incomplete": "consolidation incomplete (what was written is kept)",
    "not_run": "consolidation not run",
}


def report_lines(report: FlushReport) -> list[str]:
    """A flush report for people: one line per rollout, then the consolidation and tokens."""
    data = report_dict(report)
    lines = [f"  ✓ {rid}: extracted" for rid in data["processed"]]
    lines += [f"  - {rid}: skipped (nothing worth remembering)" for rid in data["skipped"]]
    lines += [
        f"  ✗ {rid}: {error}" + _kind_note(data["failure_kinds"].get(rid))
        for rid, error in data["failed"].items()
    ]
    lines += [f"  … {rid}: not reached, still pending" for rid in data["not_reached"]]
    lines += [f"  … {rid}: waiting to retry after a server problem" for rid in data["deferred"]]
    lines += [f"  ! {path}: left out: {reason}" for path, reason in data["problems"].items()]
    if not lines:
        lines.append("  no pending conversations")
    phase_two = _PHASE_TWO_TEXT.get(report.phase_two, report.phase_two)
    if report.phase_two_error:
        phase_two += f": {report.phase_two_error}"
    lines.append(f"  {phase_two}")
    if report.phase_two_missing:
        lines.append("  pending for the next consolidation: " + ", ".join(report.phase_two_missing))
    if report.timed_out:
        lines.append("  generation timed out; unfinished conversations stay pending")
    one, two = report.phase_one_usage, report.phase_two_usage
    if one.requests or two.requests or one.total_tokens or two.total_tokens:
        lines.append(
            f"  tokens: phase one {one.input_tokens:,} in / {one.output_tokens:,} out, "
            f"phase two {two.input_tokens:,} in / {two.output_tokens:,} out"
        )
    return lines


def _kind_note(kind: str | None) -> str:
    if kind == "environment":
        return " (server problem: no attempt used, retried later)"
    return ""


async def _phase_one_done(manager: MemoryGenerationManager, since: int) -> int:
    records = await read_log(manager.session, manager.paths)
    return sum(1 for record in records[since:] if record.get("phase") == "one")


async def flush_with_progress(
    manager: MemoryGenerationManager,
    console: Console,
    *,
    retry_failed: bool = False,
    wait_backoff: bool = True,
) -> FlushReport:
    """``manager.flush()`` with a progress bar on ``console`` (only when it is a terminal):
    one step per pending conversation (counted from ``generation_log.jsonl`` as phase one
    writes it), then a spinner while phase two consolidates."""
    if not console.is_terminal:
        return await manager.flush(retry_failed=retry_failed, wait_backoff=wait_backoff)
    session, paths = manager.session, manager.paths
    wanted = {"pending", "failed"} if retry_failed else {"pending"}
    todo = sum(row["status"] in wanted for row in await rollout_statuses(session, paths))
    since = len(await read_log(session, paths))
    columns = (
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console, transient=True) as progress:
        task = progress.add_task("memory: extracting conversations", total=todo)
        flushing = asyncio.ensure_future(
            manager.flush(retry_failed=retry_failed, wait_backoff=wait_backoff)
        )
        try:
            while not flushing.done():
                await asyncio.wait({flushing}, timeout=PROGRESS_POLL_S)
                done = min(await _phase_one_done(manager, since), todo)
                progress.update(task, completed=done)
                if done >= todo:
                    progress.update(task, description="memory: consolidating")
        finally:
            if not flushing.done():
                flushing.cancel()
        return flushing.result()


def one_line(text: str) -> str:
    return " ".join(text.split())


class OneLineWarnings(logging.Handler):
    """Renders sandmem's log records of level WARNING and above as one readable line on the
    current stderr (``warning: ...``), the exception (if any) folded into the same line."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = one_line(record.getMessage())
            if record.exc_info and record.exc_info[1] is not None:
                exc = record.exc_info[1]
                text += f": {type(exc).__name__}: {one_line(str(exc))}"
            level = "warning" if record.levelno < logging.ERROR else "error"
            click.echo(f"sandmem {level}: {text}", err=True)
        except Exception:  # pragma: no cover - logging must never break the command
            self.handleError(record)


@contextlib.contextmanager
def readable_warnings() -> Iterator[None]:
    """While a command runs, sandmem's warnings are one readable line each (no raw log lines,
    no tracebacks); the logger is restored afterwards."""
    logger = logging.getLogger("sandmem")
    if any(isinstance(h, OneLineWarnings) for h in logger.handlers):
        yield  # already on (``sandmem demo`` inside the ``sandmem`` group)
        return
    handler = OneLineWarnings()
    saved = logger.propagate
    logger.addHandler(handler)
    logger.propagate = False
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.propagate = saved


class Out:
    """Where a command's output goes: the answer and data on stdout, everything else on
    stderr; ``quiet`` keeps only the answer and errors; ``as_json`` prints one JSON event per
    line on stdout instead. ``click.echo`` flushes each write, so a pipe sees every line at
    once."""

    def __init__(self, *, quiet: bool = False, as_json: bool = False) -> None:
        self.quiet = quiet
        self.as_json = as_json

    def event(self, data: dict[str, Any]) -> None:
        click.echo(json.dumps(data, ensure_ascii=False, default=str))

    def note(self, text: str) -> None:
        if not (self.quiet or self.as_json):
            click.echo(text, err=True)

    def start(self, models: ModelChoice, rollout_id: str, workspace: Path, *, memory: bool) -> None:
        if self.as_json:
            self.event(
                {
                    "type": "start",
                    "rollout_id": rollout_id,
                    "workspace": str(workspace.resolve()),
                    "agent_model": models.agent,
                    "memory_model": models.memory_text() if memory else None,
                }
            )
        self.note(f"sandmem: {models.describe(memory=memory)}")

    def answer(self, event: dict[str, Any], result: Any) -> None:
        if self.as_json:
            self.event(event)
        elif result is not None:
            click.echo(str(result.final_output))

    def live_view(self) -> LiveView:
        from sandmem.cli._live import LiveView

        return LiveView(
            text=not self.quiet,
            tools=not self.quiet,
            spinner=not self.quiet and sys.stderr.isatty(),
            as_json=self.as_json,
        )

    def progress_console(self) -> Console:
        if self.quiet or self.as_json:
            return Console(file=io.StringIO(), stderr=False)
        return stderr_console()

    def memory_report(self, report: FlushReport, memories_dir: str) -> None:
        if self.as_json:
            self.event({"type": "memory", **report_dict(report)})
            return
        self.note(f"memory ({memories_dir}/):")
        for line in report_lines(report):
            self.note(line)

    def interrupted(self, text: str) -> None:
        if self.as_json:
            self.event({"type": "interrupted", "message": text})
        click.echo(text, err=True)

    def finish(self, problems: list[str]) -> None:
        if self.as_json:
            self.event({"type": "end", "exit_code": 1 if problems else 0, "problems": problems})
        for problem in problems:
            click.echo(f"Error: {problem}", err=True)
