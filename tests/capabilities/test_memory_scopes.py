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
from sandmem.memory import (
    MemoryGenerateConfig,
    MemoryLayoutConfig,
    MemoryReadConfig,
    MemoryScopesConfig,
)
from sandmem.memory.read_prompt import SUMMARY_MAX_TOKENS
from sandmem.models._base import ModelRequest
from sandmem.sandboxes import Manifest, SandboxSession
from sandmem.sandboxes._bubblewrap import BubblewrapSandboxClient
from sandmem.sandboxes._bwrap_host import probe_bwrap
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


def append(path: str, line: str) -> str:
    """A patch adding ``line`` at the end of an existing file (a hunk of ``+`` lines only)."""
    return f"*** Begin Patch\n*** Update File: {path}\n@@\n+{line}\n*** End Patch\n"


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
    await Runner.run(
        agent, "work", run_config=config, conversation_id="scoped-run", max_turns=len(calls) + 2
    )
    return model


def outputs(model: FunctionModel) -> list[str]:
    last = model.requests[-1]
    return [str(i.get("output")) for i in last.input if i.get("type") == "function_call_output"]


def tool_names(model: FunctionModel) -> set[str]:
    return {tool.name for tool in model.requests[0].tools}


def recorded(root: Path) -> list[str]:
    """The rollout files of a layout's sessions directory."""
    return sorted(p.name for p in root.glob("sessions/*.jsonl"))


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
    # the project's summary alone is given as for one layout, the other scope still named
    assert "<memory_summary>\nProject: build with `make dist`.\n</memory_summary>" in prompt
    assert "### [" not in prompt and "`personal` (read-write)" in prompt
    # no personal memory at all: the project's section alone, nothing created
    for path in sorted(personal().rglob("*"), reverse=True):
        path.rmdir() if path.is_dir() else path.unlink()
    personal().rmdir()
    prompt = (await run(session)).requests[0].instructions or ""
    assert "make dist" in prompt and "`personal` (read-write)" in prompt  # still writable
    assert not personal().exists()
    # a personal summary alone is labelled (it is not the workspace's memory)
    for path in sorted(workspace.joinpath("memories").rglob("*"), reverse=True):
        path.rmdir() if path.is_dir() else path.unlink()
    make_layout(personal(), "Person: prefers tabs.")
    prompt = (await run(session)).requests[0].instructions or ""
    assert "### [personal] personal memory" in prompt and "### [project]" not in prompt


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
    with pytest.raises(UserError, match=r"config\.toml"):
        await Runner.run(
            agent, "work", run_config=RunConfig(sandbox=SandboxRunConfig(session=session))
        )
    assert model.requests == []
    assert recorded(workspace) == []  # nothing recorded
    # the run's config can leave the settings unread
    await run(session, read=MemoryReadConfig(scopes=None))


async def test_a_home_given_in_the_config_is_used(
    session: SandboxSession, workspace: Path, tmp_path: Path
) -> None:
    other = tmp_path / "other-home"
    make_layout(other / "personal", "Person: likes haiku.")
    make_layout(personal(), "Person: prefers tabs.")
    read = MemoryReadConfig(scopes=MemoryScopesConfig(home=other))  # type: ignore[arg-type]
    assert read.scopes is not None and read.scopes.home == str(other)
    prompt = (await run(session, read=read)).requests[0].instructions or ""
    assert "likes haiku" in prompt and "prefers tabs" not in prompt


# ---------------------------------------------------------------- writing


