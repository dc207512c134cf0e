"""What a wrong key, URL or model name, or a dead or hung server does, against the fake server: a
run with no model reply records nothing and leaves no error text in any memory file; a refused
key or model uses no attempt of a pending conversation; the run's own error is printed first
and memory generation is skipped when the server just failed; off a terminal a heartbeat line
shows the command is waiting; a server that is not OpenAI's gets its own model (or one line
naming --model); ``-v`` shows each request but never the key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_workspaces import error_lines, invoke, memory_server_handler, pending_conversation
from fake_openai import FakeOpenAIServer, FakeReply, FakeRequest

from sandmem.cli import _live

SECRET_KEY = "sk-first-hour-secret-123456"


def memory_texts(workspace: Path) -> dict[str, str]:
    """Every file of the workspace's memory and sessions directories, by relative path."""
    found = {}
    for top in ("memories", "sessions"):
        for path in (workspace / top).rglob("*"):
            if path.is_file():
                found[str(path.relative_to(workspace))] = path.read_text(errors="replace")
    return found


FAULTS = {
    "401": {"status": 401},
    "404": {"status": 404},
    "500": {"status": 500},
    "hang": {"delay_s": 5.0},
}


@pytest.mark.parametrize("fault", list(FAULTS))
def test_a_run_without_a_model_reply_leaves_no_memory_and_says_so_first(
    tmp_path: Path, fake_openai: FakeOpenAIServer, fault: str
) -> None:
    fake_openai.handler = memory_server_handler("never")
    fake_openai.inject(**FAULTS[fault], times=1000)  # type: ignore[arg-type]
    env = {"OPENAI_BASE_URL": fake_openai.base_url, "OPENAI_API_KEY": SECRET_KEY}
    args = ["run", "-w", tmp_path, "-m", "m", "--timeout", "0.5", "--max-retries", "0", "hi"]
    result = invoke(*args, env=env)
    assert result.exit_code == 1
    errors = error_lines(result.stderr)
    assert len(errors) == 1 and errors[0].startswith(
        "Error: the run failed (nothing recorded: no model reply came)"
    )
    lines = result.stderr.splitlines()
    skipped = next(i for i, line in enumerate(lines) if "memory generation skipped" in line)
    assert lines.index(errors[0]) < skipped  # the run's own cause comes first
    assert "memory (memories/)" not in result.stderr  # no generation against the dead server
    # only the agent's request(s) reached the server: no memory request tried it again
    assert all(not r.wants_json() for r in fake_openai.requests)
    texts = memory_texts(tmp_path)
    assert not any(p.startswith("sessions/") for p in texts)
    for path, text in texts.items():
        for word in ("HTTP", "injected", "timed out", "ModelRequestError", SECRET_KEY):
            assert word not in text, (path, word)


@pytest.mark.parametrize(
    ("status", "message"),
    [
        (401, "Incorrect API key provided"),
        (403, "Project does not have access to model"),
        (404, "not found"),
        (400, "model 'm9' not found"),
    ],
)
def test_a_configuration_error_uses_no_attempt_of_the_backlog(
    tmp_path: Path, fake_openai: FakeOpenAIServer, status: int, message: str
) -> None:
    fake_openai.handler = memory_server_handler("Done.")
    env = {"OPENAI_BASE_URL": fake_openai.base_url}
    for rid in ("a", "b"):
        pending_conversation(tmp_path, rid)
    fake_openai.inject(status=status, message=message, times=1000)
    for _ in range(4):  # more than max_attempts (3)
        result = invoke("memory", "generate", "-w", tmp_path, "--model", "wrong", env=env)
        assert result.exit_code == 1
        refused = [line for line in result.stdout.splitlines() if "refused" in line]
        assert len(refused) == 1 and "2 conversation(s) not extracted" in refused[0]
        assert "✗ a:" not in result.stdout  # said once, not per conversation
        assert "the run" not in result.stderr
    state = json.loads((tmp_path / "memories/generation_state.json").read_text())
    for rid in ("a", "b"):
        entry = state["rollouts"][rid]
        assert (entry["status"], entry["attempts"]) == ("pending", 0)
        assert entry["failure_kind"] == "configuration" and entry["next_retry_at"] is None
    fake_openai.clear_faults()  # the setting is fixed: the backlog goes through as it is
    fixed = invoke("memory", "generate", "-w", tmp_path, "--model", "m", env=env)
    assert fixed.exit_code == 0, fixed.stdout + fixed.stderr
    assert "✓ a: extracted" in fixed.stdout and "✓ b: extracted" in fixed.stdout


