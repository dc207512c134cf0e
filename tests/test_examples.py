"""Every example in ``examples/`` runs offline (scripted agents + extractive engine), as
``python examples/NAME.py`` (a fork of a process that has imported sandmem:
``tests/python_forks.py``)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from python_forks import PythonForks

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def run_example(forks: PythonForks, name: str, keep: Path, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "SANDMEM_"))}
    proc = forks.run(
        [sys.executable, str(EXAMPLES / name), "--offline", "--keep", str(keep), *args],
        timeout=60,
        env=env,
        cwd=EXAMPLES.parent,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith("[offline]")
    return proc.stdout


def test_examples_are_all_tested() -> None:
    names = {p.name for p in EXAMPLES.glob("*.py") if not p.name.startswith("_")}
    assert names == {"memory.py", "memory_multi_agent_multiturn.py", "memory_read_only.py"}


def test_memory(tmp_path: Path, python_forks: PythonForks) -> None:
    out = run_example(python_forks, "memory.py", tmp_path)
    assert "Run 1: Inspect the workspace" in out and "Run 2: Add a regression test" in out
    assert "came from memory" in out
    ws = tmp_path / "workspace"
    assert "(1 + tax_rate)" in (ws / "src/acme_metrics/report.py").read_text()
    assert (ws / "tests/test_invoice_total_regression.py").is_file()
    assert len(list((ws / "sessions").glob("run-*.jsonl"))) == 2
    summary = (ws / "memories/memory_summary.md").read_text()
    assert "src/acme_metrics/report.py" in summary
    assert summary in out


def test_memory_multi_agent_multiturn(tmp_path: Path, python_forks: PythonForks) -> None:
    out = run_example(python_forks, "memory_multi_agent_multiturn.py", tmp_path)
    assert "Isolation: ok" in out
    assert "--- gtm memory ---" in out and "--- engineering memory ---" in out
    ws = tmp_path / "workspace"
    gtm = ws / "sessions/gtm/gtm-q2-pipeline-review.jsonl"
    eng = ws / "sessions/engineering/eng-invoice-test-fix.jsonl"
    # two runs per conversation, appended to one rollout file each
    assert len(gtm.read_text().splitlines()) == 2
    assert len(eng.read_text().splitlines()) == 2
    assert not (ws / "memories/MEMORY.md").exists()
    assert not list((ws / "sessions").glob("*.jsonl"))
    gtm_memory = " ".join(p.read_text() for p in (ws / "memories/gtm").rglob("*.md"))
    eng_memory = " ".join(p.read_text() for p in (ws / "memories/engineering").rglob("*.md"))
    assert "leads.csv" in gtm_memory and "report.py" not in gtm_memory
    assert "report.py" in eng_memory and "leads.csv" not in eng_memory
    assert (ws / "notes/outreach.md").is_file()


def test_memory_read_only(tmp_path: Path, python_forks: PythonForks) -> None:
    out = run_example(python_forks, "memory_read_only.py", tmp_path)
    assert "Checker: From memory:" in out and "still in place" in out
    assert "after the checker's run: unchanged" in out
    ws = tmp_path / "workspace"
    assert len(list((ws / "sessions").glob("*.jsonl"))) == 1  # the checker recorded nothing


_WITHOUT_PYTEST = """
import importlib.util, runpy, sys
real = importlib.util.find_spec
importlib.util.find_spec = lambda name, *a: None if name == "pytest" else real(name, *a)
sys.path.insert(0, sys.argv[1])
sys.argv = [sys.argv[2], "--offline"]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def test_examples_check_their_prerequisites(tmp_path: Path, python_forks: PythonForks) -> None:
    """Without pytest the examples stop at once (like the demo) instead of recording runs
    whose only lesson is "No module named pytest"."""
    for name in ("memory.py", "memory_read_only.py", "memory_multi_agent_multiturn.py"):
        proc = python_forks.run(
            [sys.executable, "-c", _WITHOUT_PYTEST, str(EXAMPLES), str(EXAMPLES / name)],
            timeout=60,
            cwd=tmp_path,
            env=dict(os.environ),
        )
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert proc.stderr.startswith("error: the workspace's tests run with pytest, which is")
        assert "pip install pytest" in proc.stderr
        assert list(tmp_path.iterdir()) == []
