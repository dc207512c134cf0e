"""``sandmem eval``: the same tasks with and without memory, compared."""

from __future__ import annotations

import asyncio
from pathlib import Path

import click

from sandmem.cli._common import flush_timeout_option
from sandmem.cli._models import client_options
from sandmem.eval import (
    BUILTIN,
    CONDITIONS,
    SCRIPTED,
    EvalOptions,
    load_suite,
    run_eval,
    what_ran,
)
from sandmem.eval._failures import rerun_advice


def _conditions(value: str) -> tuple[str, ...]:
    names = tuple(part.strip() for part in value.split(",") if part.strip())
    unknown = [name for name in names if name not in CONDITIONS]
    if unknown or not names:
        raise click.BadParameter(f"use some of {', '.join(CONDITIONS)} (comma-separated)")
    return names


@click.command("eval")
@click.argument("suite", default=BUILTIN)
@click.option(
    "--model",
    "-m",
    default=SCRIPTED,
    show_default=True,
    help="The agent's model; `scripted` is the offline deterministic policy (a check of the "
    "machinery, not a measure of any model).",
)
@click.option("--memory-model", default=None, help="Model of both memory phases [the agent's].")
@click.option("--repeat", "-k", default=1, show_default=True, type=click.IntRange(1))
@click.option(
    "--backend", type=click.Choice(["local", "bwrap"]), default="local", show_default=True
)
@click.option("--concurrency", "-j", default=1, show_default=True, type=click.IntRange(1))
@click.option(
    "--conditions",
    default="memory,no-memory",
    show_default=True,
    help=f"Comma-separated, from: {', '.join(CONDITIONS)}.",
)
@click.option("--task", "tasks", multiple=True, help="Run only this task (repeatable).")
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("sandmem-eval"),
    show_default=True,
    help="Report directory; finished cells kept there let a rerun resume.",
)
@click.option(
    "--fresh", is_flag=True, help="Run every cell again, ignoring finished cells in --out."
)
@click.option(
    "--max-turns",
    type=click.IntRange(1),
    default=None,
    help="Turn limit of each agent run [the suite's max_turns].",
)
@click.option(
    "--max-tokens",
    type=click.IntRange(1),
    default=None,
    help="Cap on each agent request's output tokens [env SANDMEM_MAX_TOKENS; default 4096].",
)
@flush_timeout_option("memory generation at each step's stop")
@client_options
def eval_command(
    suite: str,
    model: str,
    memory_model: str | None,
    repeat: int,
    backend: str,
    concurrency: int,
    conditions: str,
    tasks: tuple[str, ...],
    out: Path,
    fresh: bool,
    max_turns: int | None,
    max_tokens: int | None,
    flush_timeout: float | None,
) -> None:
    """Run SUITE (a .toml file, or `builtin`) with and without memory and compare.

    Writes report.json, report.md and report.html into --out. An interrupted eval resumes
    where it stopped when rerun with the same --out (it says how many cells it reuses;
    --fresh runs them all again). A cell is reused only when it was made with the same
    models, server, suite and task. With a model, each model answers a test request before
    the first task; an error that is not a task failure (the server cannot be reached, the
    key or the model name is refused, a timeout) stops the eval with its reason and exit
    status 1, and nothing of the cell it happened in is kept.
    """
    try:
        chosen = _conditions(conditions)
    except click.BadParameter as exc:
        raise click.UsageError(f"--conditions: {exc.message}") from None
    loaded = load_suite(suite)
    options = EvalOptions(
        out=out,
        model=model,
        memory_model=memory_model,
        repeat=repeat,
        backend="bwrap" if backend == "bwrap" else "local",
        concurrency=concurrency,
        conditions=chosen,  # type: ignore[arg-type]
        progress=lambda line: click.echo(line),
        tasks=tasks or None,
        fresh=fresh,
        max_turns=max_turns,
        max_tokens=max_tokens,
        flush_timeout_s=flush_timeout,
    )
    if model == SCRIPTED:
        click.echo("Model: scripted (offline deterministic policy + extractive memory engine).")
    try:
        report = asyncio.run(run_eval(loaded, options))
    except KeyboardInterrupt:
        kept = len(list((out / "cells").glob("*.json")))
        click.echo(
            f"\ninterrupted: {kept} finished cells are kept in {out / 'cells'}; "
            f"{rerun_advice(fresh)}",
            err=True,
        )
        raise SystemExit(130) from None
    click.echo(f"\nReport: {out / 'report.md'}, {out / 'report.html'}, {out / 'report.json'}")
    for condition, totals in report.totals.items():
        click.echo(
            f"  {condition}: {totals['successes'].median:g} steps passed, "
            f"{totals['turns'].median:g} turns, {totals['input_tokens'].median:g} input tokens"
        )
    click.echo("What ran:")
    for label, text in what_ran(report):
        click.echo(f"  {label}: {text}")
