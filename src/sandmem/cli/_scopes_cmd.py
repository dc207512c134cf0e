"""The scope commands: ``sandmem memory ingest --route``'s checks and report, and the git
helpers of a project's memory (``sandmem memory git-setup``, ``sandmem memory merge-driver``);
see ``docs/scopes.md``."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import click

from sandmem._errors import UserError
from sandmem._terminal import json_text
from sandmem.cli._common import (
    emit_model,
    layout_config,
    layout_options,
    run_async,
    workspace_option,
)
from sandmem.cli._output import report_lines
from sandmem.cli._settings_file import ConfigError
from sandmem.memory import (
    IngestReport,
    MemoryGenerateConfig,
    MemoryLayoutConfig,
    RoutedIngestReport,
    git_setup,
    ingest_routed,
    memory_scopes,
    merge_memory_text,
)


def check_route(watch_dir: Path | None, cwd: str | None, all_projects: bool) -> None:
    """``--route`` picks each transcript's memory itself: no workspace, filter or watch."""
    source = click.get_current_context().get_parameter_source("workspace")
    clash = [
        flag
        for flag, given in (
            ("--workspace", source is not click.core.ParameterSource.DEFAULT),
            ("--watch", watch_dir is not None),
            ("--cwd", cwd is not None),
            ("--all-projects", all_projects),
        )
        if given
    ]
    if clash:
        raise click.UsageError(
            f"--route sends each transcript to its own project: it does not go with {clash[0]}"
        )


def emit_routed(
    report: RoutedIngestReport, as_json: bool, lines: Callable[[IngestReport], list[str]]
) -> None:
    if as_json:
        emit_model(report)
    else:
        click.echo(
            f"ingested {report.recorded_segments} segment(s) into "
            f"{len(report.projects)} project(s):"
        )
        for project, found in report.projects.items():
            click.echo(f"{project}: {found.recorded_segments} segment(s)")
            for line in lines(found):
                click.echo(line)
            if found.generation is not None:
                for line in report_lines(found.generation):
                    click.echo("  " + line)
        if report.skipped:
            click.echo(f"not routed ({len(report.skipped)}):")
            for source in report.skipped:
                click.echo(f"  - {source.path}: {source.error}")
    if report.failed:
        raise SystemExit(1)


def run_routed(
    paths: tuple[str, ...],
    fmt: str,
    sessions: tuple[str, ...],
    layout: MemoryLayoutConfig,
    config: MemoryGenerateConfig | None,
    generate_now: bool,
    as_json: bool,
    lines: Callable[[IngestReport], list[str]],
) -> None:
    """``sandmem memory ingest --route PATHS``: ingest and print where each transcript went."""
    report = run_async(
        ingest_routed(
            list(paths),
            format=fmt,  # type: ignore[arg-type]
            sessions=sessions or None,
            layout=layout,
            config=config,
            generate_now=generate_now,
        )
    )
    emit_routed(report, as_json, lines)


# ---------------------------------------------------------------- git


def _driver_command(command: str) -> str:
    """The merge driver's command line, with this installation's ``sandmem`` when it is not
    the one ``PATH`` finds (git runs the driver with the user's ``PATH``)."""
    script = Path(sys.executable).with_name("sandmem")
    found = shutil.which("sandmem")
    program = "sandmem"
    if script.exists() and (found is None or not os.path.samefile(found, script)):
        program = shlex.quote(str(script))
    return command.replace("sandmem", program, 1)


def _git(workspace: Path, *args: str) -> subprocess.CompletedProcess[str] | None:
    """``git -C workspace ARGS`` (``None`` when git is not installed)."""
    try:
        return subprocess.run(
            ["git", "-C", str(workspace), *args],
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT_S,
            check=False,
        )
    except (FileNotFoundError, subprocess.TimeoutExpired):
        return None


#: how long a git command may take
GIT_TIMEOUT_S = 20.0


