"""Issue 14 (5), (7), (8): ids never collide, dropped items never reach disk or the prompt,
a lone surrogate never drops a run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from memory_doubles import phase_one_model, phase_two_model

from sandmem import RunConfig, Runner, SandboxAgent, SandboxRunConfig
from sandmem.capabilities import Filesystem, Shell
from sandmem.capabilities.memory import Memory
from sandmem.memory import MemoryGenerateConfig
from sandmem.memory.generation.phase_one import render_input
from sandmem.memory.rollouts import (
    conversation_rollout_id,
    file_safe_rollout_id,
    filter_items,
    segment_line,
)
from sandmem.models._base import ModelRequest
from sandmem.sandboxes import Manifest, UnixLocalSandboxClient
from sandmem.testing import FunctionModel

SECRET_BLOB = "gAAAAB-opaque-encrypted-blob"
DROPPED: list[dict[str, Any]] = [
    {"role": "system", "content": "system prompt"},
    {"role": "developer", "content": "developer prompt"},
    {"type": "reasoning", "summary": [], "encrypted_content": SECRET_BLOB},
    {"type": "compaction", "encrypted_content": SECRET_BLOB, "summary": "compacted history"},
    {"type": "file_search_call", "id": "fs1", "queries": ["hosted search query"], "status": "x"},
    {"type": "code_interpreter_call", "id": "ci1", "code": "print('hosted code')"},
    {"type": "image_generation_call", "id": "ig1", "result": "aGVsbG8="},
    {"type": "some_future_item", "payload": "unknown item text"},
]
KEPT: list[dict[str, Any]] = [
    {"role": "user", "content": "fix the bug"},
    {"type": "function_call", "call_id": "c1", "name": "exec_command", "arguments": "{}"},
    {"type": "function_call_output", "call_id": "c1", "output": "ok"},
    {"type": "web_search_call", "id": "ws1", "status": "completed"},
    {
        "role": "assistant",
        "content": [{"type": "output_text", "text": "done", "encrypted_content": SECRET_BLOB}],
    },
]


def test_no_two_keys_share_a_rollout_file() -> None:
    mapped = file_safe_rollout_id("alice@example.com:thread 7")
    # a valid id equal to another key's mapped form is mapped too: it gets its own file
    rid, key = conversation_rollout_id(mapped)
    assert key == mapped and rid != mapped
    assert conversation_rollout_id("alice@example.com:thread 7")[0] == mapped
    # ordinary valid ids (and files recorded under them) stay as they are
    assert conversation_rollout_id("invoice-fix") == ("invoice-fix", None)
    assert conversation_rollout_id("alice-example.com-thread-7-1a2b3c4d")[1] is None
    keys = ["a/b", "a:b", "a b", "a?b", mapped, rid, "a-b", "conversation", "", " "]
    ids = {conversation_rollout_id(k)[0] if k.strip() else file_safe_rollout_id(k) for k in keys}
    assert len(ids) == len(keys)


def test_filter_keeps_task_facts_and_drops_the_rest() -> None:
    kept = filter_items(DROPPED + KEPT)
    assert [i.get("type") or i.get("role") for i in kept] == [
        "user",
        "function_call",
        "function_call_output",
        "web_search_call",
        "assistant",
    ]
    assert SECRET_BLOB not in json.dumps(kept)


def test_old_rollouts_with_dropped_items_do_not_reach_the_prompt() -> None:
    segment = {
        "updated_at": "2026-01-01T00:00:00Z",
        "rollout_id": "old",
        "input": DROPPED + KEPT[:1],
        "generated_items": KEPT[1:],
        "terminal_metadata": {"terminal_state": "completed"},
    }
    prompt = render_input("old", json.dumps(segment) + "\n")
    assert "fix the bug" in prompt
    for text in (SECRET_BLOB, "compacted history", "hosted search query", "hosted code"):
        assert text not in prompt, text
    assert "unknown item text" not in prompt and "system prompt" not in prompt


def test_a_lone_surrogate_never_drops_a_run() -> None:
    line = segment_line({"final_output": "broken emoji \ud83d here", "pair": "\ud83d\ude00"})
    data = json.loads(line.decode("utf-8"))
    assert data["final_output"] == "broken emoji \ufffd here"
    assert data["pair"] == "\U0001f600"


async def test_recorded_runs_keep_neither_dropped_items_nor_surrogates(tmp_path: Path) -> None:
    seen: list[ModelRequest] = []

    def agent_fn(request: ModelRequest) -> Any:
        return [
            {"type": "reasoning", "summary": [], "encrypted_content": SECRET_BLOB},
            {"type": "compaction", "encrypted_content": SECRET_BLOB},
            {"type": "file_search_call", "id": "fs", "queries": ["hosted search query"]},
            {"role": "assistant", "content": "answer with a broken emoji \ud83d"},
        ]

    def extract(request: ModelRequest) -> Any:
        seen.append(request)
        return phase_one_model()._fn(request)

    config = MemoryGenerateConfig(
        phase_one_model=FunctionModel(extract), phase_two_model=phase_two_model()
    )
    agent = SandboxAgent(
        name="a",
        model=FunctionModel(agent_fn),
        capabilities=[Memory(generate=config), Filesystem(), Shell()],
    )
    sandbox = await UnixLocalSandboxClient().create(manifest=Manifest(root=tmp_path / "ws"))
    async with sandbox:
        run = RunConfig(sandbox=SandboxRunConfig(session=sandbox))
        await Runner.run(agent, "task one", run_config=run, conversation_id="c1")
    rollout = (sandbox.root / "sessions/c1.jsonl").read_text()
    assert "broken emoji \ufffd" in rollout
    for text in (SECRET_BLOB, "compaction", "file_search_call", "hosted search query"):
        assert text not in rollout, text
    prompt = json.dumps([r.input for r in seen])
    assert seen and SECRET_BLOB not in prompt and "hosted search query" not in prompt
    assert (sandbox.root / "memories/raw_memories/c1.md").exists()
