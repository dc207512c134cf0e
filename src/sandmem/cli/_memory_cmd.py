"""``sandmem memory``: look at a workspace's memory (tree, list, show, search, status).

Every command is a call to the public memory API (``sandmem.memory``); ``--json`` prints the
result model's JSON.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import click

from sandmem._errors import MemoryNotFoundError
from sandmem._log_lines import human_size
from sandmem.cli._common import (
    emit_model,
    layout_config,
    layout_options,
    run_async,
    workspace_option,
)
from sandmem.cli._group import LazyGroup
from sandmem.memory import (
    ConversationInfo,
    FileSize,
    MemoryFile,
    MemoryFileKind,
    MemoryStatus,
    list_conversations,
    list_files,
    reindex,
    search,
    show,
    status,
)

#: the memory commands defined in other modules (imported when one runs)
SUBCOMMANDS = {
    "approve": "sandmem.cli._history_cmd:approve_command",
    "diff": "sandmem.cli._history_cmd:diff_command",
    "dismiss": "sandmem.cli._history_cmd:dismiss_command",
    "forget": "sandmem.cli._generate_cmd:forget_command",
    "generate": "sandmem.cli._generate_cmd:generate_command",
    "git-setup": "sandmem.cli._scopes_cmd:git_setup_command",
    "inbox": "sandmem.cli._history_cmd:inbox_command",
    "ingest": "sandmem.cli._ingest_cmd:ingest_command",
    "log": "sandmem.cli._history_cmd:log_command",
    "merge-driver": "sandmem.cli._scopes_cmd:merge_driver_command",
    "redact-history": "sandmem.cli._history_cmd:redact_history_command",
    "restore": "sandmem.cli._history_cmd:restore_command",
    "scopes": "sandmem.cli._scopes_cmd:scopes_command",
    "view": "sandmem.cli._view_cmd:view_command",
}


class _MemoryGroup(LazyGroup):
    """The memory commands take the workspace as ``-w DIR``; a directory given as an argument
    instead (``sandmem memory tree ws``) gets a hint saying so."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.UsageError as exc:
            extra = _EXTRA.match(exc.message)
            if extra and Path(extra.group(1).split()[0]).is_dir():
                hint = f"; to name the workspace, use -w {extra.group(1).split()[0]}"
                raise click.UsageError(exc.message + hint, exc.ctx) from None
            raise


_EXTRA = re.compile(r"Got unexpected extra arguments? \((.+)\)")


@click.group("memory", cls=_MemoryGroup, lazy=SUBCOMMANDS)
def memory_group() -> None:
    """Inspect and maintain the memory of a workspace.

    Every subcommand takes --workspace (default: the current directory) and the layout
    flags --memories-dir / --sessions-dir.
    """


# ---------------------------------------------------------------- tree


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


@memory_group.command("tree")
@workspace_option(required=False)
@layout_options
@click.option("--json", "as_json", is_flag=True, help="Print the files as JSON.")
def tree_command(workspace: Path, memories_dir: str, sessions_dir: str, as_json: bool) -> None:
    """List the memory files and rollouts with their sizes."""
    layout = layout_config(memories_dir, sessions_dir)
    files = run_async(list_files(workspace, layout=layout))
    total = sum(f.bytes or 0 for f in files)
    if as_json:
        data = {"workspace": str(workspace.resolve()), "files": files, "total_bytes": total}
        emit_model(data)
        return
    for line in render_tree(files):
        click.echo(line)
    click.echo(f"{len(files)} files, {human_size(total)}")


# ---------------------------------------------------------------- list


def _conversation_line(row: ConversationInfo) -> str:
    date = row.updated_at[:16].replace("T", " ") if row.updated_at != "unknown" else "unknown"
    line = f"{row.rollout_id}  {row.status}  {date}"
    if row.task:
        line += f"  {row.task}"
    return line


@memory_group.command("list")
@workspace_option(required=False)
@layout_options
@click.option("--json", "as_json", is_flag=True, help="Print the conversations as JSON.")
@click.option(
    "--limit",
    type=click.IntRange(min=0),
    default=None,
    help="Print at most this many conversations (default: all).",
)
@click.option(
    "--offset",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Skip this many of the most recent conversations first.",
)
def list_command(
    workspace: Path,
    memories_dir: str,
    sessions_dir: str,
    as_json: bool,
    limit: int | None,
    offset: int,
) -> None:
    """List the recorded conversations, most recent first.

    One line each: ROLLOUT_ID, status (done, pending, failed, skipped), the date of its
    last run (UTC), and its task (the first user message); then its rollout summary file
    when it has one. --limit and --offset page through them.
    """
    layout = layout_config(memories_dir, sessions_dir)
    rows = run_async(list_conversations(workspace, layout=layout, limit=limit, offset=offset))
    if as_json:
        emit_model(rows)
        return
    if not rows:
        click.echo("no conversations recorded yet", err=True)
        return
    for row in rows:
        click.echo(_conversation_line(row))
        if row.summary_file:
            click.echo(f"    {row.summary_file}")


