"""The demo's workspace: a tiny package with an invoice bug and a test that catches it."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from sandmem._errors import UserError
from sandmem.sandboxes import File, Manifest
from sandmem.sandboxes._local import DEFAULT_PATH

FIX_TASK = "Inspect the workspace and fix the invoice total bug in src/acme_metrics/report.py."
REGRESSION_TASK = "Add a regression test for the bug you fixed."

#: the file the first run fixes
BUGGY_FILE = "src/acme_metrics/report.py"

_PYPROJECT = """\
[project]
name = "acme-metrics"
version = "0.1.0"
requires-python = ">=3.11"

[tool.pytest.ini_options]
pythonpath = ["src"]
testpaths = ["tests"]
addopts = "-p no:cacheprovider"
"""

_README = """\
# acme-metrics

Small helpers for ACME's billing reports.

- `acme_metrics.report` formats invoice lines and totals.
"""

_REPORT = '''\
"""Invoice reporting helpers."""


def format_invoice_line(description: str, amount: float) -> str:
    """One invoice line: the description padded to 30 characters, then the amount."""
    return f"{description:<30}{amount:>10.2f}"


def format_invoice_total(subtotal: float, tax_rate: float) -> float:
    """The total due: the subtotal plus tax at ``tax_rate`` (0.2 means 20 %)."""
    return round(subtotal + tax_rate, 2)
'''

_TEST = """\
from acme_metrics.report import format_invoice_line, format_invoice_total


def test_invoice_line_is_aligned():
    assert format_invoice_line("Widgets", 12.5) == "Widgets" + " " * 23 + "     12.50"


def test_invoice_total_applies_tax():
    assert format_invoice_total(100.0, 0.25) == 125.0
"""


def invoice_workspace() -> Manifest:
    """The demo workspace: ``src/acme_metrics/report.py`` whose ``format_invoice_total`` adds the
    tax rate instead of applying it, ``pyproject.toml``, ``README.md`` and a failing test."""
    return Manifest(
        entries={
            "pyproject.toml": File(content=_PYPROJECT),
            "README.md": File(content=_README),
            "src/acme_metrics/__init__.py": File(content='"""ACME billing metrics."""\n'),
            BUGGY_FILE: File(content=_REPORT),
            "tests/test_report.py": File(content=_TEST),
        }
    )


def check_prerequisites() -> None:
    """Raise ``UserError`` when the workspace's tests cannot run: they need pytest importable
    by this Python (the commands call ``python -m pytest`` through :func:`command_env`), or the
    runs would only see "No module named pytest" and remember that."""
    if importlib.util.find_spec("pytest") is None:
        raise UserError(
            f"the workspace's tests run with pytest, which is not installed for {sys.executable}: "
            "pip install pytest"
        )


def python_command() -> str:
    """How commands in the workspace call the Python that runs sandmem (found through
    :func:`command_env`'s ``PATH``)."""
    here = Path(sys.executable)
    return "python" if (here.parent / "python").exists() else here.name


def command_env() -> dict[str, str]:
    """Environment for the sandbox's commands: the directory of the running interpreter first
    on ``PATH`` (so ``python -m pytest`` finds the pytest installed next to sandmem), no
    bytecode files and no third-party pytest plugins in the workspace."""
    return {
        "PATH": f"{Path(sys.executable).parent}:{DEFAULT_PATH}",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
    }
