"""``sandmem memory log / diff / restore / redact-history / inbox / approve / dismiss``: the
history and the review inbox of a workspace's memory, through the public memory API
(``sandmem.memory.log`` and the rest; see ``docs/history.md``). With ``--store`` (distributed
mode) the commands that read or change versions sync with the store's history first, so
``log`` on any host shows the versions workers and other hosts made."""

from __future__ import annotations

import re
from pathlib import Path

import click

from sandmem.cli._common import (
    emit_model,
    layout_config,
    layout_options,
    run_async,
    store_layout,
    store_options,
    workspace_option,
)
from sandmem.memory import (
    ProposalInfo,
    VersionInfo,
    approve,
    diff,
    dismiss,
    inbox,
    log,
    redact_history,
    restore,
)


def version_line(v: VersionInfo) -> str:
    """``12  2026-12-01 21:30  consolidation  extractive  +a,b -c  run=... changed: ...``"""
    parts = [f"{v.version:>4}", v.time[:16].replace("T", " "), v.kind]
    if v.model:
        parts.append(v.model if v.engine != "extractive" else "extractive")
    if v.rollouts_added or v.rollouts_removed:
        moved = [f"+{r}" for r in v.rollouts_added] + [f"-{r}" for r in v.rollouts_removed]
        parts.append(" ".join(moved))
    for label, value in (
        ("run", v.run),
        ("by", v.client),
        ("proposal", v.proposal),
        ("from", v.restored_from),
    ):
        if value is not None:
            parts.append(f"{label}={value}")
    if v.redacted:
        parts.append("(redacted)")
    if v.changed:
        parts.append("changed: " + ", ".join(v.changed))
    return "  ".join(parts)


@click.command("log")
@workspace_option(required=False)
@layout_options
@store_options
@click.option("-n", "--limit", type=int, default=None, help="Show at most N versions.")
@click.option("--json", "as_json", is_flag=True, help="Print the versions as JSON.")
def log_command(
    workspace: Path,
    memories_dir: str,
    sessions_dir: str,
    store_url: str | None,
    endpoint_url: str | None,
    limit: int | None,
    as_json: bool,
) -> None:
    """List the versions of memory, newest first.

    One line each: the version number, when (UTC), what made it (consolidation, live_edit,
    hand_edit, forget, ingest, mcp_write, restore), the model, the conversations folded in
    (+) or dropped (-), the run or client, and the files changed.
    """
    layout = store_layout(memories_dir, sessions_dir, store_url, endpoint_url)
    versions = run_async(log(workspace, layout=layout, limit=limit))
    if as_json:
        emit_model(versions)
        return
    if not versions:
        click.echo("no memory versions yet", err=True)
    for version in versions:
        click.echo(version_line(version))


