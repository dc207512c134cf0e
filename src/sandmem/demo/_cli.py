"""The ``sandmem demo`` command."""

from __future__ import annotations

import asyncio
from pathlib import Path

import click

from sandmem.demo._scenario import run_demo


@click.command("demo")
@click.option(
    "--model",
    default=None,
    metavar="NAME",
    help="Use this model for the agent and both memory phases (through OPENAI_API_KEY / "
    "OPENAI_BASE_URL).",
)
@click.option(
    "--offline/--online",
    default=None,
    help="Force the offline scripted agent and extractive engine, or a real model. Default: "
    "offline unless OPENAI_API_KEY or OPENAI_BASE_URL is set or --model is given.",
)
@click.option(
    "--keep",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    metavar="DIR",
    help="Keep both workspaces (with their memory) in DIR, a new or empty directory.",
)
@click.option(
    "--max-turns",
    type=click.IntRange(1),
    default=None,
    metavar="N",
    help="Turn limit of each run [12 offline, 40 on a model].",
)
@click.option(
    "--flush-timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    metavar="SECONDS",
    help="How long memory generation at each session's stop may take [600].",
)
@click.option(
    "--max-tokens",
    type=click.IntRange(1),
    default=None,
    metavar="N",
    help="Cap on each agent answer [env SANDMEM_MAX_TOKENS; default 4096].",
)
def demo_command(
    model: str | None,
    offline: bool | None,
    keep: Path | None,
    max_turns: int | None,
    flush_timeout: float | None,
    max_tokens: int | None,
) -> None:
    """Show memory carrying across two agent runs.

    Run 1 fixes a bug in a small workspace; the session stops, memory is generated and the
    workspace snapshotted; run 2, in a new session resumed from the snapshot, is asked to
    "add a regression test for the bug you fixed". The verdict says separately whether run 1
    fixed the bug (checked in the workspace), whether run 2's first model request carried
    run 1's memory, and whether run 2 added a passing test. Exits 0 only when run 1 fixed the
    bug and its memory was carried.
    """
    from sandmem._log_lines import readable_warnings

    with readable_warnings():
        code = asyncio.run(
            run_demo(
                model=model,
                offline=offline,
                workdir=keep,
                max_turns=max_turns,
                flush_timeout_s=flush_timeout,
                max_tokens=max_tokens,
            )
        )
    click.get_current_context().exit(code)
