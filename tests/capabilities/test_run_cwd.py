"""Run-scoped working directories: ``SandboxRunConfig(cwd=...)`` moves where the model's
relative paths start, for the shell, apply_patch and view_image, and memory and skill files are
named by absolute sandbox paths; several runs share one live session, each in its directory."""

from __future__ import annotations

import asyncio
import base64
from pathlib import Path
from typing import Any

import pytest

from sandmem import RunConfig, Runner, SandboxAgent, SandboxRunConfig, SandboxWorkspaceScope
from sandmem._errors import UserError
from sandmem.capabilities import Capability, Filesystem, Memory, Shell, Skills
from sandmem.memory import MemoryReadConfig
from sandmem.models._base import ModelRequest
from sandmem.sandboxes import SandboxSession
from sandmem.testing import FunctionModel, tool_call, tool_outputs

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mP8/x8AAwMCAO+a84QAAAAASUVORK5CYII="
)


def script(*steps: list[Any]) -> FunctionModel:
    """A model that plays ``steps`` (the tool calls of one turn each), then answers with the
    last tool output."""
    turns: list[int] = []

    def answer(request: ModelRequest) -> Any:
        turns.append(len(turns))
        if turns[-1] < len(steps):
            return steps[turns[-1]]
        return str(tool_outputs(request)[-1]["output"])

    return FunctionModel(answer)


async def run_in(
    session: SandboxSession, cwd: str, model: FunctionModel, *extra: Capability
) -> Any:
    agent = SandboxAgent(name="w", model=model, capabilities=[Shell(), Filesystem(), *extra])
    config = RunConfig(sandbox=SandboxRunConfig(session=session, cwd=cwd))
    return await Runner.run(agent, "work", run_config=config)


async def test_tools_resolve_relative_paths_from_the_cwd(
    session: SandboxSession, workspace: Path
) -> None:
    (workspace / "tasks/a/sub").mkdir(parents=True)
    (workspace / "tasks/a/plot.png").write_bytes(PNG)
    patch = "*** Begin Patch\n*** Add File: notes.md\n+from task a\n*** End Patch\n"
    model = script(
        [tool_call("exec_command", {"cmd": "pwd > where.txt"}, "c1")],
        [tool_call("exec_command", {"cmd": "pwd", "workdir": "sub"}, "c2")],
        [tool_call("apply_patch", {"patch": patch}, "c3")],
        [tool_call("view_image", {"path": "plot.png"}, "c4")],
        [tool_call("exec_command", {"cmd": "pwd", "workdir": str(workspace)}, "c5")],
    )
    await run_in(session, "tasks/a", model)
    outputs = {o["call_id"]: o["output"] for o in tool_outputs(model.requests[-1])}
    assert (workspace / "tasks/a/where.txt").read_text() == f"{workspace / 'tasks/a'}\n"
    assert outputs["c2"].endswith(f"Output:\n{workspace / 'tasks/a/sub'}\n")
    assert (workspace / "tasks/a/notes.md").read_text() == "from task a\n"
    assert not (workspace / "notes.md").exists()
    assert outputs["c4"][0]["image_url"].startswith("data:image/png;base64,")
    assert outputs["c5"].endswith(f"Output:\n{workspace}\n")  # an absolute workdir stays
    # the model is told where its relative paths start
    assert f"start at\n`{workspace / 'tasks/a'}`" in (model.requests[0].instructions or "")


async def test_the_cwd_does_not_widen_the_workspace(
    session: SandboxSession, workspace: Path
) -> None:
    (workspace / "tasks/a").mkdir(parents=True)
    model = script([tool_call("exec_command", {"cmd": "pwd", "workdir": "../../.."}, "c1")])
    await run_in(session, "tasks/a", model)
    [output] = tool_outputs(model.requests[-1])
    assert "outside the workspace" in output["output"]


async def test_two_runs_share_one_session_each_in_its_directory(
    session: SandboxSession, workspace: Path
) -> None:
    for name in ("a", "b"):
        (workspace / "tasks" / name).mkdir(parents=True)

    def model(task: str) -> FunctionModel:
        patch = f"*** Begin Patch\n*** Add File: result.md\n+{task}\n*** End Patch\n"
        return script([tool_call("apply_patch", {"patch": patch}, f"{task}-p")])

    await asyncio.gather(
        run_in(session, "tasks/a", model("a")), run_in(session, "tasks/b", model("b"))
    )
    assert (workspace / "tasks/a/result.md").read_text() == "a\n"
    assert (workspace / "tasks/b/result.md").read_text() == "b\n"


async def test_memory_and_skill_files_are_named_by_absolute_paths(
    session: SandboxSession, workspace: Path
) -> None:
    (workspace / "tasks/a").mkdir(parents=True)
    (workspace / "memories/skills/deploy").mkdir(parents=True)
    (workspace / "memories/memory_summary.md").write_text("Deploys go through make.\n")
    (workspace / "memories/skills/deploy/SKILL.md").write_text(
        "---\nname: deploy\ndescription: Ship it.\n---\nRun make deploy.\n"
    )
    model = FunctionModel(lambda request: "ok")
    memory = Memory(read=MemoryReadConfig(live_update=False), generate=None)
    await run_in(session, "tasks/a", model, memory, Skills())
    instructions = model.requests[0].instructions or ""
    assert f"`{workspace}/memories/memory_summary.md`" in instructions
    assert f"{workspace}/memories/MEMORY.md" in instructions
    assert f"({workspace}/memories/skills/deploy/SKILL.md)" in instructions


async def test_a_missing_cwd_is_refused_before_the_first_model_call(
    session: SandboxSession,
) -> None:
    model = FunctionModel(lambda request: "never")
    with pytest.raises(UserError, match="no such directory"):
        await run_in(session, "tasks/missing", model)
    assert model.requests == []


@pytest.mark.parametrize(
    ("cwd", "message"),
    [
        ("", "must be non-empty"),
        ("/abs", "must be workspace-relative"),
        ("a/../../b", "must not contain parent segments"),
        ("a\\b", "must use POSIX path separators"),
    ],
)
def test_cwd_values_are_checked_at_construction(cwd: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SandboxRunConfig(cwd=cwd)


def test_scope_anchors_relative_paths_and_patch_headers() -> None:
    scope = SandboxWorkspaceScope.from_cwd("tasks//a/")
    assert scope.cwd == "tasks/a"
    assert (scope.anchor("x.md"), scope.anchor(None), scope.anchor("/abs")) == (
        "tasks/a/x.md",
        "tasks/a",
        "/abs",
    )
    patch = "*** Begin Patch\n*** Update File: a.md\n*** Move to: b.md\n@@\n-x\n+y\n*** End Patch"
    assert scope.anchor_patch(patch).splitlines()[1:3] == [
        "*** Update File: tasks/a/a.md",
        "*** Move to: tasks/a/b.md",
    ]
    root = SandboxWorkspaceScope()
    assert root.anchor("x.md") == "x.md" and root.anchor_patch(patch) == patch
    assert SandboxWorkspaceScope.from_cwd(".").cwd is None
