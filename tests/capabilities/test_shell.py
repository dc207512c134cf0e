"""The Shell capability's exec_command, on a real local session."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from sandmem._errors import SandboxError
from sandmem.capabilities import Shell
from sandmem.capabilities.shell import DEFAULT_MAX_OUTPUT_TOKENS, MAX_TIMEOUT_MS, format_exec_result
from sandmem.sandboxes import ExecResult, SandboxSession


async def run(session: SandboxSession, **arguments: Any) -> str:
    (tool,) = Shell().bind(session).tools()
    assert tool.name == "exec_command"
    out = await tool.on_invoke(json.dumps(arguments))
    assert isinstance(out, str)
    return out


def test_schema() -> None:
    (tool,) = Shell().tools()
    schema = tool.params_json_schema
    # strict mode (the function_tool default): every property listed, optional ones nullable
    assert schema["required"] == ["cmd", "workdir", "timeout_ms", "max_output_tokens"]
    assert schema["additionalProperties"] is False
    assert tool.spec().strict is True
    assert {"type": "null"} in schema["properties"]["workdir"]["anyOf"]


async def test_exit_code_and_interleaved_output(session: SandboxSession) -> None:
    out = await run(session, cmd="echo one; echo two >&2; echo three; exit 3")
    assert out.startswith("Exit code: 3\nWall time: ")
    assert out.endswith("Output:\none\ntwo\nthree\n")
    missing = await run(session, cmd="no-such-command-xyz")
    assert missing.startswith("Exit code: 127")
    assert "line 1: no-such-command-xyz: command not found" in missing


async def test_workdir_and_no_output(session: SandboxSession, workspace: Path) -> None:
    (workspace / "sub").mkdir()
    out = await run(session, cmd="pwd", workdir="sub")
    assert out.endswith(f"Output:\n{workspace / 'sub'}\n")
    assert (await run(session, cmd="true")).endswith("Output: (none)")
    with pytest.raises(SandboxError):
        await run(session, cmd="pwd", workdir="../..")


async def test_long_output_keeps_head_and_tail_and_states_size(session: SandboxSession) -> None:
    out = await run(session, cmd="seq 1 100000", max_output_tokens=1_000)
    size = sum(len(f"{n}\n") for n in range(1, 100_001))
    assert "Output:\n1\n2\n3\n" in out
    assert out.endswith("99999\n100000\n")
    assert f"original {size} bytes" in out
    assert len(out) < 1_000 * 4 + 300
    default = await run(session, cmd="seq 1 100000")
    assert len(default) < DEFAULT_MAX_OUTPUT_TOKENS * 4 + 300


async def test_timeout_is_reported(session: SandboxSession) -> None:
    # ten minutes of sleep: returning within the guard is the timeout's doing
    out = await asyncio.wait_for(
        run(session, cmd="echo started; sleep 600", timeout_ms=300), timeout=60
    )
    assert out.startswith("Command timed out after 300 ms and was killed.")
    assert out.endswith("Output:\nstarted\n")


async def test_timeout_is_capped(session: SandboxSession, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[float | None] = []
    real_exec = session.exec

    async def spy(cmd: Any, **kwargs: Any) -> ExecResult:
        seen.append(kwargs.get("timeout"))
        return await real_exec(cmd, **kwargs)

    monkeypatch.setattr(session, "exec", spy)
    capped = await run(session, cmd="true", timeout_ms=10 * MAX_TIMEOUT_MS)
    assert f"Note: timeout_ms is capped at {MAX_TIMEOUT_MS}." in capped
    await run(session, cmd="true")
    assert seen == [MAX_TIMEOUT_MS / 1000, 120.0]


@pytest.mark.parametrize("arguments", [{"timeout_ms": 0}, {"max_output_tokens": -1}])
async def test_non_positive_limits_are_refused(
    session: SandboxSession, workspace: Path, arguments: dict[str, int]
) -> None:
    with pytest.raises(ValueError, match="must be a positive integer"):
        await run(session, cmd="touch ran", **arguments)
    assert not (workspace / "ran").exists()


def test_capture_bound_is_mentioned() -> None:
    result = ExecResult(0, b"x", b"", truncated=True)
    text = format_exec_result(result, timeout_ms=1, elapsed_s=0.0, max_output_tokens=10)
    assert "more than the sandbox captures" in text


async def test_instructions() -> None:
    text = await Shell().instructions(None)  # type: ignore[arg-type]
    assert text is not None
    assert "exec_command" in text