# ---------------------------------------------------------------- show


def _missing(found: MemoryFile) -> MemoryNotFoundError:
    if found.kind == "rollout_summary":
        message = (
            f"no such file: conversation {found.rollout_id!r} has no rollout summary yet (its "
            "memory is pending, skipped or failed); see `sandmem memory status`"
        )
    elif found.kind == "raw_memory":
        message = (
            f"no such file: {found.path} (conversation {found.rollout_id!r} has not been "
            "extracted yet); see `sandmem memory status`"
        )
    else:
        message = (
            f"no such file: {found.path}; memory is generated when a run with Memory() ends, "
            "or by `sandmem memory generate`"
        )
    return MemoryNotFoundError(message, path=found.path, rollout_id=found.rollout_id)


@memory_group.command("show")
@workspace_option(required=False)
@layout_options
@click.option(
    "--raw",
    is_flag=True,
    help="With ROLLOUT_ID: print the conversation's raw memory instead of its rollout summary.",
)
@click.option(
    "--rollout",
    "rollout_file",
    is_flag=True,
    help="With ROLLOUT_ID: print its recorded run segments (the rollout file, JSONL).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the file and its state as JSON.")
@click.argument("what", default="summary", metavar="[summary|memory|ROLLOUT_ID]")
def show_command(
    workspace: Path,
    memories_dir: str,
    sessions_dir: str,
    raw: bool,
    rollout_file: bool,
    as_json: bool,
    what: str,
) -> None:
    """Print the memory summary, MEMORY.md, or one conversation's rollout summary.

    WHAT is 'summary' (memory_summary.md, the default), 'memory' (MEMORY.md), or a
    conversation's ROLLOUT_ID (its rollout summary; with --raw, its raw memory; with
    --rollout, its rollout file). A file
    that does not exist is an error ("no such file"); an empty one prints nothing and
    says so on stderr.
    """
    layout = layout_config(memories_dir, sessions_dir)
    if raw and rollout_file:
        raise click.UsageError("use either --raw or --rollout, not both")
    if what in ("summary", "memory"):
        if raw or rollout_file:
            raise click.UsageError("--raw and --rollout go with a ROLLOUT_ID")
        kind: MemoryFileKind = "summary" if what == "summary" else "memory"
        found = run_async(show(workspace, kind, layout=layout))
    else:
        kind = "raw_memory" if raw else "rollout" if rollout_file else "rollout_summary"
        found = run_async(show(workspace, kind, what, layout=layout))
    if as_json:
        emit_model(found)
        return
    if not found.exists:
        raise _missing(found)
    if found.empty:
        click.echo(f"{found.path} is empty: no memory has been generated yet", err=True)
        return
    text = found.text
    click.echo(text if text.endswith("\n") else text + "\n", nl=False)


# ---------------------------------------------------------------- search


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
@click.option(
    "--memory-only",
    is_flag=True,
    help="Search distilled memory only, not the recorded conversations.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the hits as JSON.")
@click.argument("query", nargs=-1, required=True)
def search_command(
    workspace: Path,
    memories_dir: str,
    sessions_dir: str,
    limit: int,
    memory_only: bool,
    as_json: bool,
    query: tuple[str, ...],
) -> None:
    """Search memory; print the best-matching hits first.

    Searches distilled memory (the sections of MEMORY.md, the rollout summaries and the
    skills) first, then the recorded conversations (SESSIONS_DIR/*.jsonl) when distilled
    memory does not cover QUERY as well as a passage of them does.

    Each hit is printed as FILE:LINE: SNIPPET (the section's best-matching line); a
    transcript hit as SESSIONS_DIR/ID.jsonl:SEGMENT: [KIND] SNIPPET (read it with `sandmem
    memory show ID --what rollout`). Ranking is BM25 with stemming; any word of QUERY may
    match, and hits matching more and rarer words rank higher. With `sandmem[semantic]`
    installed it is hybrid: BM25 fused with an offline embedding model, so a question worded
    differently still matches (`sandmem memory status` says which; SANDMEM_SEARCH=bm25 turns
    it off).
    """
    layout = layout_config(memories_dir, sessions_dir)
    text = " ".join(query)
    results = run_async(search(workspace, text, limit, layout=layout, transcripts=not memory_only))
    if as_json:
        emit_model(results)
        return
    if not results.hits:
        click.echo(f"no matches for {text!r}", err=True)
        return
    for hit in results.hits:
        kind = f"[{hit.heading}] " if hit.tier == "transcript" else ""
        click.echo(f"{hit.path}:{hit.line}: {kind}{hit.snippet}")


