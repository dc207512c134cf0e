"""``sandmem memory generate`` and ``sandmem memory forget``: change a workspace's memory
without an agent run."""

from __future__ import annotations

from pathlib import Path

import click

from sandmem._errors import MemoryGenerationError
from sandmem.cli._common import (
    command_manager,
    engine_options,
    generate_config,
    layout_options,
    layout_paths,
    open_workspace,
    require_layout,
    run_async,
    workspace_option,
)
from sandmem.cli._output import (
    emit_json,
    flush_with_progress,
    report_dict,
    report_incomplete,
    report_lines,
    stderr_console,
)
from sandmem.memory.config import MemoryGenerateConfig
from sandmem.memory.maintenance import ForgetResult, forget_rollout
from sandmem.memory.manager import FlushReport
from sandmem.memory.storage import MemoryPaths


def _incomplete_error(report: FlushReport) -> MemoryGenerationError:
    problems = [f"{len(report.failed)} conversation(s) failed"] if report.failed else []
    if report.phase_two == "failed":
        problems.append("consolidation failed")
    if report.timed_out:
        problems.append("generation timed out")
    return MemoryGenerationError(
        "memory generation incomplete: "
        + ", ".join(problems)
        + "; see `sandmem memory status`, then run `sandmem memory generate` again"
    )


async def _generate(
    workspace: Path, paths: MemoryPaths, config: MemoryGenerateConfig, retry_failed: bool
) -> FlushReport:
    async with open_workspace(workspace) as session:
        await require_layout(session, paths)
        manager = command_manager(session, paths, config)
        return await flush_with_progress(manager, stderr_console(), retry_failed=retry_failed)


@click.command("generate")
@workspace_option(required=False)
@layout_options
@engine_options
@click.option(
    "--retry-failed",
    is_flag=True,
    help="Also retry conversations that failed max_attempts times (their attempts restart).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def generate_command(
    workspace: Path,
    memories_dir: str,
    sessions_dir: str,
    engine: str,
    model: str | None,
    retry_failed: bool,
    as_json: bool,
) -> None:
    """Generate memory now (phase one, then consolidation).

    Runs phase one for every pending conversation, then consolidates: for batch or cron
    use, without an agent run. Exits 1 when a conversation or the consolidation failed
    (they stay pending and are retried next time).
    """
    paths = layout_paths(memories_dir, sessions_dir)
    config = generate_config(engine, model)
    report = run_async(_generate(workspace, paths, config, retry_failed))
    if as_json:
        emit_json(report_dict(report))
    else:
        click.echo(f"memory ({paths.memories_dir}/):")
        for line in report_lines(report):
            click.echo(line)
    if report_incomplete(report):
        raise _incomplete_error(report)


async def _forget(
    workspace: Path, paths: MemoryPaths, config: MemoryGenerateConfig, rollout_id: str
) -> ForgetResult:
    async with open_workspace(workspace) as session:
        await require_layout(session, paths)
        command_manager(session, paths, config)
        console = stderr_console()
        if not console.is_terminal:
            return await forget_rollout(session, paths, rollout_id, config)
        with console.status("forgetting and re-consolidating memory"):
            return await forget_rollout(session, paths, rollout_id, config)


@click.command("forget")
@workspace_option(required=False)
@layout_options
@engine_options
@click.option("--json", "as_json", is_flag=True, help="Print what was done as JSON.")
@click.argument("rollout_id")
def forget_command(
    workspace: Path,
    memories_dir: str,
    sessions_dir: str,
    engine: str,
    model: str | None,
    as_json: bool,
    rollout_id: str,
) -> None:
    """Forget one conversation and re-consolidate.

    Deletes the rollout file of ROLLOUT_ID, its raw memory, rollout summary and generation
    state, then consolidates again so MEMORY.md and memory_summary.md drop what only it supported
    (pending conversations are extracted in the same pass). If it was the last
    conversation in memory, MEMORY.md and memory_summary.md are emptied; skills are kept.
    """
    paths = layout_paths(memories_dir, sessions_dir)
    config = generate_config(engine, model)
    result = run_async(_forget(workspace, paths, config, rollout_id))
    report = result.report
    if as_json:
        emit_json(
            {"rollout_id": result.rollout_id, "removed": result.removed, **report_dict(report)}
        )
    else:
        click.echo(f"forgot {result.rollout_id}:")
        for path in result.removed:
            click.echo(f"  removed {path}")
        for line in report_lines(report):
            click.echo(line)
    if report_incomplete(report):
        raise _incomplete_error(report)
