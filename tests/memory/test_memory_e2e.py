"""Memory end to end on a local sandbox with deterministic models: record → stop → generate →
resume from the snapshot → the next run's instructions carry the summary."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from memory_doubles import phase_one_model, phase_two_model, scripted_agent

from sandmem import (
    RunConfig,
    Runner,
    SandboxAgent,
    SandboxRunConfig,
    SQLiteSession,
    UserError,
)
from sandmem._errors import ModelRequestError
from sandmem.capabilities import Filesystem, Shell
from sandmem.capabilities.memory import Memory
from sandmem.memory import EXTRACTIVE, MemoryGenerateConfig, MemoryLayoutConfig
from sandmem.memory.generation._attach import get_manager
from sandmem.memory.layout import MemoryPaths, parse_header
from sandmem.models import ModelRequest
from sandmem.sandboxes import (
    BubblewrapSandboxClient,
    File,
    LocalSnapshotSpec,
    Manifest,
    SandboxSession,
    SandboxSessionState,
    UnixLocalSandboxClient,
)
from sandmem.testing import FunctionModel, tool_call

MANIFEST = Manifest(entries={"src/app.py": File(content=b"def f():\n    return 1 + 1\n")})


def generate_config(**overrides: object) -> MemoryGenerateConfig:
    values: dict[str, object] = {
        "phase_one_model": phase_one_model(),
        "phase_two_model": phase_two_model(),
    }
    values.update(overrides)
    return MemoryGenerateConfig(**values)  # type: ignore[arg-type]


def dev_agent(memory: Memory, model: FunctionModel | None = None) -> SandboxAgent:
    model = model or scripted_agent(
        lambda r: [tool_call("exec_command", {"cmd": "cat src/app.py"})],
        lambda r: "Looked at src/app.py.",
    )
    return SandboxAgent(name="dev", model=model, capabilities=[memory, Filesystem(), Shell()])


def files_under(root: Path, rel: str) -> list[str]:
    base = root / rel
    return sorted(str(p.relative_to(root)) for p in base.rglob("*") if p.is_file())


def run_config(sandbox: SandboxSession) -> RunConfig:
    return RunConfig(sandbox=SandboxRunConfig(session=sandbox))


def _backends() -> list[object]:
    """The local backend always; bubblewrap when it can run here (CI installs it)."""
    from sandmem.sandboxes._bwrap_host import probe_bwrap

    probe = probe_bwrap()
    skip = pytest.mark.skipif(probe.error is not None, reason=str(probe.error))
    return [
        pytest.param(UnixLocalSandboxClient, id="local"),
        pytest.param(BubblewrapSandboxClient, id="bubblewrap", marks=skip),
    ]


@pytest.mark.parametrize("client_class", _backends())
async def test_two_runs_snapshot_and_resume(tmp_path: Path, client_class: type) -> None:
    client = client_class()
    config = generate_config()
    memory = Memory(generate=config)
    sandbox = await client.create(
        manifest=MANIFEST, snapshot=LocalSnapshotSpec(base_path=tmp_path / "snapshots")
    )
    async with sandbox:
        result = await Runner.run(
            dev_agent(memory),
            "Fix the bug in src/app.py",
            run_config=run_config(sandbox),
            conversation_id="fix-1",
        )
        assert result.final_output == "Looked at src/app.py."
    root = sandbox.root
    rollout = (root / "sessions/fix-1.jsonl").read_text()
    segment = json.loads(rollout)
    assert segment["rollout_id"] == "fix-1"
    assert segment["terminal_metadata"]["terminal_state"] == "completed"
    assert [i.get("type") for i in segment["generated_items"]][:2] == [
        "function_call",
        "function_call_output",
    ]
    fields, body = parse_header((root / "memories/raw_memories/fix-1.md").read_text())
    assert fields == {
        "rollout_id": "fix-1",
        "updated_at": segment["updated_at"],
        "rollout_path": "sessions/fix-1.jsonl",
        "rollout_summary_file": "rollout_summaries/fix-1_fix-the-bug.md",
        "terminal_state": "completed",
        "segments": "1",
    }
    assert "Fix the bug in src/app.py" in body
    summary_fields, _ = parse_header(
        (root / "memories/rollout_summaries/fix-1_fix-the-bug.md").read_text()
    )
    assert list(summary_fields) == ["session_id", "updated_at", "rollout_path", "terminal_state"]
    assert "## Rollout fix-1" in (root / "memories/raw_memories.md").read_text()
    assert (root / "memories/MEMORY.md").read_text().startswith("## Task group")
    selection = json.loads((root / "memories/phase_two_selection.json").read_text())
    assert selection["version"] == 1
    assert [s["rollout_id"] for s in selection["selected"]] == ["fix-1"]
    log = [json.loads(x) for x in (root / "memories/generation_log.jsonl").read_text().splitlines()]
    assert [(r["phase"], r["status"]) for r in log] == [("one", "done"), ("two", "done")]

    state = SandboxSessionState.model_validate_json(sandbox.state.model_dump_json())
    resumed = await client.resume(state)
    agent2 = dev_agent(Memory(generate=config))
    async with resumed:
        assert resumed.root == root  # restored into the root the first session used
        await Runner.run(agent2, "Add a regression test", run_config=run_config(resumed))
    first = agent2.model.requests[0]  # type: ignore[union-attr]
    assert first.instructions is not None
    assert "<memory_summary>\nSummary: fixed src/app.py; run `pytest -q`.\n</memory_summary>" in (
        first.instructions
    )
    assert "memories/MEMORY.md" in first.instructions


async def test_no_summary_means_no_memory_prompt() -> None:
    client = UnixLocalSandboxClient()
    agent = dev_agent(Memory(generate=generate_config()))
    async with await client.create(manifest=MANIFEST) as sandbox:
        await Runner.run(agent, "hello", run_config=run_config(sandbox))
        first = agent.model.requests[0]  # type: ignore[union-attr]
        assert "<memory_summary>" not in (first.instructions or "")
        (sandbox.root / "memories/memory_summary.md").write_text("   \n")
        await Runner.run(agent, "hello again", run_config=run_config(sandbox))
        assert "<memory_summary>" not in (agent.model.requests[-1].instructions or "")  # type: ignore[union-attr]


async def test_multi_turn_session_appends_to_one_rollout() -> None:
    client = UnixLocalSandboxClient()
    agent = dev_agent(Memory(generate=generate_config()))
    conversation = SQLiteSession("gtm-q2-review")
    sandbox = await client.create(manifest=MANIFEST)
    async with sandbox:
        for prompt in ("first", "second"):
            await Runner.run(agent, prompt, session=conversation, run_config=run_config(sandbox))
    lines = (sandbox.root / "sessions/gtm-q2-review.jsonl").read_text().splitlines()
    # each segment records the run's input as given: a string is one {content, role} message
    assert [json.loads(x)["input"] for x in lines] == [
        [{"content": "first", "role": "user"}],
        [{"content": "second", "role": "user"}],
    ]
    raw = parse_header((sandbox.root / "memories/raw_memories/gtm-q2-review.md").read_text())[0]
    assert raw["segments"] == "2"


async def test_layouts_are_isolated() -> None:
    client = UnixLocalSandboxClient()
    gtm = Memory(
        layout=MemoryLayoutConfig(memories_dir="memories/gtm", sessions_dir="sessions/gtm"),
        generate=generate_config(),
    )
    eng = Memory(
        layout=MemoryLayoutConfig(memories_dir="memories/eng", sessions_dir="sessions/eng"),
        generate=generate_config(),
    )
    sandbox = await client.create(manifest=MANIFEST)
    async with sandbox:
        await Runner.run(
            dev_agent(gtm), "leads", run_config=run_config(sandbox), conversation_id="gtm-1"
        )
        await Runner.run(
            dev_agent(eng), "invoice", run_config=run_config(sandbox), conversation_id="eng-1"
        )
    root = sandbox.root
    gtm_files = files_under(root, "memories/gtm") + files_under(root, "sessions/gtm")
    eng_files = files_under(root, "memories/eng") + files_under(root, "sessions/eng")
    assert any("gtm-1" in f for f in gtm_files) and not any("eng-1" in f for f in gtm_files)
    assert any("eng-1" in f for f in eng_files) and not any("gtm-1" in f for f in eng_files)
    assert "leads" in (root / "memories/gtm/raw_memories.md").read_text()
    assert "leads" not in (root / "memories/eng/raw_memories.md").read_text()
    assert not (root / "memories/MEMORY.md").exists()


@pytest.mark.parametrize(
    ("first", "second"),
    [
        (("memories", "sessions"), ("memories", "sessions/other")),
        (("memories", "sessions"), ("memories/other", "sessions")),
        (("memories", "sessions"), ("memories/gtm", "sessions/gtm")),
        (("memories/a", "sessions/a"), ("sessions/a/x", "memories/b")),
    ],
)
async def test_layout_conflicts_refused_before_first_model_call(
    first: tuple[str, str], second: tuple[str, str] | None
) -> None:
    client = UnixLocalSandboxClient()
    async with await client.create(manifest=MANIFEST) as sandbox:
        layout = MemoryLayoutConfig(memories_dir=first[0], sessions_dir=first[1])
        agent_a = dev_agent(Memory(layout=layout, generate=generate_config()))
        if second is None:
            with pytest.raises(UserError):
                await Runner.run(agent_a, "x", run_config=run_config(sandbox))
            assert agent_a.model.requests == []  # type: ignore[union-attr]
            return
        await Runner.run(agent_a, "x", run_config=run_config(sandbox))
        layout_b = MemoryLayoutConfig(memories_dir=second[0], sessions_dir=second[1])
        agent_b = dev_agent(Memory(layout=layout_b, generate=generate_config()))
        with pytest.raises(UserError, match="conflicts"):
            await Runner.run(agent_b, "y", run_config=run_config(sandbox), conversation_id="b")
        assert agent_b.model.requests == []  # type: ignore[union-attr]
        assert not (sandbox.root / second[1] / "b.jsonl").exists()


async def test_same_layout_different_generate_config_refused() -> None:
    client = UnixLocalSandboxClient()
    async with await client.create(manifest=MANIFEST) as sandbox:
        await Runner.run(
            dev_agent(Memory(generate=generate_config())), "x", run_config=run_config(sandbox)
        )
        other = dev_agent(Memory(generate=generate_config(max_raw_memories_for_consolidation=3)))
        with pytest.raises(UserError, match="different MemoryGenerateConfig"):
            await Runner.run(other, "y", run_config=run_config(sandbox))


async def test_missing_capability_refused_and_nothing_recorded() -> None:
    client = UnixLocalSandboxClient()
    async with await client.create(manifest=MANIFEST) as sandbox:
        model = FunctionModel(lambda r: "x")
        agent = SandboxAgent(
            name="a", model=model, capabilities=[Memory(generate=generate_config())]
        )
        with pytest.raises(UserError, match=r"Filesystem\(\), Shell\(\)"):
            await Runner.run(agent, "x", run_config=run_config(sandbox), conversation_id="c")
        assert model.requests == []
        assert not (sandbox.root / "sessions/c.jsonl").exists()


async def test_failed_run_is_recorded() -> None:
    client = UnixLocalSandboxClient()

    def broken(request: ModelRequest) -> object:
        if not any(i.get("type") == "function_call_output" for i in request.input):
            return [tool_call("exec_command", {"cmd": "cat src/app.py"})]
        raise RuntimeError("model exploded")

    agent = dev_agent(Memory(generate=generate_config()), FunctionModel(broken))
    sandbox = await client.create(manifest=MANIFEST)
    async with sandbox:
        with pytest.raises(RuntimeError):
            await Runner.run(agent, "do it", run_config=run_config(sandbox), conversation_id="f")
    segment = json.loads((sandbox.root / "sessions/f.jsonl").read_text())
    assert segment["terminal_metadata"] == {
        "terminal_state": "failed",
        "exception_type": "RuntimeError",
        "exception_message": "model exploded",
        "has_final_output": False,
    }
    assert (sandbox.root / "memories/raw_memories/f.md").exists()


@pytest.mark.parametrize(
    "error",
    [
        ModelRequestError("HTTP 401 Incorrect API key sk-wrong", status_code=401),
        ModelRequestError("HTTP 500 server on fire", status_code=500, retryable=True),
        RuntimeError("model exploded"),
    ],
    ids=["401", "500", "crash"],
)
async def test_run_without_a_model_reply_records_nothing(error: Exception) -> None:
    """Issue 29: a run that never got a model reply is no conversation: nothing is recorded,
    so nothing is distilled and no error text reaches memory."""

    def broken(request: ModelRequest) -> str:
        raise error

    agent = dev_agent(Memory(generate=generate_config()), FunctionModel(broken))
    sandbox = await UnixLocalSandboxClient().create(manifest=MANIFEST)
    async with sandbox:
        with pytest.raises(type(error)):
            await Runner.run(agent, "do it", run_config=run_config(sandbox), conversation_id="f")
    assert not (sandbox.root / "sessions/f.jsonl").exists()
    assert not (sandbox.root / "memories/raw_memories").exists() or not list(
        (sandbox.root / "memories/raw_memories").iterdir()
    )


async def test_infrastructure_error_after_work_is_recorded_without_its_text() -> None:
    """A run the server stopped after some work keeps its transcript; the error is marked
    as infrastructure and its text stays out of every memory file."""

    def flaky(request: ModelRequest) -> object:
        if not any(i.get("type") == "function_call_output" for i in request.input):
            return [tool_call("exec_command", {"cmd": "cat src/app.py"})]
        raise ModelRequestError("HTTP 401 Incorrect API key sk-wrong", status_code=401)

    config = generate_config().model_copy(
        update={"phase_one_model": EXTRACTIVE, "phase_two_model": EXTRACTIVE}
    )
    agent = dev_agent(Memory(generate=config), FunctionModel(flaky))
    sandbox = await UnixLocalSandboxClient().create(manifest=MANIFEST)
    async with sandbox:
        with pytest.raises(ModelRequestError):
            await Runner.run(agent, "do it", run_config=run_config(sandbox), conversation_id="f")
    segment = json.loads((sandbox.root / "sessions/f.jsonl").read_text())
    assert segment["terminal_metadata"]["error_origin"] == "infrastructure"
    memory_files = [p for p in (sandbox.root / "memories").rglob("*.md") if p.is_file()]
    assert any(p.name == "memory_summary.md" for p in memory_files)
    for path in memory_files:
        text = path.read_text()
        assert "Incorrect API key" not in text and "401" not in text, path


async def test_phase_one_failure_stays_pending_then_retried() -> None:
    calls = {"n": 0}
    good = phase_one_model()

    def flaky(request: object) -> str:
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("transient")
        return good._fn(request)  # type: ignore[arg-type]

    config = generate_config(phase_one_model=FunctionModel(flaky))
    client = UnixLocalSandboxClient()
    sandbox = await client.create(manifest=MANIFEST)
    async with sandbox:
        await Runner.run(
            dev_agent(Memory(generate=config)),
            "x",
            run_config=run_config(sandbox),
            conversation_id="p",
        )
    root = sandbox.root
    state = json.loads((root / "memories/generation_state.json").read_text())
    assert state["rollouts"]["p"]["status"] == "pending"
    assert state["rollouts"]["p"]["attempts"] == 1
    assert "transient" in state["rollouts"]["p"]["last_error"]
    assert not (root / "memories/raw_memories/p.md").exists()
    resumed = await client.resume(sandbox.state)
    async with resumed:
        await Runner.run(
            dev_agent(Memory(generate=config)),
            "y",
            run_config=run_config(resumed),
            conversation_id="q",
        )
    state = json.loads((resumed.root / "memories/generation_state.json").read_text())
    assert state["rollouts"]["p"]["status"] == "done"
    assert state["rollouts"]["q"]["status"] == "done"
    assert (resumed.root / "memories/raw_memories/p.md").exists()


async def test_no_op_phase_two_is_skipped_without_model_call() -> None:
    two = phase_two_model()
    config = generate_config(phase_two_model=two)
    client = UnixLocalSandboxClient()
    sandbox = await client.create(manifest=MANIFEST)
    async with sandbox:
        await Runner.run(
            dev_agent(Memory(generate=config)),
            "x",
            run_config=run_config(sandbox),
            conversation_id="n",
        )
    calls_after_first = len(two.requests)
    assert calls_after_first > 0
    resumed = await client.resume(sandbox.state)
    async with resumed:
        manager = get_manager(resumed, MemoryPaths.of(MemoryLayoutConfig()), config)
        report = await manager.flush()
        assert report.phase_two == "skipped" and report.pending == []
        # a read-only run registers no generation manager and records nothing
        reader = Memory(generate=None)
        await Runner.run(dev_agent(reader), "look", run_config=run_config(resumed))
    assert len(two.requests) == calls_after_first
    log = (resumed.root / "memories/generation_log.jsonl").read_text().splitlines()
    assert len(log) == 2


async def test_forgetting_cap_two_over_three_rollouts() -> None:
    seen: list[str] = []
    two = phase_two_model()

    def consolidator(request: object) -> object:
        seen.append(request.instructions)  # type: ignore[attr-defined]
        return two._fn(request)  # type: ignore[arg-type]

    config = generate_config(
        phase_two_model=FunctionModel(consolidator), max_raw_memories_for_consolidation=2
    )
    client = UnixLocalSandboxClient()
    sandbox = await client.create(manifest=MANIFEST)
    for index, rid in enumerate(("r1", "r2", "r3")):
        if index:
            sandbox = await client.resume(sandbox.state)
        async with sandbox:
            await Runner.run(
                dev_agent(Memory(generate=config)),
                f"task {rid}",
                run_config=run_config(sandbox),
                conversation_id=rid,
            )
    selection = json.loads((sandbox.root / "memories/phase_two_selection.json").read_text())
    assert [s["rollout_id"] for s in selection["selected"]] == ["r3", "r2"]
    last = seen[-1]
    removed = last.split("- removed", 1)[1]
    assert "r1 (updated" in removed
    assert (sandbox.root / "memories/raw_memories/r1.md").exists()


async def test_failed_consolidation_rolls_back() -> None:
    client = UnixLocalSandboxClient()
    sandbox = await client.create(manifest=MANIFEST)
    async with sandbox:
        await Runner.run(
            dev_agent(Memory(generate=generate_config())),
            "x",
            run_config=run_config(sandbox),
            conversation_id="a",
        )
    before = {
        name: (sandbox.root / "memories" / name).read_bytes()
        for name in ("MEMORY.md", "memory_summary.md", "phase_two_selection.json")
    }
    (sandbox.root / "memories/skills/s").mkdir(parents=True)
    (sandbox.root / "memories/skills/s/SKILL.md").write_text("keep me")

    def halfway(request: object) -> object:
        outputs = [i for i in request.input if i.get("type") == "function_call_output"]  # type: ignore[attr-defined]
        if not outputs:
            return [
                tool_call("write_file", {"path": "memories/MEMORY.md", "content": "half"}),
                tool_call("write_file", {"path": "memories/skills/new/SKILL.md", "content": "n"}),
            ]
        raise RuntimeError("consolidator crashed")

    broken = Memory(
        generate=generate_config(phase_two_model=FunctionModel(halfway), phase_two_fallback=False)
    )
    resumed = await client.resume(sandbox.state)
    async with resumed:
        await Runner.run(
            dev_agent(broken), "y", run_config=run_config(resumed), conversation_id="b"
        )
    for name, data in before.items():
        assert (resumed.root / "memories" / name).read_bytes() == data
    assert (resumed.root / "memories/skills/s/SKILL.md").read_text() == "keep me"
    assert not (resumed.root / "memories/skills/new").exists() or not any(
        (resumed.root / "memories/skills/new").iterdir()
    )
    assert not (resumed.root / "memories/.phase_two_backup").exists()
    log = [
        json.loads(x)
        for x in (resumed.root / "memories/generation_log.jsonl").read_text().splitlines()
    ]
    assert log[-1]["phase"] == "two" and log[-1]["status"] == "failed"
    assert "consolidator crashed" in log[-1]["error"]