def test_a_run_the_server_stops_after_some_work_keeps_its_transcript_not_the_error(
    tmp_path: Path, fake_openai: FakeOpenAIServer
) -> None:
    def handler(req: FakeRequest) -> FakeReply:
        if req.tool_outputs():
            fake_openai.inject(status=401, times=1000)  # the next request is refused
        return FakeReply(tool_calls=[("exec_command", {"cmd": "echo hi"}, "c1")])

    fake_openai.handler = handler
    env = {"OPENAI_BASE_URL": fake_openai.base_url}
    result = invoke("run", "-w", tmp_path, "-m", "m", "--session", "s", "hi", env=env)
    assert result.exit_code == 1
    assert "memory generation skipped: the model server just failed the run (HTTP 401)" in (
        result.stderr
    )
    segment = json.loads((tmp_path / "sessions/s.jsonl").read_text())
    assert segment["terminal_metadata"]["error_origin"] == "infrastructure"
    # later, with the key fixed, the model-free engine remembers the work, not the error
    fake_openai.clear_faults()
    later = invoke("memory", "generate", "-w", tmp_path, "--engine", "extractive", env=env)
    assert later.exit_code == 0, later.stdout
    texts = memory_texts(tmp_path)
    assert '- Task: "hi"' in texts["memories/raw_memories/s.md"]
    for path, text in texts.items():
        if path.startswith("memories/") and path.endswith(".md"):
            assert "HTTP 401" not in text and "API key" not in text, path


def test_a_hung_server_shows_a_heartbeat_off_a_terminal(
    tmp_path: Path, fake_openai: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_live, "HEARTBEAT_S", 0.2)
    fake_openai.handler = lambda req: FakeReply(text="late but fine", delay_s=1.0)
    env = {"OPENAI_BASE_URL": fake_openai.base_url}
    result = invoke("run", "-w", tmp_path, "-m", "m", "--engine", "extractive", "hi", env=env)
    assert result.exit_code == 0, result.stderr
    beats = [line for line in result.stderr.splitlines() if line.startswith("… still waiting")]
    assert len(beats) >= 2 and beats[0].startswith("… still waiting for the model (")


def test_the_timeout_flag_and_variable_bound_each_request(
    tmp_path: Path, fake_openai: FakeOpenAIServer
) -> None:
    fake_openai.inject(delay_s=5.0, times=1000)
    env = {"OPENAI_BASE_URL": fake_openai.base_url, "SANDMEM_MAX_RETRIES": "0"}
    flag = invoke("run", "-w", tmp_path, "-m", "m", "--timeout", "0.3", "hi", env=env)
    assert flag.exit_code == 1 and "timed out" in flag.stderr
    assert "--timeout / SANDMEM_TIMEOUT" in flag.stderr
    assert len(fake_openai.requests) == 1  # SANDMEM_MAX_RETRIES=0: no retry
    variable = invoke("run", "-w", tmp_path, "-m", "m", "hi", env={**env, "SANDMEM_TIMEOUT": "0.3"})
    assert variable.exit_code == 1 and "timed out" in variable.stderr
    bad = invoke("run", "-w", tmp_path, "-m", "m", "hi", env={**env, "SANDMEM_TIMEOUT": "soon"})
    assert bad.exit_code == 1 and "SANDMEM_TIMEOUT must be a positive number" in bad.stderr


def test_debug_shows_each_request_but_never_the_key(
    tmp_path: Path, fake_openai: FakeOpenAIServer
) -> None:
    fake_openai.handler = memory_server_handler("Done.")
    env = {"OPENAI_BASE_URL": fake_openai.base_url, "OPENAI_API_KEY": SECRET_KEY}
    result = invoke("run", "-w", tmp_path, "-m", "m", "-v", "--engine", "extractive", "hi", env=env)
    assert result.exit_code == 0, result.stderr
    logged = [line for line in result.stderr.splitlines() if line.startswith("sandmem debug: ")]
    assert any(
        f"POST {fake_openai.base_url}/responses -> HTTP 200 in " in line for line in logged
    ), result.stderr
    assert SECRET_KEY not in result.stderr + result.stdout
    quiet = invoke("run", "-w", tmp_path, "-m", "m", "--engine", "extractive", "hi", env=env)
    assert "sandmem debug:" not in quiet.stderr  # off again for the next command


def test_a_local_server_gets_its_own_model_or_one_line(
    tmp_path: Path, fake_openai: FakeOpenAIServer
) -> None:
    fake_openai.handler = memory_server_handler("Done.")
    env = {"OPENAI_BASE_URL": fake_openai.base_url}
    fake_openai.models = ["qwen3:8b"]
    one = invoke("run", "-w", tmp_path, "hi", env=env)
    assert one.exit_code == 0, one.stderr
    assert f"agent: qwen3:8b (the only model at {fake_openai.base_url})" in one.stderr
    assert {r.model for r in fake_openai.requests} == {"qwen3:8b"}  # memory used it too
    for models, says in ((["a", "b"], "serves 2 models (a, b)"), (None, "did not list")):
        fake_openai.models = models
        refused = invoke("run", "-w", tmp_path, "hi", env=env)
        assert refused.exit_code == 2
        assert refused.stderr.count("\n") == 1 and says in refused.stderr
        assert "--model" in refused.stderr and "SANDMEM_MODEL" in refused.stderr
    generate = invoke("memory", "generate", "-w", tmp_path, env=env)
    assert generate.exit_code == 2 and "SANDMEM_MODEL" in generate.stderr


def test_scripted_runs_offline(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("hello\n")
    result = invoke("run", "-w", tmp_path, "--model", "scripted", "what is here?", env={})
    assert result.exit_code == 0, result.stderr
    assert "agent: scripted (--model scripted: an offline deterministic agent" in result.stderr
    assert "→ exec_command: ls -A" in result.stderr and "← exit 0: " in result.stderr
    assert "notes.txt" in result.stdout
    assert not (tmp_path / "memories").exists()  # not recorded (issue 39: no junk memory)
