"""Smoke test of the benchmark scripts (issues 9 and 15): every figure runs end to end with tiny
sizes and renders its section. No timing is asserted here, ever: timings live in BENCHMARKS.md."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
if str(BENCHMARKS) not in sys.path:
    sys.path.insert(0, str(BENCHMARKS))

import bench_adaptive  # noqa: E402
import bench_append  # noqa: E402
import bench_compare  # noqa: E402
import bench_exec  # noqa: E402
import bench_extractive  # noqa: E402
import bench_first_request  # noqa: E402
import bench_flush  # noqa: E402
import bench_history  # noqa: E402
import bench_ingest  # noqa: E402
import bench_input_size  # noqa: E402
import bench_noop  # noqa: E402
import bench_retrieval  # noqa: E402
import bench_retrieval_corpus  # noqa: E402
import bench_scale  # noqa: E402
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


def test_flush_figure_runs_the_default_flush_in_every_cell() -> None:
    figure = bench_flush.run(sizes=(1, 5), delays=(0.0,), repeat=1, slow_repeat=1)
    check_section(figure, "flush")
    default = bench_flush.DEFAULT_CONCURRENCY
    assert set(figure.data["cells"]) == {(0.0, 1, default), (0.0, 5, default), (0.0, 5, 5)}
    for (_, n, _), cell in figure.data["cells"].items():
        assert cell["p1_requests"] == n, "one phase-one request per rollout"
        assert cell["p2_requests"] >= 1, "phase two went through the model"
        assert cell["p1_tokens"] > 0 and cell["p2_tokens"] > 0
    assert figure.status is None, "the Done-when verdicts need the 300 ms cells"


def test_first_request_figure_times_a_run_with_memory() -> None:
    figure = bench_first_request.run(size=2_000, repeat=2)
    check_section(figure, "first-request")
    assert 0 < figure.data["first"] < figure.data["whole"]
    assert figure.data["recorded"] == 4, "every run was recorded as a rollout"
    assert figure.status is None
    assert len(bench_first_request.make_summary(2_000).encode()) == 2_000


def test_append_figure_measures_bursts_and_growth_per_append() -> None:
    figure = bench_append.run(sizes=(2, 4), repeat=1, burst=3)
    check_section(figure, "append")
    for row in figure.data["result"].values():
        assert row["bytes"] > 0.9 * bench_append.SEGMENT_BYTES
    assert figure.data["bursts"]["concurrent"] > 0 and figure.data["bursts"]["sequential"] > 0
    assert figure.status is None


def test_noop_figure_flushes_with_nothing_to_do() -> None:
    figure = bench_noop.run(count=6, size=4_000, repeat=2)
    check_section(figure, "noop")
    assert figure.data["requests"] == 0
    assert figure.data["noop_s"] > 0
    assert figure.status is None


def test_scripted_memory_model_cites_only_kept_conversations() -> None:
    import bench_model

    brief = (
        "- added (new):\n  - a1 (updated t, completed; summary memories/rollout_summaries/a1_x.md)"
        "\n- retained (kept):\n  - r1 (updated t, completed; summary "
        "memories/rollout_summaries/r1_y.md)\n- removed (forgotten):\n  - gone (updated t, "
        "completed; summary memories/rollout_summaries/gone_z.md)\n"
    )
    refs = bench_model._REF.findall(bench_model._kept_section(brief))
    assert [rid for rid, _ in refs] == ["a1", "r1"]
    files = bench_model.MemoryModel()._files(refs)
    assert "rollout_summaries/a1_x.md" in files["memories/MEMORY.md"]
    assert "gone" not in files["memories/MEMORY.md"]


def test_selection_figure_plans_over_raw_memories() -> None:
    figure = bench_selection.run(count=20, caps=(5, 20), repeat=1)
    check_section(figure, "selection")
    assert figure.data["selected"] == {5: 5, 20: 20}


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


def test_history_figure_times_the_version_in_both_writers() -> None:
    figure = bench_history.run(versions=3, repeat=1)
    check_section(figure, "history")
    big = figure.data["3 versions"]
    assert big["stored"] == 3
    for what in ("consolidation", "live edit"):
        assert 0 < big[what]["version"] < big[what]["op"]
        assert big[what]["bytes"] > 0
    assert big["prune"]["dropped"] == 1 and big["prune"]["bytes"] > 0


def test_synthetic_rollouts_are_deterministic_and_distinct() -> None:
    first = bench_extractive.synthetic_rollouts(30)
    assert first == bench_extractive.synthetic_rollouts(30)
    assert len(set(first.values())) == 30
    assert all(f'"rollout_id":"{rid}"' in text for rid, text in first.items())


def test_run_writes_a_report_with_the_machine_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(
        bench_run.FIGURES, "selection", lambda: bench_selection.run(count=5, caps=(5,), repeat=1)
    )
    out = tmp_path / "BENCHMARKS.md"
    assert bench_run.main(["--only", "selection", "--out", str(out)]) == 0
    text = out.read_text()
    assert text.startswith("# Benchmarks\n\n" + machine_line())
    assert "`python benchmarks/run.py --only selection`" in text
    with pytest.raises(SystemExit):
        bench_run.main(["--only", "nope"])


def test_ingest_figure_records_once_and_then_only_the_appended_turn() -> None:
    figure = bench_ingest.run(turns=5, output_bytes=2_000)
    assert figure.data["first_segments"] == 5
    assert figure.data["again_segments"] == 0
    assert figure.data["append_segments"] == 1
    assert figure.data["generated"]


def test_scale_figure_runs_on_tiny_layouts() -> None:
    figure = bench_scale.run(counts=(4, 8), repeat=1, settle=False)
    check_section(figure, "scale")
    results = figure.data["results"]
    assert [r["count"] for r in results] == [4, 8]
    assert all(r["view_bytes"] > 0 and r["index_bytes"] > 0 for r in results)


class _WordsEmbedder:
    """Words hashed into 16 buckets, unit length: a stand-in model for the figure's shape."""

    name = "words v1"
    dim = 16

    def _vector(self, text: str) -> list[float]:
        vector = [0.0] * self.dim
        for word in text.lower().split():
            vector[sum(word.encode()) % self.dim] += 1.0
        norm = sum(v * v for v in vector) ** 0.5 or 1.0
        return [v / norm for v in vector]

    def passages(self, texts: list[str]) -> list[list[float]]:
        return [self._vector(t) for t in texts]

    def query(self, text: str) -> list[float]:
        return self._vector(text)


