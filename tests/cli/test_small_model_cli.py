"""``sandmem run`` against a small model's habits: the repeated failing call is reported."""

from __future__ import annotations

import json
from pathlib import Path

from cli_workspaces import invoke
from fake_openai import FakeOpenAIServer, FakeReply, FakeRequest

BAD_PATCH = "*** Begin Patch\nhello.py\n+print('hi')\n*** End Patch"


def test_a_repeated_failing_call_ends_the_run_with_a_clear_error(
    tmp_path: Path, fake_openai: FakeOpenAIServer
) -> None:
    calls = 0

    def handler(req: FakeRequest) -> FakeReply:
        nonlocal calls
        calls += 1
        return FakeReply(tool_calls=[("apply_patch", {"patch": BAD_PATCH}, f"c{calls}")])

    fake_openai.handler = handler
    env = {"OPENAI_BASE_URL": fake_openai.base_url}
    args = ("run", "-w", tmp_path, "-m", "m", "--engine", "extractive", "--session", "s1")
    result = invoke(*args, "write hello.py", env=env)
    assert result.exit_code == 1
    assert calls == 3  # not the run's turn budget
    assert "the model sent the same failing call to 'apply_patch' 3 times" in result.stderr
    assert "PatchError: line 2: expected '*** Add File: '" in result.stderr
    # the run is recorded as failed with the error's type, for memory to learn from
    [segment] = [json.loads(x) for x in (tmp_path / "sessions/s1.jsonl").read_text().splitlines()]
    meta = segment["terminal_metadata"]
    assert meta["terminal_state"] == "failed"
    assert meta["exception_type"] == "RepeatedToolCallError"
