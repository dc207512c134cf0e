"""Deterministic models for memory tests: a scripted agent, a phase-one extractor, and a
phase-two consolidator that writes through its scoped tools; and a rollout file's line."""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sandmem import RunConfig, Runner, SandboxAgent, SandboxRunConfig
from sandmem._items import Item
from sandmem.capabilities import Filesystem, Shell
from sandmem.capabilities.memory import Memory
from sandmem.memory import MemoryGenerateConfig
from sandmem.memory._types import ConsolidationInputs, ConsolidationOutput, SelectedMemory
from sandmem.memory.extractive import consolidate, extract
from sandmem.memory.layout import fingerprint
from sandmem.memory.selection import RawMemoryRef
from sandmem.models._base import ModelRequest
from sandmem.sandboxes import Manifest, SandboxSession, UnixLocalSandboxClient
from sandmem.testing import FunctionModel, last_user_text, tool_call, tool_outputs


def scripted_agent(*steps: Callable[[ModelRequest], list[Item] | str]) -> FunctionModel:
    """Turn k of each run answers with ``steps[k]``; k counts the tool outputs since the run's
    last user message (so give each step at most one tool call)."""

    def fn(request: ModelRequest) -> list[Item] | str:
        last_user = max(i for i, item in enumerate(request.input) if item.get("role") == "user")
        turn = sum(
            1 for item in request.input[last_user:] if item.get("type") == "function_call_output"
        )
        return steps[min(turn, len(steps) - 1)](request)

    return FunctionModel(fn, name="scripted-agent")


def phase_one_model(slug: str = "fix-the-bug") -> FunctionModel:
    """Returns structured artifacts naming the rollout's first user request."""

    def fn(request: ModelRequest) -> str:
        assert request.tools == [], "phase one must not offer tools"
        assert request.output_schema is not None
        text = last_user_text(request)
        first = text.split("user:", 1)[-1].strip().splitlines()[0][:80] if text else ""
        return json.dumps(
            {
                "rollout_slug": slug,
                "rollout_summary": f"Task: {first}\nOutcome: done.",
                "raw_memory": f"- The user asked: {first}",
            }
        )

    return FunctionModel(fn, name="phase-one")


def _sources_line(raw_memories: str) -> str:
    """A ``Sources:`` line citing every rollout summary named in ``raw_memories.md``."""
    found = re.findall(r"rollout_summaries/[A-Za-z0-9._-]+\.md", raw_memories)
    return "Sources: " + ", ".join(dict.fromkeys(found)) + "\n"


def phase_two_model(summary: str = "Summary: fixed src/app.py; run `pytest -q`.") -> FunctionModel:
    """Reads raw_memories.md, writes MEMORY.md and memory_summary.md, then answers."""

    def fn(request: ModelRequest) -> list[Item] | str:
        outputs = tool_outputs(request)
        match = re.search(r"memory root is\s+`([^`]+)/`", request.instructions or "")
        assert match, "the consolidation prompt names the memory root"
        memories_dir = match.group(1)
        if not outputs:
            return [tool_call("read_file", {"path": f"{memories_dir}/raw_memories.md"})]
        if len(outputs) == 1:
            raw = str(outputs[0]["output"])
            return [
                tool_call(
                    "write_file",
                    {
                        "path": f"{memories_dir}/MEMORY.md",
                        "content": f"## Task group\nKeywords: test\n{raw}\n" + _sources_line(raw),
                    },
                ),
                tool_call(
                    "write_file",
                    {"path": f"{memories_dir}/memory_summary.md", "content": summary},
                ),
            ]
        return "consolidated"

    return FunctionModel(fn, name="phase-two")


def segment_line(rid: str, task: str, minute: int = 0, answer: str = "done") -> str:
    """One completed run segment of ``rid`` as a rollout file line: ``task`` asked, ``answer``
    given, at 10:``minute`` on 2026-05-01."""
    return (
        json.dumps(
            {
                "updated_at": f"2026-05-01T10:{minute:02d}:00+00:00",
                "rollout_id": rid,
                "input": [{"role": "user", "content": task}],
                "generated_items": [
                    {"role": "assistant", "content": f"{answer}: {task.lower()}. Tests pass."}
                ],
                "terminal_metadata": {"terminal_state": "completed"},
            }
        )
        + "\n"
    )


def extracted(rollout_id: str, text: str) -> SelectedMemory:
    """What the pipeline would hand phase two after an extractive phase one of a rollout
    file's ``text``."""
    artifacts = extract(rollout_id, text)
    assert artifacts is not None
    fp = fingerprint(text.encode())
    ref = RawMemoryRef(
        rollout_id=rollout_id,
        updated_at=fp.updated_at,
        rollout_path=f"sessions/{rollout_id}.jsonl",
        rollout_summary_file=f"rollout_summaries/{rollout_id}_{artifacts.rollout_slug}.md",
        terminal_state=fp.terminal_state,
    )
    return SelectedMemory(ref, artifacts.raw_memory, artifacts.rollout_summary)