def test_scale_figure_shows_a_bm25_search_next_to_a_hybrid_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from sandmem.memory.views import _vectors

    hybrid = _vectors.Choice("hybrid", _WordsEmbedder.name, "")
    monkeypatch.setattr(bench_scale._vectors, "choice", lambda: hybrid)
    with _vectors.use_embedder(_WordsEmbedder()):
        figure = bench_scale.run(counts=(4, 8), repeat=1, settle=False)
    text = check_section(figure, "scale")
    assert "| `search` | `search`, BM25 | import floor |" in text
    assert all(
        r["search_bm25_cold"] > 0 and r["search_bm25_call"] > 0 for r in figure.data["results"]
    )
    assert "status/list/search (BM25) as cold processes under 0.5 s" in text
    assert "hybrid search as a cold process under 0.5 s" in text
    # without the extra the table keeps the columns it always had
    monkeypatch.setattr(bench_scale._vectors, "choice", lambda: _vectors.Choice("bm25", None, "x"))
    plain = bench_scale.run(counts=(4,), repeat=1, settle=False).markdown()
    assert "| `search` | import floor |" in plain and "BM25 |" not in plain


def test_adaptive_figure_runs_small() -> None:
    figure = bench_adaptive.run(n=2, big=8, repeat=1)
    check_section(figure, "adaptive")
    limited = figure.data["limited"]
    assert limited["processed"] == 8 and limited["attempts"] == 0


def test_retrieval_figure_runs_small_and_its_questions_share_no_value() -> None:
    convs, facts = bench_retrieval_corpus.generate(8, max_turns=6)
    assert {c.format for c in convs} == set(bench_retrieval_corpus.FORMATS)
    assert {f.position for f in facts} == set(bench_retrieval_corpus.POSITIONS)
    assert len({f.value for f in facts}) == len(facts)
    assert all(f.value not in f.question and f.value in f.text for f in facts)
    figure = bench_retrieval.run(conversations=8, max_turns=6, scales=(6,))
    check_section(figure, "retrieval")
    quality = figure.data["quality"]
    assert quality["conversations"] == 8 and quality["facts"] == 16 and quality["generated"]
    for recall in quality["recall"].values():
        assert set(recall) == {1, 5, 10}
        assert all(0.0 <= v <= 1.0 for v in recall.values())
    assert [r["count"] for r in figure.data["latency"]] == [6]
    assert 0.0 <= quality["bm25_lookups"] <= 1.0


