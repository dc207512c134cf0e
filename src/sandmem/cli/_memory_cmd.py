"""``sandmem memory``: look at a workspace's memory (tree, show, search, status)."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

import click

from sandmem._errors import UserError
from sandmem.cli._common import (
    layout_options,
    layout_paths,
    open_workspace,
    require_layout,
    run_async,
    workspace_option,
)
from sandmem.cli._output import emit_json, human_size, render_tree
from sandmem.memory.maintenance import (
    FileEntry,
    checked_rollout_id,
    layout_files,
    memory_status,
    rollout_summary_files,
)
from sandmem.memory.search import Hit, search_layout
from sandmem.memory.storage import MemoryPaths, read_text


@click.group("memory")
def memory_group() -> None:
    """Inspect and maintain the memory of a workspace.

    Every subcommand takes --workspace (default: the current directory) and the layout
    flags --memories-dir / --sessions-dir.
    """


# ---------------------------------------------------------------- tree


async def _tree(workspace: Path, paths: MemoryPaths) -> list[FileEntry]:
    async with open_workspace(workspace) as session:
        await require_layout(session, paths)
        return await layout_files(session, paths)


@memory_group.command("tree")
@workspace_option(required=False)
@layout_options
@click.option("--json", "as_json", is_flag=True, help="Print the files as JSON.")
def tree_command(workspace: Path, memories_dir: str, sessions_dir: str, as_json: bool) -> None:
    """List the memory files and rollouts with their sizes."""
    paths = layout_paths(memories_dir, sessions_dir)
    entries = run_async(_tree(workspace, paths))
    if as_json:
        emit_json(
            {
                "workspace": str(workspace.resolve()),
                "files": [{"path": e.path, "bytes": e.size} for e in entries],
                "total_bytes": sum(e.size for e in entries),
            }
        )
        return
    for line in render_tree(entries):
        click.echo(line)
    total = sum(e.size for e in entries)
    click.echo(f"{len(entries)} files, {human_size(total)}")


# ---------------------------------------------------------------- show


async def _show(workspace: Path, paths: MemoryPaths, what: str) -> tuple[str, str]:
    async with open_workspace(workspace) as session:
        await require_layout(session, paths)
        if what in ("summary", "memory"):
            path = paths.summary_md if what == "summary" else paths.memory_md
            return path, await read_text(session, path) or ""
        rid = checked_rollout_id(what)
        found = await rollout_summary_files(session, paths, rid)
        if found:
            return found[0], await read_text(session, found[0]) or ""
        if await session.exists(paths.rollout_file(rid)):
            raise UserError(
                f"conversation {rid!r} has no rollout summary yet (its memory is pending, "
                "skipped or failed); see `sandmem memory status`"
            )
        raise UserError(
            f"no conversation {rid!r} in {paths.sessions_dir}/ or {paths.memories_dir}/; "
            "`sandmem memory tree` lists the known ones"
        )


@memory_group.command("show")
@workspace_option(required=False)
@layout_options
@click.argument("what", default="summary", metavar="[summary|memory|ROLLOUT_ID]")
def show_command(workspace: Path, memories_dir: str, sessions_dir: str, what: str) -> None:
    """Print the memory summary, MEMORY.md, or a rollout summary.

    WHAT is 'summary' (memory_summary.md, the default), 'memory' (MEMORY.md), or a
    conversation's ROLLOUT_ID (its rollout summary).
    """
    paths = layout_paths(memories_dir, sessions_dir)
    path, text = run_async(_show(workspace, paths, what))
    if not text.strip():
        click.echo(f"{path} is empty: no memory has been generated yet", err=True)
        return
    click.echo(text if text.endswith("\n") else text + "\n", nl=False)


# ---------------------------------------------------------------- search


async def _search(workspace: Path, paths: MemoryPaths, query: str, limit: int) -> list[Hit]:
    async with open_workspace(workspace) as session:
        await require_layout(session, paths)
        return await search_layout(session, paths, query, limit)


@memory_group.command("search")
@workspace_option(required=False)
@layout_options
@click.option(
    "--limit",
    "-n",
    type=click.IntRange(min=1),
    default=10,
    show_default=True,
    help="Most hits to print.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the hits as JSON.")
@click.argument("query", nargs=-1, required=True)
def search_command(
    workspace: Path,
    memories_dir: str,
    sessions_dir: str,
    limit: int,
    as_json: bool,
    query: tuple[str, ...],
) -> None:
    """Search memory; print the best-matching sections first.

    Searches the sections of MEMORY.md, the rollout summaries and the skills.

    Each hit is printed as FILE:LINE: SNIPPET (the section's best-matching line). Ranking is
    BM25 over the sections (split at Markdown headings) with stemming; any word of QUERY
    may match, and sections matching more and rarer words rank higher.
    """
    paths = layout_paths(memories_dir, sessions_dir)
    text = " ".join(query)
    hits = run_async(_search(workspace, paths, text, limit))
    if as_json:
        emit_json({"query": text, "hits": [asdict(hit) for hit in hits]})
        return
    if not hits:
        click.echo(f"no matches for {text!r}", err=True)
        return
    for hit in hits:
        click.echo(f"{hit.path}:{hit.line}: {hit.snippet}")


# ---------------------------------------------------------------- status


async def _status(workspace: Path, paths: MemoryPaths) -> dict[str, Any]:
    async with open_workspace(workspace) as session:
        await require_layout(session, paths)
        return await memory_status(session, paths)


def _rollout_line(row: dict[str, Any]) -> str:
    line = f"  {row['rollout_id']}  attempts {row['attempts']}"
    if row.get("last_attempt_at"):
        line += f"  last attempt {row['last_attempt_at']}"
    if row.get("last_error"):
        line += f"\n    error: {row['last_error']}"
    return line


def _count(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def status_lines(data: dict[str, Any]) -> list[str]:
    counts = data["rollouts"]
    lines = [
        f"conversations: {counts['total']} ({counts['done']} done, {counts['pending']} pending, "
        f"{counts['failed']} failed, {counts['skipped']} skipped)"
    ]
    if data["pending"]:
        lines.append("pending (extracted at the next generation):")
        lines += [_rollout_line(row) for row in data["pending"]]
    if data["failed"]:
        lines.append("failed (retry with `sandmem memory generate --retry-failed`):")
        lines += [_rollout_line(row) for row in data["failed"]]
    last = data["last_consolidation"]
    if last is None:
        lines.append("last consolidation: never")
    else:
        lines.append(
            f"last consolidation: {last['status']} at {last['time']} "
            f"({_count(last['rollouts'], 'conversation')})"
        )
        if last.get("error"):
            lines.append(f"  error: {last['error']}")
        if last.get("last_success_at") and last["status"] != "done":
            lines.append(f"  last success: {last['last_success_at']}")
    lines.append("files:")
    for info in data["files"].values():
        lines.append(f"  {info['path']}  {human_size(info['bytes'])}")
    for info in data["dirs"].values():
        lines.append(
            f"  {info['path']}/  {_count(info['files'], 'file')}, {human_size(info['bytes'])}"
        )
    lines.append("tokens spent:")
    for phase, total in data["tokens"].items():
        lines.append(
            f"  phase {phase}: {total['input_tokens']:,} in / {total['output_tokens']:,} out "
            f"({_count(total['runs'], 'run')}, {total['failed_runs']} failed)"
        )
    return lines


@memory_group.command("status")
@workspace_option(required=False)
@layout_options
@click.option("--json", "as_json", is_flag=True, help="Print the status as JSON.")
def status_command(workspace: Path, memories_dir: str, sessions_dir: str, as_json: bool) -> None:
    """Show what is pending or failed, the last consolidation, sizes, tokens.

    Lists pending and failed conversations (attempts, last error), the last consolidation
    (time, status, error), file sizes, and the tokens spent per phase.
    """
    paths = layout_paths(memories_dir, sessions_dir)
    data = run_async(_status(workspace, paths))
    if as_json:
        emit_json(data)
        return
    for line in status_lines(data):
        click.echo(line)
