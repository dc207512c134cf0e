"""``sandmem demo`` owns the demo (memory carried across two runs, offline or on a real
model), an application that imports the public surface and the floors below, never ``cli``
or ``eval``.

- :func:`run_demo` — the scenario (async; returns the exit code);
- :data:`demo_command` — the click command (``sandmem demo``, ``python -m sandmem.demo``);
- :func:`invoice_workspace`, :func:`scripted_engineer`, :data:`FIX_TASK`,
  :data:`REGRESSION_TASK`, :func:`check_prerequisites` — the scenario's parts, reused by
  ``examples/``.
"""

from __future__ import annotations

from sandmem.demo._cli import demo_command
from sandmem.demo._policy import scripted_engineer
from sandmem.demo._scenario import RecordingModel, memory_carried, run_demo
from sandmem.demo._workspace import (
    FIX_TASK,
    REGRESSION_TASK,
    check_prerequisites,
    command_env,
    invoice_workspace,
    python_command,
)

__all__ = [
    "FIX_TASK",
    "REGRESSION_TASK",
    "RecordingModel",
    "check_prerequisites",
    "command_env",
    "demo_command",
    "invoice_workspace",
    "memory_carried",
    "python_command",
    "run_demo",
    "scripted_engineer",
]
