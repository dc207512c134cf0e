"""Skills: skills under a directory are listed in the instructions (name, description, path),
and the agent opens one only when its task needs it."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from sandmem import (
    Memory,
    MemoryGenerateConfig,
    MemoryReadConfig,
    RunConfig,
    Runner,
    SandboxAgent,
    SandboxRunConfig,
    UserError,
)
from sandmem.capabilities import Filesystem, Shell, Skills
from sandmem.capabilities.skills import SkillInfo, parse_front_matter, render_skill_list
from sandmem.models._base import ModelRequest
from sandmem.sandboxes import Manifest, UnixLocalSandboxClient
from sandmem.testing import FunctionModel, tool_call, tool_outputs

SKILL = "---\nname: release\ndescription: Cut a release; use when asked to release.\n---\n"
STEPS = "1. Run `make dist`.\n2. Tag it `v<version>`.\n"


def test_front_matter_and_budget() -> None:
    assert parse_front_matter(SKILL + STEPS) == {
        "name": "release",
        "description": "Cut a release; use when asked to release.",
    }
    assert parse_front_matter("no front matter") == {}
    assert parse_front_matter("---\nname: x\n(never closed)") == {}
    many = [SkillInfo(f"s{i}", "d" * 50, f"skills/s{i}/SKILL.md") for i in range(100)]
    listed = render_skill_list(many, 500)
    assert len(listed.encode()) < 600
    assert listed.splitlines()[-1].startswith("- ... and ")
    with pytest.raises(ValueError):
        Skills(max_bytes=10)


def _phase_one(request: ModelRequest) -> str:
    return json.dumps(
        {"rollout_slug": "release", "rollout_summary": "Released v1.", "raw_memory": "- release"}
    )


def _phase_two(request: ModelRequest) -> Any:
    outputs = tool_outputs(request)
    root = re.search(r"memory root is\s+`([^`]+)/`", request.instructions or "")
    assert root
    mem = root.group(1)
    if not outputs:
        return [tool_call("read_file", {"path": f"{mem}/raw_memories.md"})]
    if len(outputs) == 1:
        files = [
            {"path": f"{mem}/MEMORY.md", "content": f"## Releases\n{outputs[0]['output']}\n"},
            {"path": f"{mem}/memory_summary.md", "content": "Releases: see skills/release."},
            {"path": f"{mem}/skills/release/SKILL.md", "content": SKILL + STEPS},
        ]
        return [tool_call("write_files", {"files": files})]
    return "consolidated"


async def test_a_skill_written_by_phase_two_is_listed_and_opened_next_run(tmp_path: Path) -> None:
    generate = MemoryGenerateConfig(
        phase_one_model=FunctionModel(_phase_one), phase_two_model=FunctionModel(_phase_two)
    )
    memory = Memory(read=MemoryReadConfig(live_update=False), generate=generate)
    client = UnixLocalSandboxClient()
    first = await client.create(manifest=Manifest())
    seen: list[str] = []

    def worker(request: ModelRequest) -> Any:
        seen.append(request.instructions or "")
        outputs = tool_outputs(request)
        if "skills/release/SKILL.md" not in (request.instructions or ""):
            return "released (no skill yet)"
        if not outputs:
            return [tool_call("exec_command", {"cmd": "cat memories/skills/release/SKILL.md"})]
        return f"followed: {outputs[-1]['output']}"

    agent = SandboxAgent(
        name="w",
        model=FunctionModel(worker),
        capabilities=[Filesystem(), Shell(), memory, Skills()],
    )
    try:
        async with first:
            config = RunConfig(sandbox=SandboxRunConfig(session=first))
            result = await Runner.run(agent, "cut a release", run_config=config)
            assert result.final_output == "released (no skill yet)"
        # the session stopped: phase two wrote the skill; the next run lists it and opens it
        async with first:
            config = RunConfig(sandbox=SandboxRunConfig(session=first))
            result = await Runner.run(agent, "cut a release again", run_config=config)
    finally:
        await client.delete(first)
    listing = seen[-1]
    assert (
        "- release: Cut a release; use when asked to release. (memories/skills/release/SKILL.md)"
        in listing
    )
    assert "make dist" not in listing  # progressive disclosure: only the list is injected
    assert "make dist" in result.final_output


async def test_any_directory_and_required_shell() -> None:
    client = UnixLocalSandboxClient()
    session = await client.create(manifest=Manifest())
    try:
        async with session:
            await session.mkdir("team/skills/deploy")
            await session.write("team/skills/deploy/SKILL.md", "---\ndescription: Deploy.\n---\n")
            await session.mkdir("team/skills/notes")  # no SKILL.md: not a skill
            seen: list[str] = []

            def fn(request: ModelRequest) -> str:
                seen.append(request.instructions or "")
                return "ok"

            agent = SandboxAgent(
                name="w", model=FunctionModel(fn), capabilities=[Shell(), Skills("team/skills")]
            )
            config = RunConfig(sandbox=SandboxRunConfig(session=session))
            await Runner.run(agent, "go", run_config=config)
            assert "- deploy: Deploy. (team/skills/deploy/SKILL.md)" in seen[0]
            assert "notes" not in seen[0]
            bare = SandboxAgent(name="b", model=FunctionModel(fn), capabilities=[Skills()])
            with pytest.raises(UserError, match="Shell"):
                await Runner.run(bare, "go", run_config=config)
    finally:
        await client.delete(session)
