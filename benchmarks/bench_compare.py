"""Figures of two commits side by side, measured on this machine in one run (issue 38).

    python benchmarks/bench_compare.py --against 21cf5be --only flush,noop,append
    python benchmarks/bench_compare.py --against 21cf5be --only flush --update BENCHMARKS.md

A restructure that must not change behaviour is checked by re-measuring its figures against
the commit before it. ``--against REV`` exports that commit's ``src/``, ``benchmarks/`` and
``tests/`` (``git archive``) into a temporary directory and runs each named figure there with
its own code, and here with this tree's code, one after the other (the order alternates from
figure to figure so drift in the machine's load does not always favour one side). Each
figure's tables are then printed once, every cell that differs as ``before → after``, with the
ratio for timings. ``--update FILE`` puts the result in FILE as figure 16 (the
``run.py --update`` way); without it the Markdown is printed.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from bench_common import ROOT, Figure, load_line, machine_line

NUMBER = 16


class _Compared(Figure):
    """Figure 16 names its own script as the way to reproduce it."""

    against: str = ""

    @property
    def command(self) -> str:
        return f"python benchmarks/bench_compare.py --against {self.against} --only ..."


#: a cell that is one measurement: a number and an optional unit (timings get a ratio)
_MEASURE = re.compile(r"^(?P<value>\d[\d,]*(?:\.\d+)?)\s*(?P<unit>µs|ms|s|min)?(?:\b.*)?$")
_TO_SECONDS = {"µs": 1e-6, "ms": 1e-3, "s": 1.0, "min": 60.0}


def export(rev: str, into: Path) -> str:
    """``rev``'s ``src``, ``benchmarks`` and ``tests`` under ``into``; returns its short hash."""
    short = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", f"{rev}^{{commit}}"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    archive = into / "tree.tar"
    subprocess.run(
        [
            "git",
            "-C",
            str(ROOT),
            "archive",
            "-o",
            str(archive),
            short,
            "src",
            "benchmarks",
            "tests",
        ],
        check=True,
    )
    with tarfile.open(archive) as tar:
        tar.extractall(into, filter="data")
    archive.unlink()
    return short


