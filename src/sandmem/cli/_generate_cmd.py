"""``sandmem memory generate`` and ``sandmem memory forget``: change a workspace's memory
without an agent run, through the public memory API (``sandmem.memory.generate`` and
``forget``)."""

from __future__ import annotations

from pathlib import Path

import click

from sandmem.cli._common import (
    emit_model,
    engine_note,
    engine_options,
    flush_timeout_option,
    layout_config,
    layout_options,
    memory_command_config,
    review_option,
    run_async,
    workspace_option,
)
from sandmem.cli._output import (
    incomplete_error,
    progress_display,
    report_lines,
    stderr_console,
)
from sandmem.memory import ForgetResult, MemoryLayoutConfig, forget, generate


@click.command("generate")
@workspace_option(required=False)
@layout_options
@engine_options
@review_option
@click.option(
    "--retry-failed",
    is_flag=True,
    help="Also retry conversations that failed max_attempts times (their attempts restart).",
)
@flush_timeout_option("this generation")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def generate_command(
    workspace: Path,
    memories_dir: str,
    sessions_dir: str,
    engine: str,
    model: str | None,
    review: bool,
    retry_failed: bool,
    flush_timeout: float | None,
    as_json: bool,
) -> None:
    """Generate memory now (phase one, then consolidation).

    Runs phase one for every pending conversation, then consolidates: for batch or cron
    use, without an agent run. Exits 1 when a conversation or the consolidation failed
    (they stay pending and are retried next time).
    """
    layout = layout_config(memories_dir, sessions_dir)
    update: dict[str, object] = {"review": review}
    if flush_timeout is not None:
        update["flush_timeout_s"] = flush_timeout
    config = memory_command_config(engine, model, workspace).model_copy(update=update)
    with progress_display(stderr_console()) as progress:
        report = run_async(
            generate(
                workspace,
                layout=layout,
                config=config,
                retry_failed=retry_failed,
                progress=progress,
            )
        )
    if as_json:
        emit_model(report)
    else:
        click.echo(f"memory ({layout.memories_dir}/):")
        for line in report_lines(report):
            click.echo(line)
    if not report.complete:
        raise incomplete_error(report)


def _undo_command(
    workspace: Path, rollout_id: str, layout: MemoryLayoutConfig, as_json: bool
) -> None:
    result = run_async(forget(workspace, rollout_id, undo=True, layout=layout))
    if as_json:
        emit_model(result)
    elif result.undone:
        click.echo(f"{rollout_id} is no longer forgotten: the next ingest records it again")
    else:
        click.echo(f"{rollout_id} was not forgotten: nothing to undo", err=True)


def _forget_lines(result: ForgetResult, engine: str = "") -> list[str]:
    verb = "would remove" if result.dry_run else "removed"
    lines = [f"  {verb} {path}" for path in result.removed]
    if result.state_entry:
        lines.append(f"  {verb} its entry in generation_state.json")
    if result.clears_memory:
        lines.append(
            f"  {'would empty' if result.dry_run else 'emptied'} MEMORY.md and "
            "memory_summary.md (it was the last conversation in memory)"
        )
    elif result.dry_run:
        lines.append("  then re-consolidate MEMORY.md and memory_summary.md without it")
        if engine:
            lines.append(f"  ({engine})")
    return lines


def _confirm(plan: ForgetResult) -> None:
    """List what will go and ask; anything but yes (or no answer at all) stops here."""
    click.echo(f"forget {plan.rollout_id}:", err=True)
    for line in _forget_lines(plan):
        click.echo(line, err=True)
    try:
        confirmed = click.confirm("Forget this conversation?", err=True)
    except click.Abort:  # end of input: nobody to answer
        confirmed = False
    if not confirmed:
        raise click.ClickException(
            f"not forgotten: {plan.rollout_id} is unchanged (answer y, or pass --yes to "
            "skip the question)"
        )


@click.command("forget")
@workspace_option(required=False)
@layout_options
@engine_options
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@click.option("--dry-run", is_flag=True, help="Show what would be removed; change nothing.")
@click.option(
    "--undo",
    is_flag=True,
    help="Let a forgotten conversation be ingested again (what was deleted stays deleted).",
)
@click.option("--json", "as_json", is_flag=True, help="Print what was done as JSON.")
@click.argument("rollout_id")
def forget_command(
    workspace: Path,
    memories_dir: str,
    sessions_dir: str,
    engine: str,
    model: str | None,
    yes: bool,
    dry_run: bool,
    undo: bool,
    as_json: bool,
    rollout_id: str,
) -> None:
    """Forget one conversation and re-consolidate.

    Deletes the rollout file of ROLLOUT_ID, its raw memory, rollout summary and generation
    state, then consolidates again so MEMORY.md and memory_summary.md drop what only it
    supported (pending conversations are extracted in the same pass). If it was the last
    conversation in memory, MEMORY.md and memory_summary.md are emptied; skills are kept.

    Asks for confirmation first, listing what will go (--yes skips the question; without a
    terminal to ask on, pass --yes). --dry-run only lists it.

    The conversation stays forgotten: `sandmem memory ingest` (and its hooks and --watch)
    skip it from then on. --undo lifts that, so the next ingest records it anew.
    """
    layout = layout_config(memories_dir, sessions_dir)
    if undo:
        _undo_command(workspace, rollout_id, layout, as_json)
        return
    plan = run_async(forget(workspace, rollout_id, dry_run=True, layout=layout))
    if dry_run:
        if as_json:
            emit_model(plan)
            return
        click.echo(f"forget {plan.rollout_id} (dry run, nothing changed):")
        for line in _forget_lines(plan, engine_note(engine, model, workspace)):
            click.echo(line)
        return
    config = memory_command_config(engine, model, workspace)
    if not yes:
        _confirm(plan)
    console = stderr_console()
    if console.is_terminal:
        with console.status("forgetting and re-consolidating memory"):
            result = run_async(forget(workspace, rollout_id, layout=layout, config=config))
    else:
        result = run_async(forget(workspace, rollout_id, layout=layout, config=config))
    assert result.report is not None
    if as_json:
        emit_model(result)
    else:
        click.echo(f"forgot {result.rollout_id}:")
        for line in _forget_lines(result):
            click.echo(line)
        for line in report_lines(result.report):
            click.echo(line)
    if not result.report.complete:
        raise incomplete_error(result.report)
