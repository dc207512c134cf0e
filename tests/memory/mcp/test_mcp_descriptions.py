"""The MCP tools accept the paths their own descriptions name: every file path written in
backticks in a tool's description or in its arguments' descriptions is called with, in both
forms (relative to the memory directory and with the memory directory in front), and so are
the paths the search tool hands out."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sandmem.memory.config import MemoryGenerateConfig, MemoryLayoutConfig
from sandmem.memory.layout import MemoryPaths
from sandmem.memory.mcp._tools import (
    TOOL_SPECS,
    Caller,
    MemoryTools,
    ServerOptions,
    ToolRefused,
    in_memory_dir,
)

SUMMARY = "2026-01-02T03-04-05-abcd-fixing_invoices.md"
PLACEHOLDERS = {"<file>": SUMMARY.removesuffix(".md"), "<name>": "deploy"}


def _seed(workspace: Path) -> None:
    memories = workspace / "memories"
    (memories / "skills" / "deploy").mkdir(parents=True)
    (memories / "rollout_summaries").mkdir()
    (workspace / "sessions").mkdir()
    (memories / "MEMORY.md").write_text("# Memory\n\n## Invoices\n- totals are rounded\n")
    (memories / "memory_summary.md").write_text("The user likes invoices rounded to cents.\n")
    (memories / "skills" / "deploy" / "SKILL.md").write_text("# Deploy\n\nRun make deploy.\n")
    (memories / "rollout_summaries" / SUMMARY).write_text("# Fixing invoices\n\nrounded\n")


def _tools(workspace: Path) -> MemoryTools:
    options = ServerOptions(
        str(workspace),
        MemoryLayoutConfig(),
        MemoryGenerateConfig.for_model("extractive"),
        tracing=False,
    )
    return MemoryTools(options)


def _described_paths(tool: str) -> list[str]:
    """The file paths (`x.md`, `dir/<name>/x.md`) a tool's descriptions name, placeholders
    filled in."""
    spec = TOOL_SPECS[tool]
    texts = [spec.description]
    texts += [f.description or "" for f in spec.args.model_fields.values()]
    found = []
    for text in texts:
        for token in re.findall(r"`([^`]+)`", text):
            if token.endswith(".md") and " " not in token:
                for hole, value in PLACEHOLDERS.items():
                    token = token.replace(hole, value)
                found.append(token)
    return sorted(set(found))


def _with_and_without_dir(path: str) -> list[str]:
    rel = path.removeprefix("memories/")
    return [rel, f"memories/{rel}"]


def test_the_descriptions_name_paths() -> None:
    assert {"MEMORY.md", "memory_summary.md", "skills/deploy/SKILL.md"} <= set(
        _described_paths("memory_read")
    )
    assert {"MEMORY.md", "skills/deploy/SKILL.md", "memories/MEMORY.md"} <= set(
        _described_paths("memory_update")
    )


async def test_memory_read_takes_every_described_path(tmp_path: Path) -> None:
    _seed(tmp_path)
    tools = _tools(tmp_path)
    for described in _described_paths("memory_read"):
        for given in _with_and_without_dir(described):
            text = await tools.call("memory_read", {"path": given}, Caller())
            want = "memories/" + described.removeprefix("memories/")
            assert text.startswith(f"{want}: lines 1-"), (given, text)


async def test_memory_update_takes_every_described_path(tmp_path: Path) -> None:
    _seed(tmp_path)
    tools = _tools(tmp_path)
    paths = sorted(
        {p.removeprefix("memories/") for p in _described_paths("memory_update")}
        | {"skills/deploy/SKILL.md"}
    )
    for n, described in enumerate(
        [given for path in paths for given in _with_and_without_dir(path)]
    ):
        target = tmp_path / "memories" / described.removeprefix("memories/")
        last = target.read_text().splitlines()[-1]
        patch = (
            f"*** Begin Patch\n*** Update File: {described}\n@@\n-{last}\n+{last} (edit {n})\n"
            "*** End Patch"
        )
        result = await tools.call("memory_update", {"patch": patch}, Caller())
        assert target.read_text().splitlines()[-1] == f"{last} (edit {n})", result


async def test_search_hits_feed_read_and_update(tmp_path: Path) -> None:
    _seed(tmp_path)
    tools = _tools(tmp_path)
    hits = await tools.call("memory_search", {"query": "rounded"}, Caller())
    hit_paths = {line.split(":", 1)[0] for line in hits.splitlines()}
    assert "memories/MEMORY.md" in hit_paths
    for path in hit_paths:
        assert (await tools.call("memory_read", {"path": path}, Caller())).startswith(path)
    patch = (
        "*** Begin Patch\n*** Update File: memories/MEMORY.md\n@@\n-- totals are rounded\n"
        "+- totals are rounded to cents\n*** End Patch"
    )
    await tools.call("memory_update", {"patch": patch}, Caller())
    assert "rounded to cents" in (tmp_path / "memories" / "MEMORY.md").read_text()


@pytest.mark.parametrize(
    "target",
    [
        "memory_summary.md",  # memory, but consolidation writes it, not a live edit
        "rollout_summaries/x.md",
        "../outside.md",
        "memories/../outside.md",
        "skills/../../outside.md",
        "/etc/passwd",
        "sessions/x.jsonl",
    ],
)
async def test_memory_update_still_refuses_other_files(tmp_path: Path, target: str) -> None:
    _seed(tmp_path)
    tools = _tools(tmp_path)
    patch = f"*** Begin Patch\n*** Add File: {target}\n+hello\n*** End Patch"
    with pytest.raises(ToolRefused, match=r"nothing was changed|not a memory file|outside"):
        await tools.call("memory_update", {"patch": patch}, Caller())
    assert not (tmp_path / "outside.md").exists()
    assert not (tmp_path / "memories" / "rollout_summaries" / "x.md").exists()


def test_in_memory_dir_rewrites_only_headers() -> None:
    paths = MemoryPaths("mem/ory", "sessions")
    patch = (
        "*** Begin Patch\n*** Update File: ./MEMORY.md\n*** Move to: skills/a/SKILL.md\n@@\n"
        "-*** Update File: MEMORY.md\n+x\n*** Add File: memory://skills/b/SKILL.md\n+y\n"
        "*** Delete File: notes.md\n*** End Patch"
    )
    assert in_memory_dir(patch, paths).splitlines() == [
        "*** Begin Patch",
        "*** Update File: mem/ory/MEMORY.md",
        "*** Move to: mem/ory/skills/a/SKILL.md",
        "@@",
        "-*** Update File: MEMORY.md",
        "+x",
        "*** Add File: mem/ory/skills/b/SKILL.md",
        "+y",
        "*** Delete File: notes.md",
        "*** End Patch",
    ]


async def test_a_note_keeps_who_gave_it_out_of_what_is_remembered(tmp_path: Path) -> None:
    """Issue 39 (12): the client's session id became a keyword of the remembered note."""
    import json as _json

    from sandmem.memory import generate

    _seed(tmp_path)
    tools = _tools(tmp_path)
    caller = Caller(client="probe-client", session="sess-9f8e7d6c5b4a", transport="http")
    note = "Deploys go through make deploy-staging, never by hand."
    await tools.call("memory_remember", {"text": note, "kind": "procedure"}, caller)
    [line] = (tmp_path / "sessions" / "mcp-notes.jsonl").read_text().splitlines()
    segment = _json.loads(line)
    assert segment["source"]["session"] == "sess-9f8e7d6c5b4a"  # attribution is kept
    assert "sess-9f8e7d6c5b4a" not in _json.dumps(segment["input"])
    assert "probe-client" not in _json.dumps(segment["input"])
    await generate(tmp_path, engine="extractive")
    memory = "".join(p.read_text() for p in (tmp_path / "memories").rglob("*.md"))
    assert "deploy-staging" in memory
    assert "sess-9f8e7d6c5b4a" not in memory and "9f8e7d6c5b4a" not in memory


async def test_memory_forget_takes_the_ids_memory_list_gives(tmp_path: Path) -> None:
    """memory_forget's description: the conversation to forget comes from memory_list."""
    import json as _json

    from sandmem.memory import generate

    _seed(tmp_path)
    options = ServerOptions(
        str(tmp_path),
        MemoryLayoutConfig(),
        MemoryGenerateConfig.for_model("extractive"),
        tracing=False,
        allow_forget=True,
    )
    tools = MemoryTools(options)
    await tools.call("memory_remember", {"text": "Use make lint before pushing."}, Caller())
    await generate(tmp_path, engine="extractive")
    listed = _json.loads((await tools.call("memory_list", {}, Caller())).split("\n(")[0])
    ids = [row["rollout_id"] for row in listed]
    assert ids == ["mcp-notes"]
    forgot = _json.loads(await tools.call("memory_forget", {"rollout_id": ids[0]}, Caller()))
    assert forgot["rollout_id"] == "mcp-notes" and forgot["removed"]