async def test_a_preference_goes_to_personal_and_a_code_fact_to_the_project(
    session: SandboxSession, workspace: Path
) -> None:
    make_layout(workspace, "Project: build with `make dist`.", "# Project\n- make dist\n")
    preference = append("MEMORY.md", f"- The person prefers tabs (key {SECRET}).")
    fact = update("MEMORY.md", "- make dist", "- make dist (needs the fixtures server)")
    model = await run(
        session,
        ("memory_scope_update", {"patch": preference, "scope": "personal"}),
        ("memory_scope_update", {"patch": fact}),  # no scope: the rule says project
        generate=MemoryGenerateConfig.for_model("extractive"),
    )
    said = outputs(model)
    assert said[0].startswith("[personal]") and said[1].startswith("[project]")
    mine = (personal() / "memories" / "MEMORY.md").read_text()
    project = (workspace / "memories" / "MEMORY.md").read_text()
    assert "prefers tabs" in mine and "fixtures server" not in mine
    assert "fixtures server" in project and "prefers tabs" not in project
    assert SECRET not in mine  # redacted like any memory write
    # each scope's history holds its own edit: the personal one now, the project's as the
    # run's live edit when it ended
    mine_log = await api.log(personal())  # newest first
    assert [(v.kind, v.run) for v in mine_log] == [("live_edit", "scoped-run")]
    assert "MEMORY.md" in mine_log[0].changed and mine_log[0].client == "sandmem run"
    project_log = await api.log(workspace)
    assert (project_log[0].kind, project_log[0].run) == ("live_edit", "scoped-run")
    assert project_log[0].changed == ["MEMORY.md"]
    # the run's transcript is the project's conversation only
    assert recorded(workspace) == ["scoped-run.jsonl"]
    assert recorded(personal()) == []


