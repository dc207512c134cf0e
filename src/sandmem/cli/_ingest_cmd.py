"""``sandmem memory ingest``: record transcripts of other agents (Codex CLI, Claude Code, the
OpenAI Agents SDK, plain Responses items or chat messages) as memory conversations, through
the public memory API (``sandmem.memory.ingest``); also the agents' hooks and ``--watch``."""

from __future__ import annotations

import io
import json
import os
import select
import subprocess
import sys
import time
from pathlib import Path

import click

from sandmem.cli._common import (
    emit_model,
    engine_options,
    layout_config,
    layout_options,
    memory_command_config,
    review_option,
    run_async,
    workspace_option,
)
from sandmem.cli._output import report_lines
from sandmem.cli._scopes_cmd import check_route, run_routed
from sandmem.memory import (
    IngestReport,
    MemoryGenerateConfig,
    MemoryLayoutConfig,
    hook_transcripts,
    ingest,
    ingest_watch,
)

FORMATS = ("auto", "codex", "claude-code", "openai-agents", "responses", "chat")


def _lines(report: IngestReport) -> list[str]:
    lines = []
    others = {id(s) for s in report.sources if s.status == "skipped" and _other_project(s.error)}
    for s in report.sources:
        if id(s) in others:
            continue
        where = f"{s.rollout_id} ({s.format})" if s.rollout_id else s.path
        if s.status == "recorded":
            text = f"  + {where}: {s.segments} segment(s), {s.items} item(s)"
        elif s.status == "unchanged" and s.dropped:
            text = (
                f"  ! {where}: nothing recorded: every new line was dropped — is it really "
                f"{s.format}? (--format auto tells the formats apart)"
            )
        elif s.status == "unchanged":
            text = f"  = {where}: nothing new"
        else:
            text = f"  ! {s.path}: {s.status}: {s.error}"
        extra = []
        if s.dropped:
            extra.append("dropped " + ", ".join(f"{k} {v}" for k, v in s.dropped.items()))
        if s.pending_bytes:
            extra.append(f"{s.pending_bytes} bytes of an unfinished last line wait")
        if s.more:
            extra.append("more left for the next ingest (budget reached)")
        lines.append(text + (f" [{'; '.join(extra)}]" if extra else ""))
    if others:
        lines.append(
            f"  - {len(others)} session(s) of other projects left out (their working directory "
            "is elsewhere; --all-projects takes them)"
        )
    return lines


def _other_project(error: str | None) -> bool:
    return bool(error) and str(error).startswith("another project:")


def _emit(report: IngestReport, as_json: bool) -> None:
    if as_json:
        emit_model(report)
        return
    click.echo(f"ingested {report.recorded_segments} segment(s):")
    for line in _lines(report):
        click.echo(line)
    if report.generation is not None:
        for line in report_lines(report.generation):
            click.echo(line)
    elif report.recorded_segments:
        click.echo("  (memory is generated at the next flush: `sandmem memory generate`)")


def _spawn(workspace: Path, layout: MemoryLayoutConfig, fmt: str, paths: list[Path]) -> None:
    """Ingest in a detached process so the agent that ran the hook is never kept waiting."""
    argv = [
        sys.executable,
        "-c",
        "import sys; from sandmem.cli import main; sys.argv[0] = 'sandmem'; main()",
        "memory",
        "ingest",
        "--workspace",
        str(workspace),
        "--memories-dir",
        layout.memories_dir,
        "--sessions-dir",
        layout.sessions_dir,
        "--format",
        fmt,
        "--",  # a path from a hook's payload is a path, never an option ("--watch=DIR")
        *map(str, paths),
    ]
    subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        close_fds=True,
    )


#: how long a hook waits for its input on stdin (Claude Code may never close it)
HOOK_STDIN_S = 2.0


def _hook_stdin(wait_s: float = HOOK_STDIN_S) -> str:
    """The JSON object on stdin: read until it parses, stdin ends, or ``wait_s`` passes —
    never until end of file alone, as the agent may keep stdin open until the hook exits."""
    try:
        fd = sys.stdin.fileno()
    except (OSError, ValueError, io.UnsupportedOperation):  # not a real stream (tests)
        return sys.stdin.read()
    data = b""
    deadline = time.monotonic() + wait_s
    while (left := deadline - time.monotonic()) > 0:
        ready, _, _ = select.select([fd], [], [], left)
        if not ready:
            break
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        data += chunk
        try:
            json.loads(data)
        except ValueError:
            continue
        break
    return data.decode("utf-8", "replace")


