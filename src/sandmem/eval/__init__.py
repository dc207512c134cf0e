"""``sandmem eval`` owns running the same multi-step tasks with and without memory, an
application that imports the public surface (``sandmem``, ``sandmem.memory``,
``sandmem.testing``) and the floors below, never ``cli`` or ``demo``.

    report = await run_eval("builtin", EvalOptions(out=Path("eval-out")))

writes ``report.json``, ``report.md`` and ``report.html`` into ``out`` and returns the
:class:`EvalReport`. Finished cells are kept in ``out/cells/``, so an interrupted eval resumes
where it stopped. ``docs/eval.md`` documents the suite format, conditions and metrics.
"""

from __future__ import annotations

from pathlib import Path

from sandmem.eval._report import EvalReport, build_report, write_report
from sandmem.eval._runner import SCRIPTED, CellResult, EvalOptions, StepMetrics, run_suite
from sandmem.eval._suite import BUILTIN, CONDITIONS, Suite, Task, load_suite, parse_suite

__all__ = [
    "BUILTIN",
    "CONDITIONS",
    "SCRIPTED",
    "CellResult",
    "EvalOptions",
    "EvalReport",
    "StepMetrics",
    "Suite",
    "Task",
    "load_suite",
    "parse_suite",
    "run_eval",
]


async def run_eval(suite: str | Path | Suite, options: EvalOptions) -> EvalReport:
    """Run ``suite`` (a ``Suite``, a suite file, or ``"builtin"``) and write its report."""
    loaded = suite if isinstance(suite, Suite) else load_suite(suite)
    cells = await run_suite(loaded, options)
    report = build_report(loaded, options, cells)
    write_report(report, options.out)
    return report