@click.command("diff")
@workspace_option(required=False)
@layout_options
@store_options
@click.argument("old", required=False)
@click.argument("new", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print the diff as JSON.")
def diff_command(
    workspace: Path,
    memories_dir: str,
    sessions_dir: str,
    store_url: str | None,
    endpoint_url: str | None,
    old: str | None,
    new: str | None,
    as_json: bool,
) -> None:
    """Show a unified diff between two versions.

    No argument: the last change. OLD only: OLD against the newest version. Versions are
    numbers (see `sandmem memory log`), `head` or `head~N`.
    """
    layout = store_layout(memories_dir, sessions_dir, store_url, endpoint_url)
    result = run_async(diff(workspace, old, new, layout=layout))
    if as_json:
        emit_model(result)
        return
    click.echo(result.diff, nl=False)


def warn_forgotten(made: VersionInfo) -> None:
    """A warning on stderr when the new version brings back what ``forget`` removed."""
    if not made.forgotten_back:
        return
    undo = f"; `sandmem memory restore {made.parent}` undoes it" if made.parent else ""
    click.echo(
        f"warning: version {made.version} brings back what memory held of forgotten "
        f"conversation(s) {', '.join(made.forgotten_back)} (their raw memories and "
        f"transcripts stay deleted){undo}",
        err=True,
    )


@click.command("restore")
@workspace_option(required=False)
@layout_options
@store_options
@click.argument("version")
@click.option("--json", "as_json", is_flag=True, help="Print the new version as JSON.")
def restore_command(
    workspace: Path,
    memories_dir: str,
    sessions_dir: str,
    store_url: str | None,
    endpoint_url: str | None,
    version: str,
    as_json: bool,
) -> None:
    """Make memory equal to VERSION again, as a new version.

    The conversations state follows: the next consolidation folds in the conversations
    recorded after VERSION.
    """
    layout = store_layout(memories_dir, sessions_dir, store_url, endpoint_url)
    made = run_async(restore(workspace, version, layout=layout, client="cli"))
    if as_json:
        emit_model(made)
    else:
        click.echo(version_line(made))
    warn_forgotten(made)


@click.command("redact-history")
@workspace_option(required=False)
@layout_options
@store_options
@click.argument("pattern", required=False)
@click.option("--secret", is_flag=True, help="Redact what the built-in secret detectors find.")
@click.option("--json", "as_json", is_flag=True, help="Print what was rewritten as JSON.")
def redact_history_command(
    workspace: Path,
    memories_dir: str,
    sessions_dir: str,
    store_url: str | None,
    endpoint_url: str | None,
    pattern: str | None,
    secret: bool,
    as_json: bool,
) -> None:
    """Remove a secret from memory and from every stored version.

    PATTERN is a regular expression; matches become [REDACTED:history]. Version numbers and
    attribution are kept; the old bytes are deleted.
    """
    if pattern is None and not secret:
        raise click.UsageError("give a PATTERN (a regular expression) or --secret")
    if pattern is not None:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise click.BadParameter(str(exc), param_hint="PATTERN") from None
    layout = store_layout(memories_dir, sessions_dir, store_url, endpoint_url)
    result = run_async(redact_history(workspace, pattern, secrets=secret, layout=layout))
    if as_json:
        emit_model(result)
        return
    click.echo(f"{len(result.versions)} versions rewritten, {len(result.files)} files rewritten")
    for name in result.renamed:
        click.echo(f"renamed (its name held the secret): {name}")
    for path in result.still_in:
        click.echo(f"still present outside memory: {path}", err=True)


def _proposal_lines(p: ProposalInfo) -> list[str]:
    head = f"{p.id}  {p.time[:16].replace('T', ' ')}  {p.kind}"
    if p.run:
        head += f"  run={p.run}"
    head += f"  base={p.base}"
    if p.stale:
        head += f"  STALE ({', '.join(p.stale)} changed since; dismiss and regenerate)"
    return [head, *("    " + line for line in p.diff.splitlines())]


@click.command("inbox")
@workspace_option(required=False)
@layout_options
@click.option("--json", "as_json", is_flag=True, help="Print the proposals as JSON.")
def inbox_command(workspace: Path, memories_dir: str, sessions_dir: str, as_json: bool) -> None:
    """List the proposals waiting for review, with their diffs (review mode)."""
    layout = layout_config(memories_dir, sessions_dir)
    found = run_async(inbox(workspace, layout=layout))
    if as_json:
        emit_model(found)
        return
    if not found:
        click.echo("the inbox is empty", err=True)
    for proposal in found:
        for line in _proposal_lines(proposal):
            click.echo(line)


@click.command("approve")
@workspace_option(required=False)
@layout_options
@store_options
@click.argument("proposal_id")
@click.option("--json", "as_json", is_flag=True, help="Print the new version as JSON.")
def approve_command(
    workspace: Path,
    memories_dir: str,
    sessions_dir: str,
    store_url: str | None,
    endpoint_url: str | None,
    proposal_id: str,
    as_json: bool,
) -> None:
    """Apply a proposal from the inbox as a new version."""
    layout = store_layout(memories_dir, sessions_dir, store_url, endpoint_url)
    made = run_async(approve(workspace, proposal_id, layout=layout, client="cli"))
    if as_json:
        emit_model(made)
    else:
        click.echo(version_line(made))
    warn_forgotten(made)


@click.command("dismiss")
@workspace_option(required=False)
@layout_options
@click.argument("proposal_id")
@click.option("--json", "as_json", is_flag=True, help="Print the dropped proposal as JSON.")
def dismiss_command(
    workspace: Path, memories_dir: str, sessions_dir: str, proposal_id: str, as_json: bool
) -> None:
    """Drop a proposal from the inbox; memory is unchanged."""
    layout = layout_config(memories_dir, sessions_dir)
    dropped = run_async(dismiss(workspace, proposal_id, layout=layout))
    if as_json:
        emit_model(dropped)
        return
    click.echo(f"dismissed {dropped.id}")
