"""``sandmem run`` through the fake OpenAI server, plus the CLI's shared behaviour (help,
errors, the demo command)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import click
import pytest
from cli_workspaces import invoke, memory_server_handler
from click.testing import CliRunner
from fake_openai import FakeOpenAIServer, FakeReply, FakeRequest

import sandmem
from sandmem.cli import cli
from sandmem.cli._run_cmd import paired_calls
from sandmem.memory import GenerationReport

ANSWER = "The invoice total now multiplies the tax rate."


@pytest.fixture
def server(fake_openai: FakeOpenAIServer) -> FakeOpenAIServer:
    fake_openai.handler = memory_server_handler(ANSWER)
    return fake_openai


@pytest.fixture
def env(server: FakeOpenAIServer) -> dict[str, str]:
    return {"OPENAI_BASE_URL": server.base_url}


def agent_requests(server: FakeOpenAIServer) -> list[FakeRequest]:
    return [r for r in server.requests if not r.wants_json() and "write_file" not in r.tool_names()]


def test_run_prints_the_answer_records_and_generates_memory(
    tmp_path: Path, server: FakeOpenAIServer, env: dict[str, str]
) -> None:
    (tmp_path / "app.py").write_text("print('hi')\n")
    result = invoke(
        "run",
        "-w",
        tmp_path,
        "--engine",
        "extractive",
        "--session",
        "fix-1",
        "Fix",
        "the bug",
        env=env,
    )
    assert result.exit_code == 0, result.output
    assert result.stdout == ANSWER + "\n"
    assert "✓ fix-1: extracted" in result.stderr
    assert "conversation: fix-1 (continue it with --session fix-1)" in result.stderr
    [segment] = [
        json.loads(x) for x in (tmp_path / "sessions/fix-1.jsonl").read_text().splitlines()
    ]
    assert segment["input"][0]["content"] == "Fix the bug"
    assert segment["final_output"] == ANSWER
    assert (tmp_path / "memories/raw_memories/fix-1.md").exists()
    assert "Fix the bug" in (tmp_path / "memories/MEMORY.md").read_text()
    [request] = agent_requests(server)
    assert {"exec_command", "apply_patch"} <= set(request.tool_names())
    assert len(server.requests) == 1  # the extractive engine needs no model


def test_run_continues_a_conversation_and_reads_memory(
    tmp_path: Path, server: FakeOpenAIServer, env: dict[str, str]
) -> None:
    args = ("run", "-w", tmp_path, "--engine", "extractive", "--session", "conv")
    assert invoke(*args, "Fix the invoice bug", env=env).exit_code == 0
    assert invoke(*args, "Now add a regression test", env=env).exit_code == 0
    first, second = agent_requests(server)
    assert "<memory_summary>" not in (first.instructions or "")
    assert "<memory_summary>" in (second.instructions or "")
    history = json.dumps(second.items)  # the first run is replayed from sessions/conv.jsonl
    assert history.index("Fix the invoice bug") < history.index(ANSWER)
    assert history.index(ANSWER) < history.index("Now add a regression test")
    lines = (tmp_path / "sessions/conv.jsonl").read_text().splitlines()
    assert len(lines) == 2  # one rollout, two segments, no duplicated history
    assert len(json.loads(lines[1])["input"]) == 1


def json_events(stdout: str) -> dict[str, dict[str, Any]]:
    """``--json`` output: one JSON object per line, by type (the last one of each type)."""
    return {event["type"]: event for event in map(json.loads, stdout.splitlines())}


def test_run_with_a_model_for_memory_too(
    tmp_path: Path, server: FakeOpenAIServer, env: dict[str, str]
) -> None:
    result = invoke("run", "-w", tmp_path, "-m", "fake-model", "--json", "Say hi", env=env)
    assert result.exit_code == 0, result.output
    events = json_events(result.stdout)
    assert events["result"]["final_output"] == ANSWER
    rid = events["result"]["rollout_id"]
    assert rid.startswith("run-") and events["start"]["rollout_id"] == rid
    assert events["memory"]["processed"] == [rid] and events["memory"]["phase_two"] == "done"
    # the memory event is the API's GenerationReport, as `sandmem memory generate --json` prints
    report = GenerationReport.model_validate(
        {k: v for k, v in events["memory"].items() if k != "type"}
    )
    assert report.complete and set(events["memory"]) == {"type", *GenerationReport.model_fields}
    assert events["end"] == {"type": "end", "exit_code": 0, "problems": []}
    assert {r.model for r in server.requests} == {"fake-model"}
    assert any(r.wants_json() for r in server.requests)  # phase one went to the server
    assert f"learned in conversation {rid}" in (tmp_path / "memories/MEMORY.md").read_text()


def test_run_without_memory(tmp_path: Path, server: FakeOpenAIServer, env: dict[str, str]) -> None:
    (tmp_path / "memories").mkdir()
    (tmp_path / "memories/memory_summary.md").write_text("Use tabs.\n")
    result = invoke(
        "run", "-w", tmp_path, "--no-memory-read", "--no-memory-generate", "hello", env=env
    )
    assert result.exit_code == 0, result.output
    assert not (tmp_path / "sessions").exists()
    [request] = server.requests
    assert "Use tabs." not in (request.instructions or "")
    read_only = invoke("run", "-w", tmp_path, "--no-memory-generate", "hello", env=env)
    assert read_only.exit_code == 0
    assert "Use tabs." in (server.requests[-1].instructions or "")
    assert not (tmp_path / "sessions").exists()


def test_run_failure_is_recorded_and_one_line(
    tmp_path: Path, server: FakeOpenAIServer, env: dict[str, str]
) -> None:
    server.handler = lambda req: FakeReply(tool_calls=[("exec_command", {"cmd": "true"}, "c")])
    result = invoke(
        "run",
        "-w",
        tmp_path,
        "--engine",
        "extractive",
        "--max-turns",
        "2",
        "--session",
        "loop",
        "spin",
        env=env,
    )
    assert result.exit_code == 1
    lines = result.stderr.splitlines()
    error = next(i for i, line in enumerate(lines) if line.startswith("Error: "))
    assert lines[error].startswith(
        "Error: the run failed (recorded in sessions/loop.jsonl): the run reached max_turns=2"
    )
    assert error < lines.index("memory (memories/):")  # the run's own error comes first
    assert sum(line.startswith("Error: ") for line in lines) == 1
    segment = json.loads((tmp_path / "sessions/loop.jsonl").read_text())
    assert segment["terminal_metadata"]["terminal_state"] == "max_turns_exceeded"
    assert (tmp_path / "memories/raw_memories/loop.md").exists()  # failures are remembered


def test_run_rejects_bad_input(tmp_path: Path, env: dict[str, str]) -> None:
    bad_id = invoke("run", "-w", tmp_path, "--session", "bad id", "hi", env=env)
    assert bad_id.exit_code == 2 and "--session" in bad_id.stderr
    assert "invalid rollout id" in bad_id.stderr
    bad_layout = invoke("run", "-w", tmp_path, "--memories-dir", "../x", "hi", env=env)
    assert bad_layout.exit_code == 2 and "must not escape root" in bad_layout.stderr
    nested = invoke(
        "run", "-w", tmp_path, "--memories-dir", "m", "--sessions-dir", "m/s", "hi", env=env
    )
    assert nested.exit_code == 2 and "must not nest" in nested.stderr
    same = invoke(
        "run", "-w", tmp_path, "--memories-dir", "m", "--sessions-dir", "m", "hi", env=env
    )
    assert same.exit_code == 2 and "must be different" in same.stderr
    missing = invoke("run", "-w", tmp_path / "nope", "hi", env=env)
    assert missing.exit_code == 2
    assert list(tmp_path.iterdir()) == []


def test_every_command_has_help() -> None:
    commands = [["run"], ["chat"], ["demo"], ["docs"], ["memory"]] + [
        ["memory", name] for name in ("tree", "show", "search", "status", "generate", "forget")
    ]
    for command in [[], *commands]:
        result = invoke(*command, "--help")
        assert result.exit_code == 0, command
        assert "Usage: " in result.stdout
    assert invoke("--version").stdout == f"sandmem, version {sandmem.__version__}\n"


def test_the_demo_command_is_registered() -> None:
    from sandmem.demo import demo_command

    # the group imports a command when it is asked for it (not at import: an earlier test
    # that ran the demo made ``cli.commands`` hold it, and the test passed only after one)
    assert cli.get_command(click.Context(cli), "demo") is demo_command
    assert "demo" in cli.list_commands(click.Context(cli))


def test_prompt_from_stdin(tmp_path: Path, server: FakeOpenAIServer, env: dict[str, str]) -> None:
    result = CliRunner().invoke(
        cli,
        ["run", "-w", str(tmp_path), "--no-memory-generate", "-"],
        input="from stdin\n",
        env=env,
    )
    assert result.exit_code == 0, result.output
    assert "from stdin" in json.dumps(server.requests[0].items)
    empty = CliRunner().invoke(cli, ["run", "-w", str(tmp_path), "-"], input="  \n", env=env)
    assert empty.exit_code == 2 and "the prompt is empty" in empty.stderr


def test_paired_calls_drops_dangling_tool_items() -> None:
    items = [
        {"role": "user", "content": "hi"},
        {"type": "function_call", "call_id": "a", "name": "x", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "a", "output": "ok"},
        {"type": "function_call", "call_id": "b", "name": "x", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c", "output": "orphan"},
    ]
    assert paired_calls(items) == items[:3]


def test_console_script_prints_one_line_errors(tmp_path: Path) -> None:
    script = "from sandmem.cli import main; main()"
    done = subprocess.run(
        [sys.executable, "-c", script, "memory", "status", "-w", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr.startswith("Error: no memory in ") and done.stderr.count("\n") == 1


def test_first_memory_in_a_git_work_tree_gives_a_gitignore_tip(
    tmp_path: Path, server: FakeOpenAIServer, env: dict[str, str]
) -> None:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True, timeout=30)
    args = ("run", "-w", tmp_path, "--engine", "extractive", "hi")
    first = invoke(*args, env=env)
    assert first.exit_code == 0, first.output
    assert "tip: " in first.stderr and "add `sessions/` to .gitignore" in first.stderr
    assert "commit `memories/` only if" in first.stderr
    again = invoke(*args, env=env)  # memory exists now: said once
    assert again.exit_code == 0 and "tip: " not in again.stderr
    ignored = tmp_path / "ignored"
    subprocess.run(["git", "init", "-q", str(ignored)], check=True, timeout=30)
    (ignored / ".gitignore").write_text("sessions/\n")
    covered = invoke("run", "-w", ignored, "--engine", "extractive", "hi", env=env)
    assert covered.exit_code == 0 and "tip: " not in covered.stderr
    plain = tmp_path.parent / (tmp_path.name + "-plain")
    plain.mkdir()
    outside = invoke("run", "-w", plain, "--engine", "extractive", "hi", env=env)
    assert outside.exit_code == 0 and "tip: " not in outside.stderr


def test_docs_command_prints_the_packaged_pages() -> None:
    listing = invoke("docs")
    assert listing.exit_code == 0
    assert "sandmem docs cli" in listing.stdout and "sandmem docs quickstart" in listing.stdout
    where = Path(invoke("docs", "--path").stdout.strip())
    page = invoke("docs", "cli")
    assert page.exit_code == 0
    assert page.stdout == (where / "cli.md").read_text()
    assert page.stdout.startswith("# CLI reference")
    missing = invoke("docs", "nope")
    assert missing.exit_code == 2 and "no page 'nope'" in missing.stderr
    assert "`sandmem docs cli`" in " ".join(invoke("--help").stdout.split())


def test_version_is_the_package_version() -> None:
    from importlib.metadata import version

    assert sandmem.__version__ == version("sandmem")


def test_a_failed_extraction_is_tried_once_per_run(
    tmp_path: Path, server: FakeOpenAIServer, env: dict[str, str]
) -> None:
    """`sandmem run` generates after the run, with a report; the session's stop then
    generates nothing more, so a conversation whose extraction just failed is not tried a
    second time within the same command."""
    memory = memory_server_handler(ANSWER)

    def handler(req: FakeRequest) -> FakeReply:
        if not req.wants_json() and not server.requests[:-1]:
            # the run's one request; the next one, phase one's, is refused as the
            # conversation's fault (HTTP 400: it uses an attempt). An unusable answer would
            # be replaced by the extractive fallback instead (test_small_model_phases.py)
            server.inject(status=400, message="context length exceeded")
        return memory(req)

    server.handler = handler
    result = invoke("run", "-w", tmp_path, "-m", "m", "--session", "s1", "hi", env=env)
    assert result.exit_code == 1 and "1 conversation(s) failed: s1" in result.stderr
    assert sum(r.wants_json() for r in server.requests) == 1  # asked once, not again
    [row] = json.loads(invoke("memory", "status", "-w", tmp_path, "--json").stdout)["conversations"]
    assert row["rollout_id"] == "s1" and row["status"] == "pending" and row["attempts"] == 1