@click.command("git-setup")
@workspace_option(required=False)
@layout_options
@click.option(
    "--no-git-config",
    is_flag=True,
    help="Only write the files; do not set the merge driver in the repository's git config.",
)
@click.option("--json", "as_json", is_flag=True, help="Print what was done as JSON.")
def git_setup_command(
    workspace: Path, memories_dir: str, sessions_dir: str, no_git_config: bool, as_json: bool
) -> None:
    """Keep this project's memory in git.

    Writes MEMORIES_DIR/.gitignore (the index, locks and generation state stay out),
    MEMORIES_DIR/.gitattributes (memory files merge keeping both sides) and
    SESSIONS_DIR/.gitignore (raw transcripts never go in), then sets the
    `sandmem-memory` merge driver in the repository's git config (a driver cannot be
    committed: each clone runs this once). See `sandmem docs scopes`.
    """
    layout = layout_config(memories_dir, sessions_dir)
    result = run_async(git_setup(workspace, layout=layout))
    driver = result.merge_driver
    configured = None
    if not no_git_config:
        inside = _git(workspace, "rev-parse", "--is-inside-work-tree")
        if inside is not None and inside.returncode == 0 and inside.stdout.strip() == "true":
            command = _driver_command(result.driver_command)
            name = _git(workspace, "config", f"merge.{driver}.name", "sandmem memory: keep both")
            done = _git(workspace, "config", f"merge.{driver}.driver", command)
            if name is not None and done is not None and done.returncode == 0:
                configured = command
    if as_json:
        data = {"written": result.written, "merge_driver": configured}
        click.echo(json_text(json.dumps(data, ensure_ascii=False)))
        return
    for path in result.written:
        click.echo(f"wrote {workspace / path}")
    if configured:
        click.echo(f"git config merge.{driver}.driver = {configured}")
    else:
        click.echo(
            f"not a git work tree (or --no-git-config): in each clone run\n"
            f'  git config merge.{driver}.driver "{result.driver_command}"'
        )


#: the largest file the merge driver merges (a larger one is left to git as a conflict)
MERGE_MAX_BYTES = 32 * 1024 * 1024


@click.command("merge-driver")
@workspace_option(required=False)
@click.argument("base", type=click.Path(dir_okay=False, path_type=Path))
@click.argument("ours", type=click.Path(dir_okay=False, path_type=Path))
@click.argument("theirs", type=click.Path(dir_okay=False, path_type=Path))
@click.argument("path", required=False)
def merge_driver_command(
    workspace: Path, base: Path, ours: Path, theirs: Path, path: str | None
) -> None:
    """Git's merge driver for memory files: merge BASE, OURS and THEIRS into OURS.

    A region both sides changed keeps both (ours, then what theirs adds), with no conflict
    markers; exit 0. A file that is not UTF-8 text, or larger than 32 MiB, is left to git as
    a conflict (exit 1). Relative paths are taken in --workspace (default: the current
    directory, where git runs the driver). Set up by `sandmem memory git-setup`.
    """
    base, ours, theirs = (workspace / p for p in (base, ours, theirs))  # git: relative to it
    texts = []
    for given in (base, ours, theirs):
        try:
            data = given.read_bytes() if given.exists() else b""
        except OSError as exc:
            click.echo(f"sandmem merge-driver: cannot read {given}: {exc.strerror}", err=True)
            raise SystemExit(1) from None
        if len(data) > MERGE_MAX_BYTES or b"\x00" in data:
            raise SystemExit(1)
        try:
            texts.append(data.decode("utf-8"))
        except UnicodeDecodeError:
            raise SystemExit(1) from None
    merged = merge_memory_text(*texts)
    tmp = ours.with_name(ours.name + ".sandmem-merge")
    tmp.write_text(merged, encoding="utf-8")
    os.replace(tmp, ours)


# ---------------------------------------------------------------- scopes


@click.command("scopes")
@workspace_option(required=False)
@click.option("--json", "as_json", is_flag=True, help="Print the scopes as JSON.")
def scopes_command(workspace: Path, as_json: bool) -> None:
    """The memory scopes attached in the workspace's project.

    The project (the nearest directory up with a marker such as .git), the personal memory
    ($SANDMEM_HOME) and the named scopes of your settings and of the project's sandmem.toml,
    each with its mode and whether it holds memory yet: what `sandmem mcp` attaches for a
    client working there. See `sandmem docs scopes`.
    """
    try:
        report = memory_scopes(workspace)
    except UserError as exc:
        raise ConfigError(str(exc)) from None
    if as_json:
        emit_model(report)
        return
    if report.project is None:
        click.echo(f"{workspace.absolute()} is not in a project (no marker here or above)")
    for scope in report.scopes:
        held = "" if scope.memory else " (no memory yet)"
        if scope.store is not None:
            held = f" (local copy {scope.root})" if scope.memory else " (not read yet)"
        click.echo(f"[{scope.name}] {scope.mode:<10} {scope.store or scope.root}{held}")
