"""``sandmem demo``: offline (scripted agent + extractive engine) and through the real OpenAI
client against the local fake server."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from fake_openai import FakeOpenAIServer, FakeReply, FakeRequest

from sandmem.demo import (
    FIX_TASK,
    REGRESSION_TASK,
    demo_command,
    memory_carried,
    run_demo,
)
from sandmem.demo._scenario import wants_offline
from sandmem.models import ModelRequest

FIXED = "round(subtotal * (1 + tax_rate), 2)"
REPO = Path(__file__).resolve().parents[2]


async def test_offline_demo_shows_memory_carried_to_run_two(tmp_path: Path) -> None:
    out = io.StringIO()
    code = await run_demo(workdir=tmp_path / "keep", out=out)
    text = out.getvalue()
    assert code == 0, text
    head = "\n".join(text.splitlines()[:7])
    assert f"Workspaces: {tmp_path / 'keep'} (kept when the demo ends)." in head
    assert "OFFLINE" in head and "scripted policy" in head and "extractive engine" in head
    assert "Final answer (run 1):" in text and "Final answer (run 2):" in text
    assert "memories/\n" in text and "├── MEMORY.md" in text and "memory_summary.md" in text
    assert "sessions/\n" in text and "invoice-fix.jsonl" in text
    summary = text.split("memories/memory_summary.md:\n", 1)[1].split("\n[3/3]", 1)[0]
    assert "src/acme_metrics/report.py" in summary
    verdict = text.split("\nRun 1 did its task", 1)[1].splitlines()
    assert verdict[0].startswith(" (fix the bug): YES: format_invoice_total in src/acme_metrics")
    assert verdict[1].startswith(
        "Memory carried to run 2: YES: run 2's first model request carried run 1's memory"
    )
    assert verdict[2].startswith("Run 2 did its task (regression test): YES: tests/test_invoice")
    assert verdict[3] == "OK: run 1 fixed the bug and run 2 started with its memory."
    # the scripted agent's tool calls really ran: the fix and the new test are in the files
    run1 = tmp_path / "keep/run1-workspace"
    run2 = tmp_path / "keep/run2-workspace"
    assert FIXED in (run1 / "src/acme_metrics/report.py").read_text()
    assert "1 failed, 1 passed" in text and "3 passed" in text
    assert (run2 / "tests/test_invoice_total_regression.py").is_file()
    assert (run2 / "sessions/invoice-regression-test.jsonl").is_file()
    assert not list((run1 / "src").rglob("__pycache__"))
    # it ends by pointing at the viewer page of the kept workspace
    page = tmp_path / "keep/memory-view.html"
    assert text.rstrip().splitlines()[-1].endswith(f"(open it in a browser): {page}")
    html = page.read_text()
    assert 'data-status="done"' in html and "invoice-regression-test" in html


def test_sandmem_cli_runs_the_demo(tmp_path: Path) -> None:
    from sandmem.cli import cli

    result = CliRunner().invoke(cli, ["demo", "--offline", "--keep", str(tmp_path / "k")])
    assert result.exit_code == 0, result.output
    assert "OK: run 1 fixed the bug and run 2 started with its memory." in result.output


def test_python_m_sandmem_demo_exits_zero() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "SANDMEM_"))}
    proc = subprocess.run(
        [sys.executable, "-m", "sandmem.demo"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[2].startswith("Workspaces: ") and "sandmem-demo-" in lines[2]
    assert (
        "(temporary: removed when the demo ends; `sandmem demo --keep DIR` keeps them)"
        in (lines[2])
    )
    assert lines[3].startswith("Mode: OFFLINE")
    assert proc.stderr == ""  # no raw log lines


def _agent_reply(req: FakeRequest) -> FakeReply:
    """A small agent: a fixed plan of real tool calls per task, then a final answer."""
    task = req.last_user_text()
    if task == FIX_TASK:
        plan: list[tuple[str, dict[str, str]]] = [
            ("exec_command", {"cmd": "python -m pytest -q"}),
            (
                "apply_patch",
                {
                    "patch": "*** Begin Patch\n*** Update File: src/acme_metrics/report.py\n"
                    "-    return round(subtotal + tax_rate, 2)\n"
                    f"+    return {FIXED}\n*** End Patch"
                },
            ),
            ("exec_command", {"cmd": "python -m pytest -q"}),
        ]
        final = "Fixed format_invoice_total in src/acme_metrics/report.py; tests pass."
    else:
        test = "from acme_metrics.report import format_invoice_total\n\n\ndef test_it():\n"
        test += "    assert format_invoice_total(10.0, 0.1) == 11.0\n"
        patch = "*** Begin Patch\n*** Add File: tests/test_regression.py\n"
        patch += "".join(f"+{line}\n" for line in test.splitlines()) + "*** End Patch"
        plan = [
            ("apply_patch", {"patch": patch}),
            ("exec_command", {"cmd": "python -m pytest -q"}),
        ]
        final = "Added tests/test_regression.py (from memory: the invoice total fix)."
    step = len(req.tool_outputs())
    if step < len(plan):
        name, args = plan[step]
        return FakeReply(tool_calls=[(name, args, f"call_{len(task)}_{step}")])
    return FakeReply(text=final)


SUMMARY = "Fixed the invoice total in src/acme_metrics/report.py; run `python -m pytest -q`."


def small_agent(req: FakeRequest) -> FakeReply:
    """Agent, phase one (a JSON schema is asked for) and phase two (write_file is offered)."""
    if req.wants_json():
        return FakeReply.json(
            {
                "rollout_slug": "invoice-total",
                "rollout_summary": "Fixed src/acme_metrics/report.py (tax rate was added).",
                "raw_memory": "- format_invoice_total must apply the tax rate, not add it",
            }
        )
    if "write_file" in req.tool_names():
        if req.tool_outputs():
            return FakeReply(text="Consolidated.")
        # cite the conversation the brief names, so the consolidation is complete (an
        # incomplete one is replaced by the extractive fallback)
        cited = re.findall(r"rollout_summaries/[A-Za-z0-9._-]+\.md", req.instructions or "")
        memory = "## Invoice total\n- fixed\nSources: " + ", ".join(cited) + "\n"
        return FakeReply(
            tool_calls=[
                ("write_file", {"path": "memories/MEMORY.md", "content": memory}, "call_w1"),
                ("write_file", {"path": "memories/memory_summary.md", "content": SUMMARY}, "c2"),
            ]
        )
    return _agent_reply(req)


@pytest.mark.parametrize("api", ["responses", "chat_completions"])
async def test_demo_uses_the_real_client_with_openai_base_url(
    fake_openai: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, api: str
) -> None:
    fake_openai.handler = small_agent
    monkeypatch.setenv("OPENAI_BASE_URL", fake_openai.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    monkeypatch.setenv("SANDMEM_OPENAI_API", api)
    out = io.StringIO()
    code = await run_demo(workdir=tmp_path / "keep", out=out)
    text = out.getvalue()
    assert code == 0, text
    assert "OFFLINE" not in text and f"{api} API at {fake_openai.base_url}" in text
    requests = fake_openai.requests
    agent = [r for r in requests if "exec_command" in r.tool_names()]
    phase_one = [r for r in requests if r.wants_json()]
    phase_two = [r for r in requests if "write_file" in r.tool_names()]
    assert len(agent) == 4 + 3 and phase_one and phase_two
    assert all(r.tool_names() == [] for r in phase_one)
    run2_first = next(r for r in agent if r.last_user_text() == REGRESSION_TASK)
    assert SUMMARY in (run2_first.instructions or "")
    run1_first = next(r for r in agent if r.last_user_text() == FIX_TASK)
    assert SUMMARY not in (run1_first.instructions or "")
    assert FIXED in (tmp_path / "keep/run1-workspace/src/acme_metrics/report.py").read_text()
    assert (tmp_path / "keep/run2-workspace/tests/test_regression.py").is_file()
    assert "Final answer (run 2):" in text and SUMMARY in text


def test_offline_is_the_default_without_a_server(monkeypatch: pytest.MonkeyPatch) -> None:
    assert wants_offline(None, None) is True
    assert wants_offline("gpt-x", None) is False
    assert wants_offline(None, False) is False
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    assert wants_offline(None, None) is False
    assert wants_offline(None, True) is True


def test_memory_carried_checks_the_prompt_in_the_instructions() -> None:
    summary = "Fixed src/acme_metrics/report.py."
    assert not memory_carried(None, summary)
    assert not memory_carried(ModelRequest(instructions=summary, input=[]), summary)
    from sandmem.capabilities.memory import memory_read_prompt

    prompt = memory_read_prompt(summary, "memories", live_update=True)
    assert prompt is not None
    assert memory_carried(ModelRequest(instructions=f"Base.\n\n{prompt}", input=[]), summary)


def test_cli_refuses_offline_with_model_and_a_used_keep_dir(tmp_path: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(demo_command, ["--model", "gpt-x"])
    assert result.exit_code == 2 and "set OPENAI_API_KEY" in result.output
    result = runner.invoke(demo_command, ["--offline", "--model", "gpt-x"])
    assert result.exit_code == 2 and "--offline uses no model" in result.output
    (tmp_path / "used.txt").write_text("x")
    result = runner.invoke(demo_command, ["--keep", str(tmp_path)])
    assert result.exit_code == 2 and "not an empty directory" in result.output
    assert "--keep DIR" in runner.invoke(demo_command, ["--help"]).output


async def _reply(instructions: str, items: list[dict[str, object]]) -> list[dict[str, object]]:
    from sandmem.demo import scripted_engineer

    response = await scripted_engineer().get_response(
        ModelRequest(instructions=instructions, input=items)
    )
    return response.output


def _user(text: str) -> dict[str, object]:
    return {"type": "message", "role": "user", "content": text}


async def test_scripted_engineer_without_memory_asks_which_bug() -> None:
    output = await _reply("You are an engineer.", [_user(REGRESSION_TASK)])
    assert "cannot tell which bug" in str(output[0]["content"])


async def test_scripted_engineer_searches_memory_first_when_prompted() -> None:
    output = await _reply("... search `memories/MEMORY.md` ...", [_user(REGRESSION_TASK)])
    assert output[0]["name"] == "exec_command"
    assert "memories/MEMORY.md" in str(output[0]["arguments"])


async def test_scripted_engineer_notices_stale_memory() -> None:
    cat = {"type": "function_call", "call_id": "c1", "name": "exec_command"}
    cat["arguments"] = '{"cmd": "cat src/acme_metrics/report.py"}'
    out = {"type": "function_call_output", "call_id": "c1"}
    out["output"] = "Exit code: 0\nOutput:\n    return round(subtotal + tax_rate, 2)\n"
    history = [_user(FIX_TASK), {"type": "message", "role": "assistant", "content": "done"}]
    output = await _reply("", [*history, _user(REGRESSION_TASK), cat, out])
    assert "the fix is not in this workspace" in str(output[0]["content"])


async def test_scripted_engineer_knows_only_the_demo_tasks() -> None:
    output = await _reply("", [_user("Write a poem.")])
    assert "offline scripted agent" in str(output[0]["content"])
