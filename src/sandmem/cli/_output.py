"""Rendering: JSON, sizes, file trees, generation reports, and the progress display (on
stderr)."""

from __future__ import annotations

import contextlib
import io
import json
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.console import Console
from rich.progress import (
    BarColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)

from sandmem._errors import MemoryGenerationError
from sandmem._log_lines import OneLineWarnings as OneLineWarnings
from sandmem._log_lines import human_size as human_size
from sandmem._log_lines import one_line as one_line
from sandmem._log_lines import readable_warnings as readable_warnings
from sandmem._terminal import json_text, raw
from sandmem._usage import Usage
from sandmem.memory import GenerationProgress, GenerationReport

if TYPE_CHECKING:
    from sandmem.cli._live import LiveView
    from sandmem.cli._models import ModelChoice


def stderr_console() -> Console:
    """The console the CLI draws on (progress bars): the terminal itself, not the sanitised
    stream data goes through (``_terminal``); what it shows is the CLI's own text."""
    return Console(file=raw(sys.stderr), highlight=False)


def emit_json(data: Any) -> None:
    click.echo(json_text(json.dumps(data, indent=2, ensure_ascii=False, default=str)))


def usage_dict(usage: Usage) -> dict[str, int]:
    return {
        "requests": usage.requests,
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
    }


_PHASE_TWO_TEXT = {
    "done": "consolidated",
    "skipped": "nothing new to consolidate",
    "failed": "consolidation failed (previous memory kept)",
    "incomplete": "consolidation incomplete (what was written is kept)",
    "fallback": "consolidated by the extractive engine (the model's consolidation failed)",
    "not_run": "consolidation not run",
    "proposed": "consolidation proposed for review (memory unchanged): `sandmem memory inbox`",
}


def report_lines(report: GenerationReport) -> list[str]:
    """A generation report for people (every command prints it this way): one line per
    conversation, then the consolidation and the tokens."""
    lines = [f"  ✓ {rid}: extracted" for rid in report.processed]
    lines += [f"  - {rid}: skipped (nothing worth remembering)" for rid in report.skipped]
    settings = [r for r in report.failed if report.failure_kinds.get(r) == "configuration"]
    lines += [
        f"  ✗ {rid}: {error}" + _kind_note(report.failure_kinds.get(rid))
        for rid, error in report.failed.items()
        if rid not in settings
    ]
    if settings:  # one cause for all of them: said once, with what to fix
        lines.append(
            f"  ✗ {len(settings)} conversation(s) not extracted: the model server refused the "
            f"memory model's settings: {report.failed[settings[0]]} (no attempt used: they "
            "stay pending until the key, URL or model name is fixed)"
        )
    lines += [f"  … {rid}: not reached, still pending" for rid in report.not_reached]
    lines += [f"  … {rid}: waiting to retry after a server problem" for rid in report.deferred]
    lines += [f"  ! {path}: left out: {reason}" for path, reason in report.problems.items()]
    if not lines:
        lines.append("  no pending conversations")
    phase_two = _PHASE_TWO_TEXT.get(report.phase_two, report.phase_two)
    if report.phase_two_error:
        phase_two += f": {report.phase_two_error}"
    lines.append(f"  {phase_two}")
    if report.phase_two_missing:
        missing = ", ".join(report.phase_two_missing)
        lines.append(f"  pending for the next consolidation: {missing}")
    if report.timed_out:
        lines.append("  generation timed out; unfinished conversations stay pending")
    one, two = report.usage.phase_one, report.usage.phase_two
    if one.requests or two.requests or one.input_tokens or two.input_tokens:
        lines.append(
            f"  tokens: phase one {one.input_tokens:,} in / {one.output_tokens:,} out, "
            f"phase two {two.input_tokens:,} in / {two.output_tokens:,} out"
        )
    return lines


def _kind_note(kind: str | None) -> str:
    if kind == "environment":
        return " (server problem: no attempt used, retried later)"
    return ""


