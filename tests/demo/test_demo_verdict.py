"""Issue 36: the demo's verdict says whether run 1 did its task, separately from whether memory
was carried (it printed "OK" when run 1 fixed nothing). Checked against the fake server with
agents that fix nothing, "fix" the test instead of the code, or run out of turns."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
from fake_openai import FakeOpenAIServer, FakeReply, FakeRequest
from test_demo import FIXED, small_agent

from sandmem.demo import FIX_TASK, REGRESSION_TASK, run_demo
from sandmem.demo._verdict import Check, verdict

DONE = Check(True, "fixed")
NOT_DONE = Check(False, "still wrong")


@pytest.mark.parametrize(
    ("run_1", "summary", "carried", "code", "last"),
    [
        (DONE, "memory", True, 0, "OK: run 1 fixed the bug and run 2 started with its memory."),
        (NOT_DONE, "memory", True, 1, "FAILED: memory was carried, but run 1 did not do its task"),
        (DONE, "", False, 1, "FAILED: run 2 did not start with run 1's memory."),
        (DONE, "memory", False, 1, "FAILED: run 2 did not start with run 1's memory."),
        (NOT_DONE, "  \n", False, 1, "FAILED: run 2 did not start with run 1's memory."),
        (NOT_DONE, "memory", False, 1, "FAILED: run 2 did not start with run 1's memory."),
    ],
)
def test_the_verdict_answers_each_question_separately(
    run_1: Check, summary: str, carried: bool, code: int, last: str
) -> None:
    no_test = Check(False, "no new test file under tests/")
    lines, got = verdict(run_1, no_test, summary, carried, len(summary.encode()) + 1)
    assert got == code
    assert lines[0] == (
        f"Run 1 did its task (fix the bug): {'YES' if run_1.done else 'NO'}: {run_1.detail}"
    )
    memory = lines[1]
    if not summary.strip():
        assert memory.startswith("Memory carried to run 2: NO: memory_summary.md is empty")
    elif carried:
        assert memory.startswith("Memory carried to run 2: YES:") and "7 B)" in memory
    else:
        assert memory.startswith("Memory carried to run 2: NO: run 2's first model request")
    assert lines[2] == "Run 2 did its task (regression test): NO: no new test file under tests/"
    assert lines[-1].startswith(last)
    assert sum(line.startswith(("OK", "FAILED")) for line in lines) == 1


def _agent_doing(run_1: list[tuple[str, dict[str, str]]], final: str = "Done.") -> Any:
    """``small_agent`` (memory phases, run 2) with run 1 replaced by ``run_1``'s tool calls."""

    def handler(req: FakeRequest) -> FakeReply:
        if req.wants_json() or "write_file" in req.tool_names():
            return small_agent(req)  # type: ignore[no-any-return]
        if req.last_user_text() != FIX_TASK:
            return small_agent(req)  # type: ignore[no-any-return]
        step = len(req.tool_outputs())
        if step < len(run_1):
            name, args = run_1[step]
            return FakeReply(tool_calls=[(name, args, f"call_r1_{step}")])
        return FakeReply(text=final)

    return handler


async def _demo(
    fake: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch, tmp: Path
) -> tuple[int, str]:
    monkeypatch.setenv("OPENAI_BASE_URL", fake.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    monkeypatch.setenv("SANDMEM_OPENAI_API", "chat_completions")
    out = io.StringIO()
    code = await run_demo(workdir=tmp / "keep", out=out)
    return code, out.getvalue()


def _verdict_lines(text: str) -> list[str]:
    at = text.index("\nRun 1 did its task")
    return text[at + 1 :].splitlines()[:4]


async def test_run_1_that_fixes_nothing_is_not_ok_although_memory_was_carried(
    fake_openai: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fake_openai.handler = _agent_doing(
        [("exec_command", {"cmd": "cat src/acme_metrics/report.py"})], final="Looks fine to me."
    )
    code, text = await _demo(fake_openai, monkeypatch, tmp_path)
    assert code == 1, text
    lines = _verdict_lines(text)
    assert lines[0].startswith("Run 1 did its task (fix the bug): NO: format_invoice_total is")
    assert "(120.0, 220.0)" not in lines[0] and "gave (80.5, 200.1)" in lines[0]
    assert lines[1].startswith("Memory carried to run 2: YES:")
    assert lines[3].startswith("FAILED: memory was carried, but run 1 did not do its task")
    assert "OK:" not in text
    assert "Check of run 1's task: NOT done" in text


async def test_editing_the_test_instead_of_the_code_is_not_a_fix(
    fake_openai: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    cheat = (
        "*** Begin Patch\n*** Update File: tests/test_report.py\n"
        "-    assert format_invoice_total(100.0, 0.25) == 125.0\n"
        "+    assert format_invoice_total(100.0, 0.25) == 100.25\n*** End Patch"
    )
    fake_openai.handler = _agent_doing(
        [("apply_patch", {"patch": cheat}), ("exec_command", {"cmd": "python -m pytest -q"})],
        final="Fixed: the tests pass now.",
    )
    code, text = await _demo(fake_openai, monkeypatch, tmp_path)
    assert code == 1, text
    assert "2 passed" in text  # the agent's own test run passed ...
    assert _verdict_lines(text)[0].startswith("Run 1 did its task (fix the bug): NO:")  # ... but
    run1 = tmp_path / "keep/run1-workspace"
    assert FIXED not in (run1 / "src/acme_metrics/report.py").read_text()


async def test_run_1_out_of_turns_still_reaches_run_2_and_is_reported(
    fake_openai: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    same = ("exec_command", {"cmd": "ls"})
    fake_openai.handler = _agent_doing([same] * 100)
    code, text = await _demo(fake_openai, monkeypatch, tmp_path)
    assert code == 1, text
    assert "Run 1 ended without a final answer after" in text and "MaxTurnsExceeded" in text
    assert "[3/3] Run 2" in text and "Final answer (run 2):" in text
    lines = _verdict_lines(text)
    assert lines[0].startswith("Run 1 did its task (fix the bug): NO:")
    assert lines[1].startswith("Memory carried to run 2: YES:")


async def test_a_real_fix_and_a_real_test_pass_every_check(
    fake_openai: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fake_openai.handler = small_agent
    code, text = await _demo(fake_openai, monkeypatch, tmp_path)
    assert code == 0, text
    lines = _verdict_lines(text)
    assert lines[0] == (
        "Run 1 did its task (fix the bug): YES: format_invoice_total in "
        "src/acme_metrics/report.py now applies the tax rate"
    )
    assert lines[2].startswith(
        "Run 2 did its task (regression test): YES: tests/test_regression.py added; the tests "
        "pass (3 passed"
    )
    assert REGRESSION_TASK in text