@pytest.mark.parametrize("seed", [7, 14])
def test_no_retrieval_value_is_part_of_another(seed: int) -> None:
    # "10x" inside "210x": a hit showing the other fact would count as evidence
    _, facts = bench_retrieval_corpus.generate(240, max_turns=4, seed=seed)
    values = [f.value for f in facts]
    assert len(values) == 480
    assert not [(a, b) for a in values for b in values if a != b and a in b]


def test_update_replaces_only_the_named_sections(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "BENCHMARKS.md"
    tiny = {
        "selection": lambda: bench_selection.run(count=5, caps=(5,), repeat=1),
        "ingest": lambda: bench_ingest.run(turns=2, output_bytes=200),
    }
    for name, fn in tiny.items():
        monkeypatch.setitem(bench_run.FIGURES, name, fn)
    assert bench_run.main(["--only", "selection,ingest", "--out", str(out)]) == 0
    before = out.read_text()
    ingest_section = before[before.index('<a id="figure-11">') :]
    assert bench_run.main(["--update", str(out), "--only", "selection"]) == 0
    after = out.read_text()
    assert after.count('<a id="figure-5">') == 1 and after.count('<a id="figure-11">') == 1
    assert after.endswith(ingest_section)  # the other figure is kept byte for byte
    assert "Regenerated on their own since: figure 5 at " in after
    assert bench_run.main(["--update", str(out), "--only", "ingest"]) == 0
    again = out.read_text()
    [note] = [line for line in again.splitlines() if line.startswith("Regenerated")]
    assert "figure 5 at " in note and "figure 11 at " in note
    with pytest.raises(SystemExit):
        bench_run.main(["--update", str(out)])  # which figures?


def test_update_adds_a_new_figures_summary_row_in_number_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "BENCHMARKS.md"
    tiny = {
        "selection": lambda: bench_selection.run(count=5, caps=(5,), repeat=1),
        "ingest": lambda: bench_ingest.run(turns=2, output_bytes=200),
    }
    for name, fn in tiny.items():
        monkeypatch.setitem(bench_run.FIGURES, name, fn)
    for first, then in (("ingest", "selection"), ("selection", "ingest")):
        assert bench_run.main(["--only", first, "--out", str(out)]) == 0
        assert bench_run.main(["--update", str(out), "--only", then]) == 0
        rows = [line for line in out.read_text().splitlines() if line.startswith("| 5 | ")]
        rows += [line for line in out.read_text().splitlines() if line.startswith("| 11 | ")]
        lines = out.read_text().splitlines()
        assert len(rows) == 2 and lines.index(rows[0]) + 1 == lines.index(rows[1])


def test_compare_shows_each_differing_cell_as_before_and_after() -> None:
    before = "## Figure 5: x\n\n| call | n | median |\n| --- | --- | --- |\n| a | 4 | 200 ms |\n"
    after = "## Figure 5: x\n\n| call | n | median |\n| --- | --- | --- |\n| a | 5 | 0.3 s |\n"
    table, differ, compared = bench_compare.side_by_side(before, after)
    assert "| a | 4 → 5 | 200 ms → 0.3 s (1.50x) |" in table
    assert (differ, compared) == (2, 3)
    same, differ, _ = bench_compare.side_by_side(before, before)
    assert differ == 0 and "| a | 4 | 200 ms |" in same
    wider = after.replace("| a | 5 | 0.3 s |", "| a | 5 | 0.3 s | extra |")
    shown, differ, _ = bench_compare.side_by_side(before, wider)
    assert differ == -1 and "before:" in shown and "extra" in shown


def test_compare_exports_a_commits_own_code(tmp_path: Path) -> None:
    git = BENCHMARKS.parent / ".git"
    if not git.exists():
        pytest.skip("not a git checkout")
    short = bench_compare.export("HEAD", tmp_path)
    assert short and (tmp_path / "src" / "sandmem" / "__init__.py").is_file()
    assert (tmp_path / "benchmarks" / "run.py").is_file()
