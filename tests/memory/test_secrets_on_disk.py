"""Finding 6: no planted secret reaches a file under sessions/ or memories/ — not through a
truncated shell output, a non-pydantic final output, a live edit of MEMORY.md while memory is
read-only, nor a live edit followed by a failed consolidation."""

from __future__ import annotations

import base64
import dataclasses
import random
from pathlib import Path
from typing import Any

import pytest

from sandmem import (
    Filesystem,
    Manifest,
    Memory,
    MemoryGenerateConfig,
    MemoryReadConfig,
    RunConfig,
    Runner,
    SandboxAgent,
    SandboxRunConfig,
    Shell,
    UnixLocalSandboxClient,
)
from sandmem.memory.rollouts import build_segment, jsonable
from sandmem.models._base import ModelRequest
from sandmem.testing import FunctionModel, tool_call, tool_outputs

_rng = random.Random(13)
KEY_LINES = [base64.b64encode(_rng.randbytes(48)).decode() for _ in range(30)]
PEM = "-----BEGIN RSA PRIVATE KEY-----\n" + "\n".join(KEY_LINES) + "\n-----END RSA PRIVATE KEY-----"
TOKEN = "ghp_" + "".join(_rng.choice("ABCDEFabcdef0123456789") for _ in range(36))
SENDGRID = "SG." + "Ab1" * 7 + "x" + "." + "Cd2" * 14 + "y"


def _on_disk(root: Path) -> str:
    return "\n".join(
        p.read_text(errors="replace")
        for d in ("sessions", "memories")
        for p in (root / d).rglob("*")
        if p.is_file()
    )


def _assert_clean(root: Path) -> None:
    text = _on_disk(root)
    for line in KEY_LINES:
        assert line not in text
        assert line[:40] not in text
    assert TOKEN not in text and TOKEN[4:30] not in text
    assert SENDGRID not in text


def _script(*steps: list[dict[str, Any]] | str) -> FunctionModel:
    def fn(request: ModelRequest) -> object:
        return steps[min(len(tool_outputs(request)), len(steps) - 1)]

    return FunctionModel(fn)


EXTRACTIVE = MemoryGenerateConfig(phase_one_model="extractive", phase_two_model="extractive")


@pytest.mark.parametrize("capture_bytes", [None, 3000], ids=["tool-cut", "capture-cut"])
async def test_a_key_whose_begin_line_was_cut_away_is_not_stored(
    capture_bytes: int | None,
) -> None:
    # filler, then the key, then a little more: the tool keeps ~800 bytes of head and tail
    # (the capture ~1500 each), so the BEGIN line falls in the dropped middle
    script = (
        "head -c 6000 /dev/zero | tr '\\0' 'a'; echo; cat key.pem; echo; "
        f"echo token {TOKEN} and {SENDGRID}; echo done"
    )
    agent = SandboxAgent(
        name="cat",
        model=_script([tool_call("exec_command", {"cmd": script, "max_output_tokens": 500})], "ok"),
        capabilities=[Memory(read=None, generate=EXTRACTIVE), Filesystem(), Shell()],
    )
    client = (
        UnixLocalSandboxClient()
        if capture_bytes is None
        else UnixLocalSandboxClient(max_output_bytes=capture_bytes)
    )
    from sandmem.sandboxes import File

    sandbox = await client.create(manifest=Manifest(entries={"key.pem": File(content=PEM)}))
    async with sandbox:
        run = RunConfig(sandbox=SandboxRunConfig(session=sandbox))
        await Runner.run(agent, "show the key", run_config=run, conversation_id="cut")
    rollout = (sandbox.root / "sessions/cut.jsonl").read_text()
    assert "-----END RSA PRIVATE KEY-----" not in rollout  # the tail was in what was kept
    _assert_clean(sandbox.root)
    await client.delete(sandbox)


@dataclasses.dataclass
class Report:
    title: str
    credentials: dict[str, str]


