"""Run sandmem's benchmarks and write the report (issues 9 and 15).

    python benchmarks/run.py --out BENCHMARKS.md     # every figure (what `make bench` runs)
    python benchmarks/run.py --only flush            # one figure, printed
    python benchmarks/run.py --only noop,exec        # several

Figures: flush (1), first-request (2), append (3), noop (4), selection (5), input-size (6),
exec (7), extractive (8), scale-out (9), history (10), ingest (11), scale (12),
adaptive (13). Each figure module is ``benchmarks/bench_*.py`` with a ``run()`` that returns a
``bench_common.Figure``; every number and every comparison in the report is printed from a
measurement of the same run. Nothing here (or in the test suite) asserts a timing: the
Done-when verdicts are reported, not enforced.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import bench_adaptive
import bench_append
import bench_exec
import bench_extractive
import bench_first_request
import bench_flush
import bench_history
import bench_ingest
import bench_input_size
import bench_noop
import bench_real_model
import bench_scale
import bench_scale_out
import bench_selection
from bench_common import Figure, load_line, machine_line

FIGURES: dict[str, Callable[[], Figure]] = {
    "flush": bench_flush.run,
    "first-request": bench_first_request.run,
    "append": bench_append.run,
    "noop": bench_noop.run,
    "selection": bench_selection.run,
    "input-size": bench_input_size.run,
    "exec": bench_exec.run,
    "extractive": bench_extractive.run,
    "scale-out": bench_scale_out.run,
    "history": bench_history.run,
    "ingest": bench_ingest.run,
    "scale": bench_scale.run,
    "adaptive": bench_adaptive.run,
    "real-model": bench_real_model.run,  # `make real-model`: serves a local LLM (~1 h), not in all
}


def _verdict(figure: Figure) -> str:
    if figure.status is None:
        return "no target"
    if "**MISSED**" in figure.status:
        return "**missed**"
    return "met"


def report(figures: list[Figure], started: float, machine: str, load: str) -> str:
    minutes = (time.monotonic() - started) / 60
    summary = "\n".join(
        f"| {f.number} | [{f.title}](#figure-{f.number}) | {_verdict(f)} | `{f.command}` |"
        for f in figures
    )
    lines = [
        "# Benchmarks",
        "",
        machine + ".",
        "",
        f"{load}; at the end: {load_line().split(': ', 1)[-1]}. "
        f"Generated {datetime.now(UTC):%Y-%m-%d %H:%M} UTC by `make bench` "
        f"(`python benchmarks/run.py --out BENCHMARKS.md`) in {minutes:.1f} min.",
        "",
        "Each figure states how many runs its medians are over. The machine is shared (the "
        "load averages above), so absolute numbers carry noise. Every number and every "
        "comparison below is printed by the script from a measurement of this run. The test "
        "suite only smoke-tests these scripts with tiny sizes "
        "(`tests/test_benchmarks_smoke.py`); it never asserts a timing.",
        "",
        "| figure | what | Done-when | reproduce |",
        "| ---: | --- | --- | --- |",
        summary,
        "",
    ]
    for figure in figures:
        lines += [f'<a id="figure-{figure.number}"></a>', "", figure.markdown()]
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--out", type=Path, help="write the report here (default: stdout)")
    parser.add_argument(
        "--only",
        help=f"comma-separated figures to run: {', '.join(FIGURES)} (default: all)",
    )
    args = parser.parse_args(argv)
    every = [name for name in FIGURES if name != "real-model"]
    names = every if not args.only else [n.strip() for n in args.only.split(",")]
    unknown = [n for n in names if n not in FIGURES]
    if unknown:
        parser.error(f"unknown figure {', '.join(unknown)}; choose from {', '.join(FIGURES)}")
    started = time.monotonic()
    machine, load = machine_line(), load_line()
    figures = []
    for name in names:
        print(f"running {name} ...", file=sys.stderr, flush=True)
        begun = time.monotonic()
        figures.append(FIGURES[name]())
        print(f"  {name}: {time.monotonic() - begun:.1f} s", file=sys.stderr, flush=True)
    text = report(figures, started, machine, load)
    if args.out is None:
        sys.stdout.write(text)
    else:
        args.out.write_text(text, encoding="utf-8")
        print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