async def test_the_personal_layout_is_made_on_the_first_preference(
    session: SandboxSession, workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fresh = tmp_path / "no-such-home"
    monkeypatch.setenv("SANDMEM_HOME", str(fresh))
    preference = append("MEMORY.md", "- The person wants answers in French.")
    model = await run(session, ("memory_scope_update", {"patch": preference, "scope": "personal"}))
    assert outputs(model)[0].startswith("[personal]")
    assert "French" in (fresh / "personal" / "memories" / "MEMORY.md").read_text()
    assert os.stat(fresh / "personal").st_mode & 0o077 == 0  # the person's alone
    # the next run reads it
    make_layout(workspace, "Project: build with `make dist`.")
    prompt = (await run(session)).requests[0].instructions or ""
    # no summary until a consolidation: the section gives the scope's entries, said so
    section = summary_block(prompt).split("### [personal] personal memory", 1)[1]
    assert "no summary yet" in section and "answers in French" in section
    read = await run(session, ("memory_scope_read", {"path": "MEMORY.md", "scope": "personal"}))
    assert "answers in French" in outputs(read)[0]


async def test_review_mode_makes_a_personal_edit_a_proposal(
    session: SandboxSession, workspace: Path
) -> None:
    make_layout(personal(), "Person: prefers tabs.", "# Person\n- prefers tabs\n")
    make_layout(workspace, "Project: make dist.", "# Project\n- make dist\n")
    patch = update("MEMORY.md", "- prefers tabs", "- prefers spaces")
    fact = update("MEMORY.md", "- make dist", "- make dist (slow)")
    read = MemoryReadConfig(live_update="propose")
    model = await run(
        session,
        ("memory_scope_update", {"patch": patch, "scope": "personal"}),
        ("memory_scope_update", {"patch": fact}),
        read=read,
    )
    assert "Proposed as" in outputs(model)[0]
    assert (personal() / "memories" / "MEMORY.md").read_text() == "# Person\n- prefers tabs\n"
    assert (workspace / "memories" / "MEMORY.md").read_text() == "# Project\n- make dist\n"
    [mine] = await api.inbox(personal())
    assert "prefers spaces" in mine.diff and mine.run == "scoped-run"
    [proposal] = await api.inbox(workspace)  # the run's own edits: one proposal at its end
    assert proposal.files == ["MEMORY.md"] and "(slow)" in proposal.diff


async def test_a_run_without_live_updates_gets_no_write_tool(
    session: SandboxSession, workspace: Path
) -> None:
    make_layout(personal(), "Person: prefers tabs.")
    model = await run(session, read=MemoryReadConfig(live_update=False))
    assert "memory_scope_read" in tool_names(model)
    assert "memory_scope_update" not in tool_names(model)
    assert 'scope="personal"' not in (model.requests[0].instructions or "")


def snapshot(root: Path) -> dict[str, tuple[bytes | str, int]]:
    """Every entry under ``root``: a file's bytes (a link's target, a directory's ``dir``) and
    its modification time."""
    found: dict[str, tuple[bytes | str, int]] = {}
    for path in [root, *sorted(root.rglob("*"))]:
        stat = path.lstat()
        if path.is_symlink():
            value: bytes | str = "link:" + os.readlink(path)
        elif path.is_dir():
            value = "dir"
        else:
            value = path.read_bytes()
        found[str(path.relative_to(root))] = (value, stat.st_mtime_ns)
    return found


def contents(root: Path) -> dict[str, bytes | str]:
    """The files (bytes) and links under ``root``; a writable layout's lock left out."""
    return {
        str(p.relative_to(root)): "link" if p.is_symlink() else p.read_bytes()
        for p in sorted(root.rglob("*"))
        if (p.is_symlink() or p.is_file()) and p.name != ".lock"
    }


async def test_a_read_only_scope_is_never_written(
    session: SandboxSession, workspace: Path, tmp_path: Path
) -> None:
    team = tmp_path / "team"
    make_layout(team, "Team: deploys go through the release train.", "# Team\n- release train\n")
    (team / "memories" / "skills" / "deploy").mkdir(parents=True)
    (team / "memories" / "skills" / "deploy" / "SKILL.md").write_text("make deploy\n")
    settings(f'[scopes.named.team]\npath = "{team}"\n')
    make_layout(workspace, "Project: build with `make dist`.", "# Project\n")
    (workspace / "team-link").symlink_to(team / "memories")
    before = snapshot(team)
    memory_md = team / "memories" / "MEMORY.md"
    edit = update("MEMORY.md", "- release train", "- deploy on Fridays")
    attempts: list[tuple[str, dict[str, Any]]] = [
        ("memory_scope_update", {"patch": edit, "scope": "team"}),
        ("memory_scope_update", {"patch": edit, "scope": " team "}),
        ("memory_scope_update", {"patch": edit, "scope": "TEAM"}),
        ("memory_scope_update", {"patch": add(f"{memory_md}", "- x"), "scope": "project"}),
        ("memory_scope_update", {"patch": add("../team/memories/MEMORY.md", "- x")}),
        ("memory_scope_update", {"patch": update(str(memory_md), "- release train", "- x")}),
        ("memory_scope_update", {"patch": add("team-link/MEMORY.md", "- x")}),
        ("apply_patch", {"patch": update(str(memory_md), "- release train", "- x")}),
        ("apply_patch", {"patch": update("team-link/MEMORY.md", "- release train", "- x")}),
        ("apply_patch", {"patch": add("team-link/skills/new/SKILL.md", "- x")}),
        (
            "apply_patch",
            {"patch": f"*** Begin Patch\n*** Delete File: {memory_md}\n*** End Patch\n"},
        ),
        (
            "apply_patch",
            {
                "patch": "*** Begin Patch\n*** Update File: memories/MEMORY.md\n"
                f"*** Move to: {team}/memories/MEMORY.md\n@@\n-# Project\n+# Moved\n*** End Patch\n"
            },
        ),
        (
            "memory_scope_update",
            {
                "patch": "*** Begin Patch\n*** Update File: MEMORY.md\n"
                "*** Move to: team-link/MEMORY.md\n@@\n-# Project\n+# Moved\n*** End Patch\n"
            },
        ),
        ("memory_scope_search", {"query": "release train"}),
        ("memory_scope_read", {"path": "MEMORY.md", "scope": "team"}),
        ("memory_scope_read", {"path": "skills/deploy/SKILL.md", "scope": "team"}),
    ]
    model = await run(session, *attempts, generate=MemoryGenerateConfig.for_model("extractive"))
    said = outputs(model)
    assert len(said) == len(attempts)
    assert all(x.startswith("Error") and "applied" not in x for x in said[:-3])
    assert "read-only" in said[0] and "read-only" in said[1]
    assert said[-3].startswith("[team] memories/MEMORY.md:2")  # searched in its copy
    assert "release train" in said[-2] and "make deploy" in said[-1]  # read from its copy
    prompt = model.requests[0].instructions or ""
    assert "### [team] named memory (read-only" in prompt and "release train" in prompt
    assert "`team` (read-only)" in prompt
    assert snapshot(team) == before  # byte for byte, no index, lock or copy record added
    assert (workspace / "memories" / "MEMORY.md").read_text() == "# Project\n"


@pytest.mark.parametrize(
    "patch",
    [
        add("../sessions/planted.jsonl", "{}"),
        add("../../outside.md", "- x"),
        add("memory_summary.md", "- x"),
        add("raw_memories/x.md", "- x"),
        append("/etc/hostname", "- x"),
        "*** Begin Patch\n*** Update File: MEMORY.md\n*** Move to: ../moved.md\n@@\n+- x\n"
        "*** End Patch\n",
    ],
)
async def test_a_personal_edit_stays_in_its_memory_files(
    session: SandboxSession, workspace: Path, tmp_path: Path, patch: str
) -> None:
    make_layout(personal(), "Person: prefers tabs.", "# Person\n")
    outside = tmp_path / "outside.md"
    outside.write_text("untouched\n")
    (personal() / "memories" / "skills").mkdir()
    (personal() / "memories" / "skills" / "planted").symlink_to(tmp_path)
    before = contents(tmp_path)
    model = await run(session, ("memory_scope_update", {"patch": patch, "scope": "personal"}))
    assert outputs(model)[0].startswith("Error")
    assert contents(tmp_path) == before and outside.read_text() == "untouched\n"
    linked = append("skills/planted/outside.md", "- x")
    model = await run(session, ("memory_scope_update", {"patch": linked, "scope": "personal"}))
    assert outputs(model)[0].startswith("Error") and outside.read_text() == "untouched\n"


def test_the_scopes_config_is_checked() -> None:
    assert MemoryReadConfig().scopes == MemoryScopesConfig()
    assert MemoryReadConfig(scopes=True).scopes == MemoryScopesConfig()
    assert MemoryReadConfig(scopes=False).scopes is None
    for bad in ({"home": ""}, {"home": "a\x00b"}, {"personal": "maybe"}, {"other": 1}):
        with pytest.raises(ValueError):
            MemoryScopesConfig(**bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        MemoryReadConfig(scopes="personal")  # type: ignore[arg-type]


async def test_a_planted_link_in_the_personal_scope_is_not_followed(
    session: SandboxSession, workspace: Path, tmp_path: Path
) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text(f"private key {SECRET}\n")
    make_layout(workspace, "Project: build with `make dist`.")
    make_layout(personal(), "unused")
    summary = personal() / "memories" / "memory_summary.md"
    summary.unlink()
    summary.symlink_to(secret)
    model = await run(session, ("memory_scope_read", {"path": "MEMORY.md", "scope": "personal"}))
    prompt = model.requests[0].instructions or ""
    assert "make dist" in prompt and SECRET not in prompt
    assert SECRET not in json.dumps(model.requests[-1].input)
    assert secret.read_text() == f"private key {SECRET}\n"


async def test_the_reference_form_reads_the_scopes_too(
    session: SandboxSession, workspace: Path
) -> None:
    make_layout(workspace, "Project: build with `make dist`.")
    make_layout(personal(), "Person: prefers tabs.")
    memory = Memory(generate=None).bind(session)
    prompt = await memory.instructions(session.state.manifest) or ""
    assert "### [project]" in prompt and "prefers tabs" in prompt
    assert {t.name for t in memory.tools()} == {
        "memory_scope_search",
        "memory_scope_read",
        "memory_scope_update",
    }
    assert Memory(generate=None).tools() == []  # unbound: no session, no scopes yet


async def test_an_agent_with_two_memories_attaches_the_scopes_once(
    session: SandboxSession, workspace: Path
) -> None:
    make_layout(workspace, "Project: build with `make dist`.")
    make_layout(personal(), "Person: prefers tabs.")
    second = MemoryLayoutConfig(memories_dir="team-mem", sessions_dir="team-sessions")
    for _ in range(2):  # each run claims the scopes anew
        model = scripted()
        memories = [Memory(generate=None), Memory(layout=second, generate=None)]
        agent = SandboxAgent(
            name="dev", model=model, capabilities=[*memories, Filesystem(), Shell()]
        )
        await Runner.run(
            agent, "work", run_config=RunConfig(sandbox=SandboxRunConfig(session=session))
        )
        prompt = model.requests[0].instructions or ""
        assert prompt.count("prefers tabs") == 1
        names = [tool.name for tool in model.requests[0].tools]
        assert names.count("memory_scope_read") == 1 and names.count("memory_scope_update") == 1


async def test_a_search_finds_the_other_scopes_labelled(
    session: SandboxSession, workspace: Path
) -> None:
    make_layout(workspace, "Project: build with `make dist`.", "# Project\n- tabs in Makefiles\n")
    make_layout(personal(), "Person.", "# Person\n- prefers tabs for indentation\n")
    model = await run(
        session,
        ("memory_scope_search", {"query": "tabs indentation"}),
        ("memory_scope_search", {"query": "tabs", "scope": "personal"}),
        ("memory_scope_search", {"query": "tabs", "scope": "project"}),
        ("memory_scope_search", {"query": "nothing-like-this"}),
    )
    found, named, project, nothing = outputs(model)
    assert found.startswith("[personal] memories/MEMORY.md:2") and "Makefiles" not in found
    assert named.startswith("[personal] ")
    assert project.startswith("Error") and "grep" in project
    assert "No memory matches" in nothing


_PROBE = probe_bwrap()


@pytest.mark.skipif(_PROBE.error is not None, reason=str(_PROBE.error))
async def test_in_bubblewrap_the_shell_reaches_no_other_scope(tmp_path: Path) -> None:
    """The scopes outside the workspace are not in a confined sandbox at all: its shell can
    neither read the personal memory nor write a team's, while the tools still serve them."""
    team = tmp_path / "team"
    make_layout(team, "Team: release train.", "# Team\n- release train\n")
    settings(f'[scopes.named.team]\npath = "{team}"\n')
    make_layout(personal(), "Person: prefers tabs.", "# Person\n- prefers tabs\n")
    before = snapshot(team)
    mine = personal() / "memories" / "MEMORY.md"
    attempts: list[tuple[str, dict[str, Any]]] = [
        ("exec_command", {"cmd": f"echo x >> {team}/memories/MEMORY.md; echo rc=$?"}),
        ("exec_command", {"cmd": f"cat {mine}; echo rc=$?"}),
        ("memory_scope_read", {"path": "MEMORY.md", "scope": "personal"}),
    ]
    client = BubblewrapSandboxClient()
    sandbox = await client.create(manifest=Manifest(root=tmp_path / "ws"))
    async with sandbox:
        model = await run(sandbox, *attempts)
    wrote, read, served = outputs(model)
    assert "rc=0" not in wrote and "rc=0" not in read and "prefers tabs" not in read
    assert "prefers tabs" in served
    assert snapshot(team) == before
    prompt = model.requests[0].instructions or ""
    assert "### [project] project memory (read-write, /workspace)" not in prompt  # no summary
    assert "### [team] named memory (read-only" in prompt and "prefers tabs" in prompt


async def test_a_run_gets_only_the_scope_tools_it_can_use(
    session: SandboxSession, workspace: Path
) -> None:
    make_layout(workspace, "Project: build with `make dist`.")
    scope_tools = {"memory_scope_search", "memory_scope_read", "memory_scope_update"}
    # no personal memory yet: only the tool to write the first preference
    assert scope_tools & tool_names(await run(session)) == {"memory_scope_update"}
    # nothing to read and nothing to write: exactly the run of the workspace's layout alone
    alone = await run(session, read=MemoryReadConfig(live_update=False, scopes=None))
    plain = await run(session, read=MemoryReadConfig(live_update=False))
    assert plain.requests[0].instructions == alone.requests[0].instructions
    assert tool_names(plain) == tool_names(alone)
    # memory to read, no writing: search and read only
    make_layout(personal(), "Person: prefers tabs.")
    found = await run(session, read=MemoryReadConfig(live_update=False))
    assert scope_tools & tool_names(found) == {"memory_scope_search", "memory_scope_read"}
