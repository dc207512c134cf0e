"""Run sandmem's benchmarks and write the report (issues 9 and 15).

    python benchmarks/run.py --out BENCHMARKS.md     # every figure (what `make bench` runs)
    python benchmarks/run.py --only flush            # one figure, printed
    python benchmarks/run.py --only noop,exec        # several
    python benchmarks/run.py --update BENCHMARKS.md --only retrieval
                                    # re-run those figures, replace just their sections

Figures: flush (1), first-request (2), append (3), noop (4), selection (5), input-size (6),
exec (7), extractive (8), scale-out (9), history (10), ingest (11), scale (12),
adaptive (13), retrieval (14). Each figure module is ``benchmarks/bench_*.py`` with a ``run()``
that returns a ``bench_common.Figure``; every number and every comparison in the report is
printed from a measurement of the same run. Nothing here (or in the test suite) asserts a
timing: the Done-when verdicts are reported, not enforced.

``--update FILE`` keeps every other figure of FILE as it was and says in FILE's header when
each re-run figure was regenerated (and on what load), so one figure can be refreshed without
the full run.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
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
import bench_retrieval
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
    "retrieval": bench_retrieval.run,
    "real-model": bench_real_model.run,  # `make real-model`: serves a local LLM (~1 h), not in all
}
#: the header line ``--update`` keeps: which figures were regenerated on their own, and when
REGENERATED = "Regenerated on their own since:"


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


def _sections(text: str) -> tuple[str, dict[int, str]]:
    """FILE's head (up to the first figure) and its figure sections by number."""
    parts = re.split(r'(?m)^(?=<a id="figure-\d+"></a>$)', text)
    sections = {}
    for part in parts[1:]:
        number = int(re.match(r'<a id="figure-(\d+)">', part).group(1))  # type: ignore[union-attr]
        sections[number] = part.rstrip() + "\n"
    return parts[0], sections


def _summary_row(figure: Figure) -> str:
    return (
        f"| {figure.number} | [{figure.title}](#figure-{figure.number}) | {_verdict(figure)} | "
        f"`{figure.command}` |"
    )


def update(text: str, figures: list[Figure], machine: str, load: str) -> str:
    """``text`` (a report) with the sections and summary rows of ``figures`` replaced (or
    added), and a header line naming when each was regenerated."""
    head, sections = _sections(text)
    when = f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC"
    lines = head.rstrip("\n").split("\n")
    for figure in figures:
        sections[figure.number] = (
            f'<a id="figure-{figure.number}"></a>\n\n' + figure.markdown().rstrip() + "\n"
        )
        row = _summary_row(figure)
        numbered = [i for i, line in enumerate(lines) if line.startswith(f"| {figure.number} | ")]
        if numbered:
            lines[numbered[0]] = row
        else:
            rows = [
                (int(m.group(1)), i)
                for i, line in enumerate(lines)
                if (m := re.match(r"^\| (\d+) \| ", line))
            ]
            after = [i for number, i in rows if number < figure.number]
            before = [i for number, i in rows if number > figure.number]
            at = after[-1] + 1 if after else before[0] if before else len(lines)
            lines.insert(at, row)
    noted = {f.number: f"figure {f.number} at {when} ({load.lower()})" for f in figures}
    kept = [i for i, line in enumerate(lines) if line.startswith(REGENERATED)]
    if kept:
        for entry in lines[kept[0]][len(REGENERATED) :].strip().rstrip(".").split("; "):
            match = re.match(r"figure (\d+) ", entry)
            if match and int(match.group(1)) not in noted:
                noted[int(match.group(1))] = entry
        del lines[kept[0] : kept[0] + 2]
    note = f"{REGENERATED} " + "; ".join(noted[n] for n in sorted(noted)) + "."
    at = next((i for i, line in enumerate(lines) if line.startswith("Each figure states")), 1)
    lines[at:at] = [note, ""]
    body = "\n".join(lines).rstrip() + "\n\n"
    return body + "\n".join(sections[n] for n in sorted(sections)).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--out", type=Path, help="write the report here (default: stdout)")
    parser.add_argument(
        "--update",
        type=Path,
        metavar="FILE",
        help="re-run the --only figures and replace just their sections in FILE",
    )
    parser.add_argument(
        "--only",
        help=f"comma-separated figures to run: {', '.join(FIGURES)} (default: all)",
    )
    args = parser.parse_args(argv)
    every = [name for name in FIGURES if name != "real-model"]
    names = every if not args.only else [n.strip() for n in args.only.split(",")]
    if args.update is not None and not args.only:
        parser.error("--update needs --only (the figures to re-run)")
    unknown = [n for n in names if n not in FIGURES]
    if unknown:
        parser.error(f"unknown figure {', '.join(unknown)}; choose from {', '.join(FIGURES)}")
    # the figures measure a person with no personal or team memory: a run's default
    # `Memory()` reads the scopes of $SANDMEM_HOME, which would differ from machine to machine
    earlier = os.environ.get("SANDMEM_HOME")
    with tempfile.TemporaryDirectory(prefix="sandmem-bench-home-") as home:
        os.environ["SANDMEM_HOME"] = home
        try:
            return _run(args, names)
        finally:
            if earlier is None:
                os.environ.pop("SANDMEM_HOME", None)
            else:
                os.environ["SANDMEM_HOME"] = earlier


def _run(args: argparse.Namespace, names: list[str]) -> int:
    started = time.monotonic()
    machine, load = machine_line(), load_line()
    figures = []
    for name in names:
        print(f"running {name} ...", file=sys.stderr, flush=True)
        begun = time.monotonic()
        figures.append(FIGURES[name]())
        print(f"  {name}: {time.monotonic() - begun:.1f} s", file=sys.stderr, flush=True)
    if args.update is not None:
        old = args.update.read_text(encoding="utf-8")
        args.update.write_text(update(old, figures, machine, load), encoding="utf-8")
        print(f"updated {args.update}", file=sys.stderr)
        return 0
    text = report(figures, started, machine, load)
    if args.out is None:
        sys.stdout.write(text)
    else:
        args.out.write_text(text, encoding="utf-8")
        print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