def _hook_paths(hook: str, arguments: tuple[str, ...]) -> tuple[str, list[Path]]:
    if hook == "claude-code":
        return "claude-code", hook_transcripts("claude-code", _hook_stdin())
    if not arguments:
        raise click.UsageError("--hook codex expects the notify payload as its last argument")
    return "codex", hook_transcripts("codex", arguments[-1])


@click.command("ingest")
@workspace_option(required=False)
@layout_options
@engine_options
@click.option(
    "--format",
    "fmt",
    type=click.Choice(FORMATS),
    default="auto",
    show_default=True,
    help="The transcripts' format; auto tells them apart from their content.",
)
@click.option(
    "--session", "sessions", multiple=True, help="Only this source session id (repeatable)."
)
@click.option(
    "--cwd",
    "--project",
    "cwd",
    metavar="DIR",
    default=None,
    help="Only sessions whose working directory is DIR or inside it. Default, for transcripts "
    "in Codex's or Claude Code's home (~/.codex, ~/.claude), which hold every project's: the "
    "workspace.",
)
@click.option(
    "--all-projects",
    is_flag=True,
    help="Ingest the sessions of every working directory (no --cwd default).",
)
@click.option(
    "--route",
    is_flag=True,
    help="Record each transcript into the project memory of its working directory (the "
    "nearest directory up with a project marker such as .git), creating it there when "
    "missing; transcripts of directories that are not projects are skipped. No --workspace.",
)
@click.option("--generate", "generate_now", is_flag=True, help="Generate memory right after.")
@review_option
@click.option(
    "--watch",
    "watch_dir",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="Keep ingesting the transcripts of DIR as they change (Ctrl-C stops).",
)
@click.option(
    "--interval",
    type=float,
    default=2.0,
    show_default=True,
    help="Seconds between looks at the --watch directory.",
)
@click.option(
    "--hook",
    type=click.Choice(("claude-code", "codex")),
    help="Run as an agent's hook: Claude Code's SessionEnd (reads stdin) or Codex's "
    "notify (the payload is the last argument); ingests in the background.",
)
@click.option("--wait", is_flag=True, help="With --hook: ingest in this process instead.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.argument("paths", nargs=-1)
def ingest_command(
    workspace: Path,
    memories_dir: str,
    sessions_dir: str,
    engine: str,
    model: str | None,
    fmt: str,
    sessions: tuple[str, ...],
    cwd: str | None,
    all_projects: bool,
    route: bool,
    generate_now: bool,
    review: bool,
    watch_dir: Path | None,
    interval: float,
    hook: str | None,
    wait: bool,
    as_json: bool,
    paths: tuple[str, ...],
) -> None:
    """Record other agents' transcripts as memory conversations.

    PATHS are transcript files or directories of them: Codex CLI rollouts
    (~/.codex/sessions), Claude Code sessions (~/.claude/projects/<project>), OpenAI Agents
    SDK SQLiteSession databases or to_input_list() JSON, plain Responses items or chat
    messages (JSON or JSONL). Each source session becomes one conversation whose id comes
    from its session id; ingesting again records only what was appended since. Memory is
    generated at the next flush, or now with --generate.
    """
    layout = layout_config(memories_dir, sessions_dir)
    # the engine matters only to --generate (recording needs no model)
    config = memory_command_config(engine, model, workspace) if generate_now else None
    if review:
        if config is None:
            raise click.UsageError("--review applies to the generation: pass --generate too")
        config = config.model_copy(update={"review": True})
    if hook is not None:
        fmt, files = _hook_paths(hook, paths)
        if files and not wait:
            _spawn(workspace, layout, fmt, files)
            return
        paths = tuple(map(str, files))
        if not paths:
            return
    if cwd is not None and all_projects:
        raise click.UsageError("use either --cwd DIR or --all-projects, not both")
    if route:
        check_route(watch_dir, cwd, all_projects)
        _require_paths(paths)
        run_routed(paths, fmt, sessions, layout, config, generate_now, as_json, _lines)
        return
    named = [*paths, *([str(watch_dir)] if watch_dir is not None else [])]
    project = _project(workspace, cwd, all_projects, named, quiet=as_json)
    if watch_dir is not None:
        _watch(workspace, layout, config, fmt, watch_dir, interval, as_json, project)
        return
    if not paths:
        raise click.UsageError("name at least one transcript file or directory (or --watch DIR)")
    if hook is None:  # a hook's transcript may be gone already: that is not the user's error
        _require_paths(paths)
    workspace.mkdir(parents=True, exist_ok=True)
    report = run_async(
        ingest(
            workspace,
            list(paths),
            format=fmt,  # type: ignore[arg-type]
            sessions=sessions or None,
            layout=layout,
            config=config,
            generate_now=generate_now,
            cwd=project,
        )
    )
    _emit(report, as_json)
    if any(s.status == "failed" for s in report.sources):
        raise SystemExit(1)


def agent_homes() -> list[Path]:
    """The home directories of Codex (``$CODEX_HOME``, else ``~/.codex``) and Claude Code
    (``$CLAUDE_CONFIG_DIR``, else ``~/.claude``): their transcripts mix every project."""
    homes = [
        os.environ.get("CODEX_HOME") or "~/.codex",
        os.environ.get("CLAUDE_CONFIG_DIR") or "~/.claude",
    ]
    return [Path(os.path.realpath(os.path.expanduser(home))) for home in homes]


def _project(
    workspace: Path, cwd: str | None, all_projects: bool, named: list[str], *, quiet: bool
) -> str | None:
    """The working directory whose sessions are ingested (``None``: all of them)."""
    if cwd is not None:
        return os.path.abspath(os.path.expanduser(cwd))
    if all_projects:
        return None
    homes = agent_homes()
    mixed = [
        raw
        for raw in named
        if any(Path(os.path.realpath(os.path.expanduser(raw))).is_relative_to(h) for h in homes)
    ]
    if not mixed:
        return None
    project = str(workspace.absolute())
    if not quiet:
        click.echo(
            f"only sessions whose working directory is in {project} are ingested: {mixed[0]} "
            "holds every project's transcripts (--cwd DIR picks another project, "
            "--all-projects takes them all)",
            err=True,
        )
    return project


def _require_paths(paths: tuple[str, ...]) -> None:
    """Every path named exists (a usage error, exit 2, names the first that does not)."""
    for raw in paths:
        if not os.path.exists(os.path.expanduser(raw)):
            broken = " (a broken link)" if os.path.islink(os.path.expanduser(raw)) else ""
            problem = f"{raw}: no such file or directory{broken}"
            raise click.BadParameter(problem, param_hint="PATHS")


def _watch(
    workspace: Path,
    layout: MemoryLayoutConfig,
    config: MemoryGenerateConfig | None,
    fmt: str,
    directory: Path,
    interval: float,
    as_json: bool,
    project: str | None,
) -> None:
    workspace.mkdir(parents=True, exist_ok=True)
    saved = [0, 0]  # segments, ingests that recorded something

    def show(report: IngestReport) -> None:
        saved[0] += report.recorded_segments
        saved[1] += 1 if report.recorded_segments else 0
        _emit(report, as_json)
        sys.stdout.flush()  # a pipe is block-buffered: show each ingest as it happens

    click.echo(
        f"watching {directory} for transcripts (a look every {interval:g} s), recording into "
        f"{workspace / layout.sessions_dir}; Ctrl-C stops",
        err=True,
    )
    try:
        run_async(
            ingest_watch(
                workspace,
                directory,
                format=fmt,  # type: ignore[arg-type]
                layout=layout,
                config=config,
                interval=interval,
                on_report=show,
                cwd=project,
            )
        )
    except KeyboardInterrupt:
        click.echo(
            f"stopped watching: {saved[0]} segment(s) recorded while watching, all saved "
            "(the next ingest or watch continues where this one stopped)",
            err=True,
        )
        raise SystemExit(130) from None  # 128 + SIGINT, as every command
