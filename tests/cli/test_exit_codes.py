"""Exit codes of ``sandmem run``: 0 done, 1 the run or memory generation failed, 2 usage
error, 130 interrupted (after saying what was saved); and failing fast on a dead server."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from cli_workspaces import invoke, memory_server_handler
from fake_openai import FakeOpenAIServer, FakeReply, FakeRequest

ANSWER = "Done: nothing to change."
SCRIPT = "from sandmem.cli import main; main()"


def free_port() -> int:
    """A port where nothing listens (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_dead_server_fails_fast_in_one_line(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"
    result = invoke("run", "-w", tmp_path, "hello", env={"OPENAI_BASE_URL": url})
    assert result.exit_code == 1
    assert result.stderr == (
        f"Error: cannot reach the model server at {url} (connection refused); start it, or set "
        "OPENAI_BASE_URL to a server that runs\n"
    )
    assert list(tmp_path.iterdir()) == []  # nothing was run, nothing recorded


def test_configuration_errors_exit_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    missing = invoke("run", "-w", tmp_path, "hello")
    assert missing.exit_code == 2
    assert missing.stderr.startswith("Error: no model server configured: set OPENAI_API_KEY")
    assert missing.stderr.count("\n") == 1
    bad_url = invoke("run", "-w", tmp_path, "hello", env={"OPENAI_BASE_URL": "localhost:11434"})
    assert bad_url.exit_code == 2 and "must be an http(s) URL" in bad_url.stderr
    assert list(tmp_path.iterdir()) == []


def test_failed_consolidation_exits_1_and_says_how_to_retry(
    tmp_path: Path, fake_openai: FakeOpenAIServer
) -> None:
    memory = memory_server_handler(ANSWER)

    def handler(req: FakeRequest) -> FakeReply:
        if "write_file" in req.tool_names():
            return FakeReply(text="I wrote nothing.")  # consolidation leaves MEMORY.md empty
        return memory(req)

    fake_openai.handler = handler
    env = {"OPENAI_BASE_URL": fake_openai.base_url}
    result = invoke("run", "-w", tmp_path, "-m", "m", "--session", "s1", "hi", env=env)
    assert result.exit_code == 1
    assert result.stdout == ANSWER + "\n"  # the answer is still printed, and first
    last = result.stderr.splitlines()[-1]
    assert last.startswith(
        "Error: memory generation did not complete: the model's consolidation failed (memory "
        "was consolidated by the extractive engine instead"
    )
    assert f"retry with `sandmem memory generate -w {tmp_path}`" in last
    assert (tmp_path / "sessions/s1.jsonl").exists()
    # memory did not go blank: the extractive engine's summary, marked as such
    summary = (tmp_path / "memories/memory_summary.md").read_text()
    assert summary.startswith("_Consolidated without a model")
    json_run = invoke("run", "-w", tmp_path, "-m", "m", "--json", "hi", env=env)
    assert json_run.exit_code == 1
    end = json.loads(json_run.stdout.splitlines()[-1])
    assert end["type"] == "end" and end["exit_code"] == 1
    assert "consolidation failed" in end["problems"][0]


# ---------------------------------------------------------------- SIGINT, in a real process


def start_run(tmp_path: Path, server: FakeOpenAIServer, *args: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "SANDMEM_"))}
    env["OPENAI_BASE_URL"] = server.base_url
    return subprocess.Popen(
        [sys.executable, "-c", SCRIPT, "run", "-w", str(tmp_path), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def wait_for(condition: Callable[[], bool], proc: subprocess.Popen[str], what: str) -> None:
    deadline = time.monotonic() + 60
    while not condition():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            out, err = proc.communicate()
            pytest.fail(f"never saw {what}; exit {proc.returncode}\n{out}\n{err}")
        time.sleep(0.02)


def interrupt(proc: subprocess.Popen[str]) -> tuple[str, str]:
    proc.send_signal(signal.SIGINT)
    try:
        return proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise


def test_sigint_during_the_run_exits_130_and_names_the_recorded_rollout(
    tmp_path: Path, fake_openai: FakeOpenAIServer
) -> None:
    def handler(req: FakeRequest) -> FakeReply:  # a reply first, then a hang
        if req.tool_outputs():
            return FakeReply(text="late", delay_s=30)
        return FakeReply(tool_calls=[("exec_command", {"cmd": "true"}, "c1")])

    fake_openai.handler = handler
    proc = start_run(tmp_path, fake_openai, "--engine", "extractive", "--session", "s1", "hi")
    wait_for(
        lambda: fake_openai.in_flight > 0 and len(fake_openai.requests) >= 2,
        proc,
        "the agent's second model request",
    )
    out, err = interrupt(proc)
    assert proc.returncode == 130, err
    assert out == ""
    rollout = tmp_path / "sessions/s1.jsonl"
    assert f"the run was stopped and recorded in {rollout} (as cancelled)" in err
    assert f"sandmem memory generate -w {tmp_path}" in err and "--session s1" in err
    assert "Traceback" not in err and "Aborted" not in err
    segment = json.loads(rollout.read_text())
    assert segment["terminal_metadata"]["terminal_state"] == "cancelled"


def test_sigint_before_the_first_reply_records_nothing(
    tmp_path: Path, fake_openai: FakeOpenAIServer
) -> None:
    """Issue 29: a run cancelled before any model reply is no conversation."""
    fake_openai.handler = lambda req: FakeReply(text="late", delay_s=30)
    proc = start_run(tmp_path, fake_openai, "-m", "m", "--session", "s0", "hi")
    wait_for(lambda: fake_openai.in_flight > 0, proc, "the agent's model request")
    out, err = interrupt(proc)
    assert proc.returncode == 130, err
    assert out == ""
    assert "interrupted: the run was stopped; nothing was recorded" in err
    assert not (tmp_path / "sessions/s0.jsonl").exists()
    assert all(not r.wants_json() for r in fake_openai.requests)  # no memory request
    for path in (tmp_path / "memories").rglob("*"):
        assert not path.is_file() or "late" not in path.read_text()


def test_sigint_during_memory_generation_keeps_the_answer(
    tmp_path: Path, fake_openai: FakeOpenAIServer
) -> None:
    memory = memory_server_handler(ANSWER)

    def handler(req: FakeRequest) -> FakeReply:
        reply = memory(req)
        if req.wants_json():
            reply.delay_s = 30  # phase one hangs
        return reply

    fake_openai.handler = handler
    proc = start_run(tmp_path, fake_openai, "-m", "m", "--session", "s2", "hi")
    wait_for(lambda: any(r.wants_json() for r in fake_openai.requests), proc, "a phase-one request")
    out, err = interrupt(proc)
    assert proc.returncode == 130, err
    assert out == ANSWER + "\n"  # printed before memory generation started
    assert "interrupted during memory generation: the run is recorded in" in err
    assert "stay pending" in err and f"sandmem memory generate -w {tmp_path}" in err
    assert "Traceback" not in err
    segment = json.loads((tmp_path / "sessions/s2.jsonl").read_text())
    assert segment["terminal_metadata"]["terminal_state"] == "completed"
    assert not (tmp_path / "memories/raw_memories/s2.md").exists()  # still pending