def incomplete_text(report: GenerationReport) -> str:
    """What did not complete in a generation ("" when ``report.complete``), for people."""
    if report.complete:
        return ""
    problems = []
    settings = [r for r in report.failed if report.failure_kinds.get(r) == "configuration"]
    failed = [r for r in report.failed if r not in settings]
    if failed:
        problems.append(f"{len(failed)} conversation(s) failed: {', '.join(failed)}")
    if settings:
        problems.append(
            f"{len(settings)} conversation(s) not extracted: the model server refused the "
            "memory model's settings (fix the key, OPENAI_BASE_URL or the model name: --model "
            "/ SANDMEM_MEMORY_MODEL)"
        )
    if report.phase_two == "incomplete":
        missing = ", ".join(report.phase_two_missing)
        problems.append(f"consolidation incomplete (what was written is kept; pending: {missing})")
    elif report.phase_two == "fallback":
        problems.append(
            "the model's consolidation failed (memory was consolidated by the extractive "
            "engine instead; the model is tried again next time)"
        )
    elif report.phase_two not in ("done", "skipped"):
        problems.append(f"consolidation {report.phase_two} (previous memory kept)")
    if report.timed_out:
        problems.append("generation timed out")
    return ", ".join(problems)


def incomplete_error(report: GenerationReport) -> MemoryGenerationError:
    """The error of a memory command whose generation did not complete."""
    return MemoryGenerationError(
        f"memory generation incomplete: {incomplete_text(report)}; see `sandmem memory "
        "status`, then run `sandmem memory generate` again"
    )


@contextlib.contextmanager
def progress_display(
    console: Console,
) -> Iterator[Callable[[GenerationProgress], None] | None]:
    """A progress callback for ``sandmem.memory.generate``. On a terminal it draws a bar on
    ``console``: one step per conversation extracted (``1/3``), then a pulsing bar while phase
    two consolidates. Elsewhere (a pipe, a log) it prints a heartbeat line every
    ``HEARTBEAT_S`` seconds that one step lasts."""
    if not console.is_terminal:
        yield _progress_lines(console)
        return
    columns = (
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.fields[count]}"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console, transient=True) as bar:
        task = bar.add_task("memory: starting", total=None, count="")

        def update(step: GenerationProgress) -> None:
            if step.phase == "consolidating":
                bar.update(task, total=None, description="memory: consolidating", count="")
                return
            bar.update(
                task,
                total=step.total,
                completed=step.extracted,
                description="memory: extracting conversations",
                count=f"{step.extracted}/{step.total}",
            )

        yield update


def _progress_lines(console: Console) -> Callable[[GenerationProgress], None]:
    from sandmem.cli._live import HEARTBEAT_S

    seen: dict[str, Any] = {"step": None, "since": 0.0, "due": HEARTBEAT_S}

    def update(step: GenerationProgress) -> None:
        key = (step.phase, step.extracted)
        now = time.monotonic()
        what = (
            "consolidating"
            if step.phase == "consolidating"
            else f"extracting conversations ({step.extracted}/{step.total})"
        )
        if key != seen["step"]:
            seen.update(step=key, since=now, due=HEARTBEAT_S)
        elif now - seen["since"] >= seen["due"]:
            seen["due"] += HEARTBEAT_S
            console.print(
                f"… memory: still {what} ({now - seen['since']:.0f} s)",
                highlight=False,
                soft_wrap=True,
            )

    return update


class Out:
    """Where a command's output goes: the answer and data on stdout, everything else on
    stderr; ``quiet`` keeps only the answer and errors; ``as_json`` prints one JSON event per
    line on stdout instead. ``click.echo`` flushes each write, so a pipe sees every line at
    once."""

    def __init__(self, *, quiet: bool = False, as_json: bool = False) -> None:
        self.quiet = quiet
        self.as_json = as_json
        self._printed: set[str] = set()

    def event(self, data: dict[str, Any]) -> None:
        click.echo(json_text(json.dumps(data, ensure_ascii=False, default=str)))

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
            heartbeat=not self.quiet and not sys.stderr.isatty(),
            as_json=self.as_json,
        )

    def progress_console(self) -> Console:
        if self.quiet or self.as_json:
            return Console(file=io.StringIO(), stderr=False)
        return stderr_console()

    def memory_report(self, report: GenerationReport, memories_dir: str) -> None:
        if self.as_json:
            self.event({"type": "memory", **report.model_dump(mode="json")})
            return
        self.note(f"memory ({memories_dir}/):")
        for line in report_lines(report):
            self.note(line)

    def interrupted(self, text: str) -> None:
        if self.as_json:
            self.event({"type": "interrupted", "message": text})
        click.echo(text, err=True)

    def error(self, problem: str) -> None:
        """Print one problem now (``Error: ...`` on stderr); ``finish`` does not repeat it."""
        self._printed.add(problem)
        click.echo(f"Error: {problem}", err=True)

    def finish(self, problems: list[str]) -> None:
        if self.as_json:
            self.event({"type": "end", "exit_code": 1 if problems else 0, "problems": problems})
        for problem in problems:
            if problem not in self._printed:
                click.echo(f"Error: {problem}", err=True)
