"""Smoke test of the benchmark scripts (issue 9): every figure runs end to end with tiny sizes
and renders its section. No timing is asserted here, ever: timings live in BENCHMARKS.md."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
if str(BENCHMARKS) not in sys.path:
    sys.path.insert(0, str(BENCHMARKS))

import bench_append  # noqa: E402
import bench_exec  # noqa: E402
import bench_extractive  # noqa: E402
import bench_flush  # noqa: E402
import bench_input_size  # noqa: E402
import bench_read  # noqa: E402
import bench_selection  # noqa: E402
from bench_common import CORPUS_DIR, Figure, machine_line  # noqa: E402


def _load_runner() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_run", BENCHMARKS / "run.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


bench_run = _load_runner()


def check_section(figure: Figure, key: str) -> str:
    text = figure.markdown()
    assert figure.key == key
    assert text.startswith(f"## Figure {figure.number}: ")
    assert f"Reproduce: `python benchmarks/run.py --only {key}`" in text
    assert "| ---" in text, "each figure has a table"
    assert "**What the numbers mean.**" in text
    return text


def test_flush_figure_runs_every_cell() -> None:
    figure = bench_flush.run(sizes=(1, 3), concurrency=(1, 2), delay_s=0.0, repeat=1)
    check_section(figure, "flush")
    assert set(figure.data["cells"]) == {(1, 1), (1, 2), (3, 1), (3, 2)}
    assert figure.data["cells"][(3, 2)]["peak"] >= 1
    assert figure.status is None, "the Done-when verdict needs N = 16 and concurrency 1 and 4"


def test_append_figure_measures_growth_per_append() -> None:
    figure = bench_append.run(sizes=(2, 4), repeat=1)
    check_section(figure, "append")
    for row in figure.data["result"].values():
        assert row["bytes"] > 0.9 * bench_append.SEGMENT_BYTES


def test_selection_figure_plans_over_raw_memories() -> None:
    figure = bench_selection.run(count=20, caps=(5, 20), repeat=1)
    check_section(figure, "selection")
    assert figure.data["selected"] == {5: 5, 20: 20}


@pytest.mark.parametrize("size", [2_000, bench_read.SUMMARY_BYTES])
def test_read_figure_builds_the_memory_prompt(size: int) -> None:
    figure = bench_read.run(size=size, repeat=2)
    check_section(figure, "read")
    assert figure.data["prompt_bytes"] > 0
    assert len(bench_read.make_summary(size).encode()) == size


def test_input_size_figure_covers_the_corpus() -> None:
    figure = bench_input_size.run(repeat=1)
    text = check_section(figure, "input-size")
    assert len(figure.data["rows"]) == len(list(CORPUS_DIR.glob("*.jsonl")))
    assert "**total (" in text


def test_exec_figure_runs_every_backend() -> None:
    figure = bench_exec.run(calls=2, rounds=1)
    check_section(figure, "exec")
    tool = figure.data["tool"]
    assert tool["unix_local"] > 0
    assert (tool["bubblewrap"] is None) == (tool["skip"] is not None)


def test_extractive_figure_runs_the_real_pipeline() -> None:
    figure = bench_extractive.run(count=13, repeat=1)
    check_section(figure, "extractive")
    assert figure.data["processed"] + figure.data["skipped"] == 13


def test_synthetic_rollouts_are_deterministic_and_distinct() -> None:
    first = bench_extractive.synthetic_rollouts(30)
    assert first == bench_extractive.synthetic_rollouts(30)
    assert len(set(first.values())) == 30
    assert all(f'"rollout_id":"{rid}"' in text for rid, text in first.items())


def test_run_writes_a_report_with_the_machine_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(bench_run.FIGURES, "read", lambda: bench_read.run(size=1_000, repeat=1))
    out = tmp_path / "BENCHMARKS.md"
    assert bench_run.main(["--only", "read", "--out", str(out)]) == 0
    text = out.read_text()
    assert text.startswith("# Benchmarks\n\n" + machine_line())
    assert "`python benchmarks/run.py --only read`" in text
    with pytest.raises(SystemExit):
        bench_run.main(["--only", "nope"])
