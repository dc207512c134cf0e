"""An interrupted eval resumes where it stopped: finished cells are kept, not rerun."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sandmem.eval import EvalStopped

_SUITE = """
name = "resume"
[[task]]
id = "first"
[task.files]
"a.txt" = "a"
[[task.step]]
prompt = "one"
check = "true"
[[task]]
id = "second"
[task.files]
"b.txt" = "b"
[[task.step]]
prompt = "two"
check = "test -f {release} || sleep 60"
"""


def _eval(suite: Path, out: Path, *extra: str) -> subprocess.Popen[str]:
    sandmem = str(Path(sys.executable).with_name("sandmem"))
    return subprocess.Popen(
        [sandmem, "eval", str(suite), "--out", str(out), *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def _cell(out: Path, name: str) -> Path | None:
    """The file of cell ``name`` (``<task>.<condition>.<repeat>``; its key's digest follows)."""
    found = list((out / "cells").glob(f"{name}.*.json"))
    assert len(found) <= 1, found
    return found[0] if found else None


def _wait_for(out: Path, name: str, proc: subprocess.Popen[str], timeout: float = 60.0) -> Path:
    deadline = time.monotonic() + timeout
    while (found := _cell(out, name)) is None:
        assert proc.poll() is None, proc.communicate()[0]
        assert time.monotonic() < deadline, f"cell {name} never appeared"
        time.sleep(0.02)
    return found


def test_killed_eval_resumes_without_rerunning_finished_cells(tmp_path: Path) -> None:
    release = tmp_path / "release"
    suite = tmp_path / "suite.toml"
    suite.write_text(_SUITE.format(release=release))
    out = tmp_path / "out"
    proc = _eval(suite, out)
    try:
        _wait_for(out, "first.no-memory.0", proc)
        time.sleep(0.3)  # the second task's check is now sleeping
    finally:
        proc.kill()
        proc.communicate(timeout=30)
    first = _cell(out, "first.memory.0")
    assert first is not None and not (out / "report.json").exists()
    assert not list((out / "cells").glob("second.*.json"))
    before = first.read_bytes(), first.stat().st_mtime_ns

    release.touch()
    proc = _eval(suite, out)
    output, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, output
    assert (first.read_bytes(), first.stat().st_mtime_ns) == before  # not rerun
    assert "first [" not in output and output.count("second [") == 2
    assert (out / "report.json").exists()
    assert sorted(p.name.rsplit(".", 2)[0] for p in (out / "cells").glob("*.json")) == [
        "first.memory.0",
        "first.no-memory.0",
        "second.memory.0",
        "second.no-memory.0",
    ]


def test_sigint_exits_130_and_says_how_to_resume(tmp_path: Path) -> None:
    suite = tmp_path / "suite.toml"
    suite.write_text(_SUITE.format(release=tmp_path / "never"))
    out = tmp_path / "out"
    proc = _eval(suite, out)
    try:
        _wait_for(out, "first.no-memory.0", proc)
        time.sleep(0.3)
        proc.send_signal(signal.SIGINT)
        output, _ = proc.communicate(timeout=30)
    finally:
        proc.kill()
        proc.communicate(timeout=30)
    assert proc.returncode == 130, output
    assert "2 finished cells are kept" in output and "rerun" in output


@pytest.mark.parametrize("fresh", [False, True], ids=["kept", "fresh"])
def test_ctrl_c_says_how_to_resume_without_losing_the_kept_cells(
    tmp_path: Path, fresh: bool
) -> None:
    suite = tmp_path / "suite.toml"
    suite.write_text(_SUITE.format(release=tmp_path / "never"))
    out = tmp_path / "out"
    proc = _eval(suite, out, *(["--fresh"] if fresh else []))
    try:
        _wait_for(out, "first.no-memory.0", proc)
        time.sleep(0.3)  # the second task's check is now sleeping
        proc.send_signal(signal.SIGINT)
        output, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=30)
    assert proc.returncode == 130, output
    said = output[output.index("interrupted:") :]
    assert "finished cells are kept" in said
    if fresh:
        assert "rerun the command without --fresh" in said and "same command" not in said
    else:
        assert "rerun the same command" in said and "without --fresh" not in said


@pytest.mark.parametrize("cell", [None, "first.memory.0"])
def test_a_stopped_fresh_eval_says_to_rerun_without_fresh(cell: str | None) -> None:
    plain = str(EvalStopped("the server refused the key", cell=cell))
    fresh = str(EvalStopped("the server refused the key", cell=cell, fresh=True))
    assert "rerun the same command" in plain and "--fresh" not in plain
    assert "rerun the command without --fresh" in fresh and "same command" not in fresh