def run_figure(tree: Path, key: str) -> str:
    """The Markdown section of figure ``key`` measured with ``tree``'s code."""
    env = dict(os.environ, PYTHONPATH=f"{tree / 'src'}{os.pathsep}{tree / 'benchmarks'}")
    check = subprocess.run(
        [sys.executable, "-c", "import sandmem, sys; sys.stdout.write(sandmem.__file__)"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    if not Path(check).resolve().is_relative_to(tree.resolve()):
        raise SystemExit(f"sandmem imported from {check}, not from {tree}: is PYTHONPATH ignored?")
    done = subprocess.run(
        [sys.executable, str(tree / "benchmarks" / "run.py"), "--only", key],
        env=env,
        cwd=tree,
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:  # shown in the figure; the other figures still run
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return f"## Figure: {key} failed (exit {done.returncode}): {last}\n"
    text = done.stdout
    return text[text.index("## Figure ") :]


def _tables(section: str) -> list[list[list[str]]]:
    tables: list[list[list[str]]] = []
    current: list[list[str]] = []
    for line in section.splitlines():
        if line.startswith("|"):
            current.append([cell.strip() for cell in line.strip().strip("|").split("|")])
        elif current:
            tables.append(current)
            current = []
    if current:
        tables.append(current)
    return tables


def _cell(before: str, after: str) -> str:
    if before == after:
        return after
    old, new = _MEASURE.match(before), _MEASURE.match(after)
    if old and new and old["unit"] in _TO_SECONDS and new["unit"] in _TO_SECONDS:
        a = float(old["value"].replace(",", "")) * _TO_SECONDS[old["unit"]]
        b = float(new["value"].replace(",", "")) * _TO_SECONDS[new["unit"]]
        if a > 0:
            return f"{before} → {after} ({b / a:.2f}x)"
    return f"{before} → {after}"


def side_by_side(before: str, after: str) -> tuple[str, int, int]:
    """``after``'s tables with each differing cell as ``before → after``; also how many cells
    differ and how many are compared. Tables whose shapes differ are shown both whole."""
    old_tables, new_tables = _tables(before), _tables(after)
    lines: list[str] = []
    differ = compared = 0
    if [[len(r) for r in t] for t in old_tables] != [[len(r) for r in t] for t in new_tables]:
        lines += ["Tables differ in shape; before:", "", *_render(old_tables), "after:", ""]
        return "\n".join([*lines, *_render(new_tables)]), -1, 0
    merged = []
    for old_table, new_table in zip(old_tables, new_tables, strict=True):
        rows = []
        for index, (old_row, new_row) in enumerate(zip(old_table, new_table, strict=True)):
            if index == 1:  # the |---| line
                rows.append(new_row)
                continue
            cells = [_cell(a, b) for a, b in zip(old_row, new_row, strict=True)]
            if index > 1:
                compared += len(cells)
                differ += sum(a != b for a, b in zip(old_row, new_row, strict=True))
            rows.append(cells)
        merged.append(rows)
    return "\n".join(_render(merged)), differ, compared


def _render(tables: list[list[list[str]]]) -> list[str]:
    out: list[str] = []
    for table in tables:
        out += ["| " + " | ".join(row) + " |" for row in table] + [""]
    return out


def run(against: str, keys: list[str]) -> Figure:
    with tempfile.TemporaryDirectory(prefix="sandmem-compare-") as tmp:
        old_tree = Path(tmp)
        short = export(against, old_tree)
        here = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(ROOT), "status", "--porcelain", "src", "benchmarks"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        body = [
            f"Before: commit {short}. After: commit {here}"
            + (" with uncommitted changes" if dirty else "")
            + ". Each figure below was measured with each commit's own code and benchmark "
            "script, one after the other in this run; a cell that differs reads "
            "`before → after` (timings with the ratio after / before). "
            f"{load_line()}.",
            "",
        ]
        counts = []
        for index, key in enumerate(keys):
            order = [("before", old_tree), ("after", ROOT)]
            if index % 2:
                order.reverse()
            print(f"comparing {key} ...", file=sys.stderr, flush=True)
            begun = time.monotonic()
            sections = {side: run_figure(tree, key) for side, tree in order}
            print(f"  {key}: {time.monotonic() - begun:.1f} s", file=sys.stderr, flush=True)
            title = sections["after"].splitlines()[0].removeprefix("## ")
            failed = [
                f"{side}: {text.splitlines()[0][3:]}"
                for side, text in sections.items()
                if " failed (exit " in text.splitlines()[0]
            ]
            if failed:
                counts.append((key, -2, 0))
                body += [f"**{key}**: " + "; ".join(failed), ""]
                continue
            table, differ, compared = side_by_side(sections["before"], sections["after"])
            counts.append((key, differ, compared))
            body += [f"**{title}** (`{key}`, {order[0][0]} measured first)", "", table, ""]
    summary = "; ".join(
        f"{key}: failed"
        if differ == -2
        else f"{key}: tables changed shape"
        if differ < 0
        else f"{key}: {differ} of {compared} cells differ"
        for key, differ, compared in counts
    )
    figure = _Compared(
        key="compare",
        number=NUMBER,
        title=f"Before and after a restructure: figures of commit {short} and {here}",
        body="\n".join(body) + f"\nCells compared: {summary}. {machine_line()}.",
        meaning=(
            "Timings on a shared machine vary from run to run; a restructure that changed no "
            "behaviour shows the same counts (requests, tokens, bytes, rows) on both sides and "
            "timings within that noise. Every number here was measured in this run."
        ),
        data={"counts": counts, "before": short, "after": here},
    )
    figure.against = short
    return figure


def main(argv: list[str] | None = None) -> int:
    import run as bench_run  # benchmarks/run.py; imported here so it can import this module

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--against", required=True, help="the commit to compare with")
    parser.add_argument("--only", required=True, help="comma-separated figures (see run.py)")
    parser.add_argument("--update", type=Path, metavar="FILE", help="put figure 16 in FILE")
    args = parser.parse_args(argv)
    keys = [k.strip() for k in args.only.split(",") if k.strip()]
    unknown = [k for k in keys if k not in bench_run.FIGURES]
    if unknown:
        parser.error(f"unknown figure {', '.join(unknown)}")
    machine, load = machine_line(), load_line()
    figure = run(args.against, keys)
    if args.update is None:
        sys.stdout.write(figure.markdown())
        return 0
    old = args.update.read_text(encoding="utf-8")
    args.update.write_text(bench_run.update(old, [figure], machine, load), encoding="utf-8")
    print(f"updated {args.update}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