def consolidated(chosen: list[SelectedMemory]) -> ConsolidationOutput:
    """The extractive phase two of ``chosen`` (all added, nothing removed, no manual notes,
    the default budgets)."""
    return consolidate(
        ConsolidationInputs(
            memories_dir="memories",
            selected=chosen,
            added=[m.ref for m in chosen],
            retained=[],
            removed=[],
            current_memory_md="",
            consolidated_memory_md="",
            memory_md_max_bytes=96_000,
            summary_max_bytes=24_000,
        )
    )


def transcript_turn(
    rid: str, user: str, answer: str, minute: int = 0, tool: tuple[str, str] | None = None
) -> str:
    """One segment line: a user message, an optional tool call and its output, an answer."""
    items: list[dict[str, Any]] = []
    if tool is not None:
        items += [
            {"type": "function_call", "name": "exec_command", "call_id": "c1",
             "arguments": json.dumps({"cmd": tool[0]})},
            {"type": "function_call_output", "call_id": "c1", "output": tool[1]},
        ]  # fmt: skip
    items.append({"role": "assistant", "content": answer})
    line = {
        "updated_at": f"2026-05-01T10:{minute:02d}:00+00:00",
        "rollout_id": rid,
        "input": [{"role": "user", "content": user}],
        "generated_items": items,
        "terminal_metadata": {"terminal_state": "completed"},
    }
    return json.dumps(line) + "\n"


def transcripts_workspace(tmp_path: Path, files: dict[str, str]) -> Path:
    """A workspace with an empty ``memories/`` and these rollout files (id -> text)."""
    root = tmp_path / "ws"
    (root / "memories").mkdir(parents=True)
    (root / "sessions").mkdir(parents=True)
    for rid, text in files.items():
        (root / "sessions" / f"{rid}.jsonl").write_text(text)
    return root


def gone_and_kept(tmp_path: Path, word: str) -> Path:
    """A workspace of two recorded conversations: ``gone`` says ``word``, ``kept`` does not
    (for forgetting one)."""
    return transcripts_workspace(
        tmp_path,
        {
            "gone": transcript_turn("gone", f"remember {word} for later", f"Noted {word}."),
            "kept": transcript_turn("kept", "set up the linter", "ruff configured"),
        },
    )


def failing_model(message: str = "boom") -> FunctionModel:
    """A model whose every request raises ``RuntimeError(message)``."""

    def fn(request: object) -> str:
        raise RuntimeError(message)

    return FunctionModel(fn)


def doubles_config(**overrides: object) -> MemoryGenerateConfig:
    """A generate config with this module's phase-one and phase-two doubles."""
    values: dict[str, object] = {
        "phase_one_model": phase_one_model(),
        "phase_two_model": phase_two_model(),
    }
    values.update(overrides)
    return MemoryGenerateConfig(**values)  # type: ignore[arg-type]


async def record_run(
    session: SandboxSession, cfg: MemoryGenerateConfig, rid: str, prompt: str
) -> None:
    """One run of a scripted agent with ``Memory(generate=cfg)`` recorded as ``rid``."""
    agent = SandboxAgent(
        name="dev",
        model=scripted_agent(
            lambda r: [tool_call("exec_command", {"cmd": "true"})], lambda r: "ok"
        ),
        capabilities=[Memory(generate=cfg), Filesystem(), Shell()],
    )
    run_config = RunConfig(sandbox=SandboxRunConfig(session=session))
    await Runner.run(agent, prompt, run_config=run_config, conversation_id=rid)


async def open_session(root: Path) -> SandboxSession:
    """A session on ``root`` used in place (created when missing)."""
    return await UnixLocalSandboxClient().create(manifest=Manifest(root=root))


def steps_model(*steps: list[dict[str, Any]] | str) -> FunctionModel:
    """Answers ``steps[k]`` where k counts the tool outputs so far (the last step repeats)."""

    def fn(request: ModelRequest) -> object:
        return steps[min(len(tool_outputs(request)), len(steps) - 1)]

    return FunctionModel(fn)


def age(root: Path, seconds: float = 120.0) -> None:
    """Date every file of ``root`` back, so the layout index trusts its rows (a file changed
    within the last two seconds is always derived again)."""
    past = time.time() - seconds
    for path in root.rglob("*"):
        if path.is_file() and not path.is_symlink():
            os.utime(path, (past, past))
