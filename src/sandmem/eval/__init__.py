"""``sandmem eval`` owns running the same multi-step tasks with and without memory, an
application that imports the public surface (``sandmem``, ``sandmem.memory``,
``sandmem.testing``) and the floors below, never ``cli`` or ``demo``.

    report = await run_eval("builtin", EvalOptions(out=Path("eval-out")))

writes ``report.json``, ``report.md`` and ``report.html`` into ``out`` and returns the
:class:`EvalReport`. Finished cells are kept in ``out/cells/``, so an interrupted eval resumes
where it stopped; a cell is reused only when it was made with the same models, server, suite
and task (:class:`CellKey`). An error of the setup (server, key, model name, timeout) stops the
eval with :class:`EvalStopped` and keeps nothing of the cell it happened in.
``docs/eval.md`` documents the suite format, conditions and metrics.
"""

from __future__ import annotations

from pathlib import Path

from sandmem.eval._failures import EvalStopped
from sandmem.eval._key import CellKey, Settings
from sandmem.eval._report import EvalReport, build_report, what_ran, write_report
from sandmem.eval._runner import CellResult, EvalOptions, run_suite_detailed
from sandmem.eval._step import SCRIPTED, StepMetrics
from sandmem.eval._suite import BUILTIN, CONDITIONS, Suite, Task, load_suite, parse_suite

__all__ = [
    "BUILTIN",
    "CONDITIONS",
    "SCRIPTED",
    "CellKey",
    "CellResult",
    "EvalOptions",
    "EvalReport",
    "EvalStopped",
    "Settings",
    "StepMetrics",
    "Suite",
    "Task",
    "load_suite",
    "parse_suite",
    "run_eval",
    "what_ran",
]


async def run_eval(suite: str | Path | Suite, options: EvalOptions) -> EvalReport:
    """Run ``suite`` (a ``Suite``, a suite file, or ``"builtin"``) and write its report."""
    loaded = suite if isinstance(suite, Suite) else load_suite(suite)
    run = await run_suite_detailed(loaded, options)
    report = build_report(loaded, options, run)
    write_report(report, options.out)
    return report
