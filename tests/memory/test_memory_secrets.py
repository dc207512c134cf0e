"""Secrets never reach sessions/ or memories/, even when a model repeats them."""

from __future__ import annotations

import json
from pathlib import Path

from sandmem import (
    File,
    Filesystem,
    Manifest,
    Memory,
    MemoryGenerateConfig,
    RunConfig,
    Runner,
    SandboxAgent,
    SandboxRunConfig,
    Shell,
    UnixLocalSandboxClient,
)
from sandmem.models._base import ModelRequest
from sandmem.testing import FunctionModel, last_user_text, tool_call, tool_outputs

KEY = "sk-proj-" + "Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z" * 2
AWS = "AKIA" + "QWERTYUIOPASDFGH"
ENV = f"OPENAI_API_KEY={KEY}\nAWS_ACCESS_KEY_ID={AWS}\nHOME=/root\n"


def leaky_phase_one(request: ModelRequest) -> str:
    # a careless model that copies the transcript (and any secret in it) into memory
    text = last_user_text(request)
    # a quote, not the whole transcript: a summary mostly copied from it is refused
    quoted = " ".join(line for line in text.splitlines() if "key" in line)[:400]
    return json.dumps(
        {
            "rollout_slug": "inspect-env",
            "rollout_summary": f"Transcript: {quoted} and the key was {KEY}",
            "raw_memory": f"- key {KEY} and {AWS}",
        }
    )


def leaky_phase_two(request: ModelRequest) -> object:
    if tool_outputs(request):
        return "done"
    return [
        tool_call("write_file", {"path": "memories/MEMORY.md", "content": f"## Env\n{KEY}\n"}),
        tool_call("write_file", {"path": "memories/memory_summary.md", "content": f"key {AWS}"}),
        tool_call("write_file", {"path": "memories/skills/env/SKILL.md", "content": KEY}),
    ]


def agent_model(request: ModelRequest) -> object:
    if tool_outputs(request):
        return f"The key is {KEY}"
    return [tool_call("exec_command", {"cmd": "cat .env"})]


async def test_secrets_are_redacted_everywhere() -> None:
    config = MemoryGenerateConfig(
        phase_one_model=FunctionModel(leaky_phase_one),
        phase_two_model=FunctionModel(leaky_phase_two),
    )
    agent = SandboxAgent(
        name="leaky",
        model=FunctionModel(agent_model),
        capabilities=[Memory(generate=config), Filesystem(), Shell()],
    )
    client = UnixLocalSandboxClient()
    sandbox = await client.create(manifest=Manifest(entries={".env": File(content=ENV.encode())}))
    async with sandbox:
        run = RunConfig(sandbox=SandboxRunConfig(session=sandbox))
        await Runner.run(
            agent, f"Check my env; my key is {KEY}", run_config=run, conversation_id="env"
        )
    root: Path = sandbox.root
    written = [p for d in ("sessions", "memories") for p in (root / d).rglob("*") if p.is_file()]
    assert len(written) >= 8
    for path in written:
        text = path.read_text(errors="replace")
        assert KEY not in text, path
        assert AWS not in text, path
        assert KEY[8:30] not in text, path
    rollout = (root / "sessions/env.jsonl").read_text()
    assert "[REDACTED:" in rollout
    assert "[REDACTED:" in (root / "memories/skills/env/SKILL.md").read_text()