# ---------------------------------------------------------------- status


def _rollout_line(row: ConversationInfo) -> str:
    line = f"  {row.rollout_id}  attempts {row.attempts}"
    if row.failure_kind:
        line += f"  ({row.failure_kind})"
    if row.last_attempt_at:
        line += f"  last attempt {row.last_attempt_at}"
    if row.next_retry_at:
        line += f"  next retry {row.next_retry_at}"
    if row.last_error:
        line += f"\n    error: {row.last_error}"
    return line


def _count(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _search_line(data: MemoryStatus) -> str | None:
    """``search: hybrid (model); vectors for N of M sections and passages`` or ``search: BM25
    (why)``."""
    info = data.search
    if info is None:
        return None
    if info.ranking == "bm25":
        why = info.reason or "words only"
        if "not installed" in why and "pip install" not in why:
            why += ": pip install 'sandmem[semantic]' for hybrid search"
        return f"search: BM25 ({why})"
    line = f"search: hybrid, BM25 + {info.model}; vectors for {info.embedded:,} of "
    line += f"{info.embeddable:,} sections and passages"
    if info.embedded < info.embeddable:
        line += " (the rest at the next searches, or `sandmem memory reindex`)"
    return line


def status_lines(data: MemoryStatus) -> list[str]:
    counts = data.counts
    lines = [
        f"conversations: {counts.total} ({counts.done} done, {counts.pending} pending, "
        f"{counts.failed} failed, {counts.skipped} skipped)"
    ]
    if data.pending:
        lines.append("pending (extracted at the next generation):")
        lines += [_rollout_line(row) for row in data.pending]
    if data.failed:
        lines.append("failed (retry with `sandmem memory generate --retry-failed`):")
        lines += [_rollout_line(row) for row in data.failed]
    last = data.last_consolidation
    if last is None:
        lines.append("last consolidation: never")
    else:
        lines.append(
            f"last consolidation: {last.status} at {last.time} "
            f"({_count(last.rollouts, 'conversation')})"
        )
        if last.error:
            kind = f"  ({last.failure_kind} failure)" if last.failure_kind else ""
            lines.append(f"  error: {last.error}{kind}")
        if last.status == "fallback":
            lines.append(
                "  memory was consolidated by the extractive engine; the model is tried again "
                "at the next generation"
            )
        if last.missing:
            lines.append(f"  pending for the next consolidation: {', '.join(last.missing)}")
        if last.last_success_at and last.status != "done":
            lines.append(f"  last success: {last.last_success_at}")
    lines.append("files:")
    for info in data.files.values():
        lines.append(f"  {info.path}  {human_size(info.bytes)}")
    for folder in data.dirs.values():
        lines.append(
            f"  {folder.path}/  {_count(folder.files, 'file')}, {human_size(folder.bytes)}"
        )
    if (search_line := _search_line(data)) is not None:
        lines.append(search_line)
    lines.append("tokens spent:")
    for phase, total in (("one", data.tokens.phase_one), ("two", data.tokens.phase_two)):
        lines.append(
            f"  phase {phase}: {total.input_tokens:,} in / {total.output_tokens:,} out, "
            f"{_count(total.requests, 'request')} "
            f"({_count(total.runs, 'run')}, {total.failed_runs} failed)"
        )
    return lines


@memory_group.command("status")
@workspace_option(required=False)
@layout_options
@click.option("--json", "as_json", is_flag=True, help="Print the status as JSON.")
def status_command(workspace: Path, memories_dir: str, sessions_dir: str, as_json: bool) -> None:
    """Show what is pending or failed, the last consolidation, sizes, tokens.

    Lists pending and failed conversations (attempts, failure class, next retry, last
    error), the last consolidation (time, status, error), file sizes, and the tokens spent
    per phase.
    """
    layout = layout_config(memories_dir, sessions_dir)
    data = run_async(status(workspace, layout=layout))
    if as_json:
        emit_model(data)
        return
    for line in status_lines(data):
        click.echo(line)


# ---------------------------------------------------------------- reindex


@memory_group.command("reindex")
@workspace_option(required=False)
@layout_options
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def reindex_command(workspace: Path, memories_dir: str, sessions_dir: str, as_json: bool) -> None:
    """Rebuild the memory index from the files.

    The index (<memories_dir>/.index.sqlite) makes status, list, show and search fast; it
    is derived from the files, checked against them on every use and rebuilt for what
    differs, so this is never needed for correct answers. Run it to pay the whole cost now.
    """
    layout = layout_config(memories_dir, sessions_dir)
    report = run_async(reindex(workspace, layout=layout))
    if as_json:
        emit_model(report)
        return
    click.echo(
        f"indexed {report.conversations} conversations, {report.files} files "
        f"({report.sections} sections) into {report.path} ({human_size(report.bytes)})"
    )