class Plain:
    def __init__(self) -> None:
        self.note = f"deploy with {TOKEN}"
        self._private = "x"


def test_any_final_output_becomes_data_that_redaction_sees() -> None:
    assert jsonable(Report("r", {"token": TOKEN})) == {
        "title": "r",
        "credentials": {"token": TOKEN},
    }
    assert jsonable(Plain()) == {"note": f"deploy with {TOKEN}"}
    assert jsonable({1: (b"x", {2})}) == {"1": ["x", [2]]}
    loop: list[Any] = []
    loop.append(loop)
    assert isinstance(jsonable(loop), list)  # a cycle ends in its str, never recurses forever


@pytest.mark.parametrize(
    "output", [Report("ok", {"api": TOKEN}), Plain()], ids=["dataclass", "plain"]
)
async def test_a_non_pydantic_final_output_is_stored_redacted(
    output: object, tmp_path: Path
) -> None:
    from sandmem.agent._context import RunOutcome, SandboxRunContext
    from sandmem.memory.generation._attach import get_manager
    from sandmem.memory.layout import MemoryPaths

    client = UnixLocalSandboxClient()
    sandbox = await client.create(manifest=Manifest(root=tmp_path / "ws"))
    agent = SandboxAgent(name="a", model=_script("ok"))
    ctx = SandboxRunContext(agent=agent, input=[], run_config=RunConfig(), sandbox=sandbox)
    outcome = RunOutcome(
        new_items=[], terminal_state="completed", final_output=output, has_final_output=True
    )
    manager = get_manager(sandbox, MemoryPaths("memories", "sessions"), EXTRACTIVE)
    manager.detach_stop_hook()
    await manager.record(build_segment(ctx, outcome, "r1", None))
    _assert_clean(sandbox.root)
    assert "[REDACTED:github-token]" in (sandbox.root / "sessions/r1.jsonl").read_text()


def _patch_memory(token: str) -> dict[str, Any]:
    patch = (
        "*** Begin Patch\n*** Update File: memories/MEMORY.md\n@@\n+## Deploy\n"
        f"+Use the token {token} to deploy.\n*** End Patch\n"
    )
    return tool_call("apply_patch", {"patch": patch})


async def _run_live_edit(generate: MemoryGenerateConfig | None) -> Path:
    agent = SandboxAgent(
        name="editor",
        model=_script(
            [_patch_memory(TOKEN)],
            [tool_call("exec_command", {"cmd": f"echo 'key {SENDGRID}' >> memories/MEMORY.md"})],
            "edited",
        ),
        capabilities=[Memory(read=MemoryReadConfig(), generate=generate), Filesystem(), Shell()],
    )
    client = UnixLocalSandboxClient()
    sandbox = await client.create()
    async with sandbox:
        await sandbox.write("memories/MEMORY.md", "# Memory\n")
        await sandbox.write("memories/memory_summary.md", "- uses make deploy\n")
        run = RunConfig(sandbox=SandboxRunConfig(session=sandbox))
        await Runner.run(agent, "fix memory", run_config=run, conversation_id="live")
        # the live apply_patch was redacted before it was written
        assert TOKEN not in (sandbox.root / "memories/MEMORY.md").read_text()
    return sandbox.root


async def test_a_live_edit_with_read_only_memory_is_redacted() -> None:
    root = await _run_live_edit(None)
    _assert_clean(root)
    assert "[REDACTED:sendgrid-key]" in (root / "memories/MEMORY.md").read_text()


async def test_a_live_edit_is_redacted_when_consolidation_fails() -> None:
    def broken(request: ModelRequest) -> object:
        raise RuntimeError("consolidation model is down")

    config = MemoryGenerateConfig(
        phase_one_model="extractive", phase_two_model=FunctionModel(broken)
    )
    root = await _run_live_edit(config)
    _assert_clean(root)
    assert "[REDACTED:sendgrid-key]" in (root / "memories/MEMORY.md").read_text()
