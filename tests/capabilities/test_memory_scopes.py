"""A run's memory over scopes (``capabilities/_memory_scopes.py``, ``docs/scopes.md``): the
prompt shows every attached scope's summary in a labelled section with the budget shared and
the project winning; ``memory_scope_update`` writes a preference to the personal layout and a
fact about the code to the project's; a read-only scope is never written by any path; the
run's transcript goes to the project's ``sessions/`` only."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from sandmem import RunConfig, Runner, SandboxAgent, SandboxRunConfig
from sandmem import memory as api
from sandmem._errors import UserError
from sandmem._truncate import estimate_tokens
from sandmem.capabilities import Filesystem, Shell
from sandmem.capabilities.memory import Memory
from sandmem.memory import MemoryGenerateConfig, MemoryReadConfig, MemoryScopesConfig
from sandmem.memory.read_prompt import SUMMARY_MAX_TOKENS
from sandmem.models._base import ModelRequest
from sandmem.sandboxes import SandboxSession
from sandmem.testing import FunctionModel, tool_call

SECRET = "sk-" + "Q9w8E7r6T5y4U3i2O1p0A9s8D7f6"


def home() -> Path:
    return Path(os.environ["SANDMEM_HOME"])


def personal() -> Path:
    return home() / "personal"


def make_layout(root: Path, summary: str, memory: str = "") -> None:
    (root / "memories").mkdir(parents=True, exist_ok=True)
    (root / "sessions").mkdir(exist_ok=True)
    (root / "memories" / "memory_summary.md").write_text(summary)
    (root / "memories" / "MEMORY.md").write_text(memory)


def settings(text: str) -> None:
    home().mkdir(parents=True, exist_ok=True)
    (home() / "config.toml").write_text(text)


def add(path: str, line: str) -> str:
    return f"*** Begin Patch\n*** Add File: {path}\n+{line}\n*** End Patch\n"


def update(path: str, old: str, new: str) -> str:
    return f"*** Begin Patch\n*** Update File: {path}\n@@\n-{old}\n+{new}\n*** End Patch\n"


def scripted(*calls: tuple[str, dict[str, Any]]) -> FunctionModel:
    """Makes ``calls`` one a turn, then answers ``done``; keeps every request."""

    def fn(request: ModelRequest) -> Any:
        done = sum(1 for i in request.input if i.get("type") == "function_call_output")
        if done < len(calls):
            return [tool_call(*calls[done])]
        return "done"

    return FunctionModel(fn)


async def run(
    session: SandboxSession,
    *calls: tuple[str, dict[str, Any]],
    read: MemoryReadConfig | None = None,
    generate: MemoryGenerateConfig | None = None,
) -> FunctionModel:
    model = scripted(*calls)
    memory = Memory(read=read or MemoryReadConfig(), generate=generate)
    agent = SandboxAgent(name="dev", model=model, capabilities=[memory, Filesystem(), Shell()])
    config = RunConfig(sandbox=SandboxRunConfig(session=session))
    await Runner.run(agent, "work", run_config=config, conversation_id="scoped-run")
    return model


def outputs(model: FunctionModel) -> list[str]:
    last = model.requests[-1]
    return [str(i.get("output")) for i in last.input if i.get("type") == "function_call_output"]


def tool_names(model: FunctionModel) -> set[str]:
    return {tool.name for tool in model.requests[0].tools}


def summary_block(prompt: str) -> str:
    return prompt.split("<memory_summary>", 1)[1].split("</memory_summary>", 1)[0]


# ---------------------------------------------------------------- reading


async def test_the_prompt_shows_each_scope_labelled_and_says_the_project_wins(
    session: SandboxSession, workspace: Path
) -> None:
    make_layout(workspace, "Project: build with `make dist`.")
    make_layout(personal(), "Person: prefers tabs and short answers.")
    model = await run(session)
    prompt = model.requests[0].instructions or ""
    block = summary_block(prompt)
    project = block.index("### [project] project memory (read-write")
    mine = block.index("### [personal] personal memory (read-write")
    assert project < mine
    assert "make dist" in block[project:mine] and "prefers tabs" in block[mine:]
    assert "project's memory wins" in prompt
    assert "memory_scope_read" in prompt and 'scope="personal"' in prompt
    assert {"memory_scope_read", "memory_scope_update"} <= tool_names(model)


async def test_an_empty_or_missing_scope_gets_no_section(
    session: SandboxSession, workspace: Path
) -> None:
    make_layout(workspace, "Project: build with `make dist`.")
    make_layout(personal(), "   \n")  # an empty personal summary
    prompt = (await run(session)).requests[0].instructions or ""
    assert "### [project]" in prompt and "### [personal]" not in prompt
    # no personal memory at all: the project's section alone, nothing created
    for path in sorted(personal().rglob("*"), reverse=True):
        path.rmdir() if path.is_dir() else path.unlink()
    personal().rmdir()
    prompt = (await run(session)).requests[0].instructions or ""
    assert "### [project]" in prompt and "`personal` (read-write)" in prompt  # still writable
    assert not personal().exists()


@pytest.mark.parametrize(
    ("project_tokens", "personal_tokens"),
    [(40_000, 40_000), (40_000, 300), (300, 40_000), (9_000, 9_000), (20_000, 7_000)],
)
async def test_the_summary_budget_is_shared_by_rule(
    session: SandboxSession, workspace: Path, project_tokens: int, personal_tokens: int
) -> None:
    def long(tag: str, tokens: int) -> str:
        lines = [f"{tag} line {n:06d} ..........." for n in range(tokens * 4 // 32)]
        return f"{tag} HEAD\n" + "\n".join(lines) + f"\n{tag} TAIL"

    make_layout(workspace, long("PROJ", project_tokens))
    make_layout(personal(), long("PERS", personal_tokens))
    prompt = (await run(session)).requests[0].instructions or ""
    block = summary_block(prompt)
    assert estimate_tokens(block) <= SUMMARY_MAX_TOKENS
    assert "[... memory summary truncated" not in block  # never cut again as a whole
    _, project, mine = block.split("### [")
    for tag, section in (("PROJ", project), ("PERS", mine)):
        assert f"{tag} HEAD" in section and f"{tag} TAIL" in section  # head and tail kept
    cut = [tokens > SUMMARY_MAX_TOKENS // 2 for tokens in (project_tokens, personal_tokens)]
    assert ("project memory summary truncated" in project) == cut[0]
    assert ("personal memory summary truncated" in mine) == cut[1]
    if all(cut):  # two long summaries get equal halves
        assert abs(estimate_tokens(project) - estimate_tokens(mine)) < 100
    if not cut[1]:
        assert mine.count("PERS line") == personal_tokens * 4 // 32  # a short one is whole


async def test_without_scopes_the_prompt_is_the_layouts_alone(
    session: SandboxSession, workspace: Path
) -> None:
    make_layout(workspace, "Project: build with `make dist`.")
    make_layout(personal(), "Person: prefers tabs.")
    for read in (MemoryReadConfig(scopes=None), MemoryReadConfig(scopes=False)):
        model = await run(session, read=read)
        prompt = model.requests[0].instructions or ""
        assert "make dist" in prompt and "prefers tabs" not in prompt and "[project]" not in prompt
        assert not {"memory_scope_read", "memory_scope_update"} & tool_names(model)
    # the personal scope turned off in the run's config, or in the user's settings
    off = MemoryReadConfig(scopes=MemoryScopesConfig(personal=False))
    assert "prefers tabs" not in ((await run(session, read=off)).requests[0].instructions or "")
    settings("[scopes]\npersonal = false\n")
    model = await run(session)
    assert "prefers tabs" not in (model.requests[0].instructions or "")
    assert "memory_scope_update" not in tool_names(model)


@pytest.mark.parametrize(
    "text",
    [
        '[scopes]\npersonal = "yes"\n',
        "[scopes\npersonal = true\n",
        "[scopes]\nunknown = 1\n",
        '[scopes.named.team]\npath = "s3://bucket/team"\n',
    ],
)
async def test_malformed_settings_refuse_the_run_before_the_first_model_call(
    session: SandboxSession, workspace: Path, text: str
) -> None:
    settings(text)
    model = scripted()
    memory = Memory(generate=MemoryGenerateConfig.for_model("extractive"))
    agent = SandboxAgent(name="dev", model=model, capabilities=[memory, Filesystem(), Shell()])
    with pytest.raises(UserError, match="config.toml"):
        await Runner.run(agent, "work", run_config=RunConfig(sandbox=SandboxRunConfig(session=session)))
    assert model.requests == []
    assert not list(workspace.glob("sessions/*.jsonl"))  # nothing recorded
    # the run's config can leave the settings unread
    await run(session, read=MemoryReadConfig(scopes=None))


async def test_a_home_given_in_the_config_is_used(
    session: SandboxSession, workspace: Path, tmp_path: Path
) -> None:
    other = tmp_path / "other-home"
    make_layout(other / "personal", "Person: likes haiku.")
    make_layout(personal(), "Person: prefers tabs.")
    read = MemoryReadConfig(scopes=MemoryScopesConfig(home=str(other)))
    prompt = (await run(session, read=read)).requests[0].instructions or ""
    assert "likes haiku" in prompt and "prefers tabs" not in prompt
