"""Issue 7: nothing lost, nothing corrupted — faults, crashes, cancellation, concurrency."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fake_openai import FakeOpenAIServer, FakeReply, FakeRequest
from memory_doubles import phase_one_model, phase_two_model

from sandmem import RunConfig, Runner, SandboxAgent, SandboxRunConfig
from sandmem.capabilities import Filesystem, Shell
from sandmem.capabilities.memory import Memory
from sandmem.memory import MemoryGenerateConfig
from sandmem.memory.generation._attach import get_manager
from sandmem.memory.layout import MemoryPaths
from sandmem.models import OpenAIProvider
from sandmem.sandboxes import File, LocalSnapshotSpec, Manifest, UnixLocalSandboxClient
from sandmem.testing import FunctionModel

MEMORY_TESTS = Path(__file__).parents[1]
WORKER = MEMORY_TESTS / "memory_worker.py"
MANIFEST = Manifest(entries={"a.txt": File(content=b"alpha\n")})
PATHS = MemoryPaths("memories", "sessions")


async def record(sandbox: object, config: MemoryGenerateConfig, ids: list[str]) -> None:
    agent = SandboxAgent(
        name="quick",
        model=FunctionModel(lambda r: "ok"),
        capabilities=[Memory(generate=config), Filesystem(), Shell()],
    )
    run = RunConfig(sandbox=SandboxRunConfig(session=sandbox))  # type: ignore[arg-type]
    for rid in ids:
        await Runner.run(agent, f"task {rid}", run_config=run, conversation_id=rid)


def state_of(root: Path) -> dict[str, dict[str, object]]:
    state = json.loads((root / "memories/generation_state.json").read_text())
    return state["rollouts"]  # type: ignore[no-any-return]


def artifacts(slug: object = "ok-slug", summary: str = "s", raw: str = "- r") -> FakeReply:
    return FakeReply.json({"rollout_slug": slug, "rollout_summary": summary, "raw_memory": raw})


async def test_fault_modes_leave_every_rollout_processed_or_pending(
    fake_openai: FakeOpenAIServer, tmp_path: Path
) -> None:
    per_rollout = {
        "r4": FakeReply(text='{"rollout_slug": "x"}'),  # schema violation
        "r5": artifacts(summary=""),  # partly empty
        "r6": artifacts(slug="../../escape"),  # path-traversal slug
    }

    def handler(req: FakeRequest) -> FakeReply:
        # the first user message (a repair request adds another after the answer)
        text = next(str(i.get("content")) for i in req.items if i.get("role") == "user")
        rid = text.split("Rollout id: ", 1)[1].split("\n", 1)[0]
        return per_rollout.get(rid, artifacts(slug=f"task-{rid}"))

    fake_openai.handler = handler
    provider = OpenAIProvider(
        base_url=fake_openai.base_url, api_key="test", max_retries=0, timeout=0.5
    )
    config = MemoryGenerateConfig(
        phase_one_model="m",
        phase_two_model=phase_two_model(),
        model_provider=provider,
        phase_one_concurrency=1,
        # unusable answers fail here, to be retried (the extractive fallback of phase one is
        # tried in memory/generation/test_small_model_phases.py)
        phase_one_fallback=False,
    )
    ids = [f"r{i}" for i in range(8)]
    client = UnixLocalSandboxClient()
    sandbox = await client.create(
        manifest=MANIFEST, snapshot=LocalSnapshotSpec(base_path=tmp_path / "snap")
    )
    async with sandbox:
        await record(sandbox, config, ids)
        # rollouts are extracted in id order with concurrency 1: r0..r3 meet these faults
        fake_openai.inject(status=500)
        fake_openai.inject(status=429)
        fake_openai.inject(delay_s=1.5)  # client timeout
        fake_openai.inject(malformed=True)
    root = sandbox.root
    states = state_of(root)
    assert sorted(states) == ids
    assert states["r7"]["status"] == "done"
    errors = {rid: str(states[rid]["last_error"]) for rid in ids[:7]}
    assert all(states[rid]["status"] == "pending" for rid in ids[:7])
    assert "500" in errors["r0"] and "429" in errors["r1"]
    assert "tim" in errors["r2"].lower()
    assert errors["r3"] and errors["r4"]
    assert "rollout_summary" in errors["r5"] and "slug" in errors["r6"]
    assert not (root.parent / "escape.md").exists()
    assert not list((root / "memories/rollout_summaries").glob("*escape*"))
    for rid in ids:
        assert (root / f"sessions/{rid}.jsonl").exists()

    per_rollout.clear()
    await asyncio.sleep(1.2)  # let the timed-out request's server thread finish
    resumed = await client.resume(sandbox.state)
    async with resumed:
        report = await get_manager(resumed, PATHS, config).flush()
    assert sorted(report.processed) == ids[:7]
    assert {s["status"] for s in state_of(resumed.root).values()} == {"done"}


async def test_generation_that_raises_still_snapshots(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def explode(self: object, report: object, retry_failed: bool) -> None:
        raise RuntimeError("generation blew up")

    monkeypatch.setattr("sandmem.memory.generation.manager.MemoryGenerationManager._flush", explode)
    config = MemoryGenerateConfig(
        phase_one_model=phase_one_model(), phase_two_model=phase_two_model()
    )
    client = UnixLocalSandboxClient()
    sandbox = await client.create(
        manifest=MANIFEST, snapshot=LocalSnapshotSpec(base_path=tmp_path / "snap")
    )
    async with sandbox:
        await record(sandbox, config, ["a"])
        (sandbox.root / "work.txt").write_text("precious")
    assert list((tmp_path / "snap").iterdir())
    resumed = await client.resume(sandbox.state)
    assert (resumed.root / "work.txt").read_text() == "precious"
    assert (resumed.root / "sessions/a.jsonl").exists()


async def test_flush_timeout_cancels_generation_but_stop_completes(tmp_path: Path) -> None:
    async def slow(request: object) -> str:
        await asyncio.Event().wait()  # never answers: only the flush timeout ends it
        return "{}"

    config = MemoryGenerateConfig(
        phase_one_model=FunctionModel(slow),  # type: ignore[arg-type]
        phase_two_model=phase_two_model(),
        flush_timeout_s=0.3,
    )
    client = UnixLocalSandboxClient()
    sandbox = await client.create(
        manifest=MANIFEST, snapshot=LocalSnapshotSpec(base_path=tmp_path / "snap")
    )

    async def run_and_stop() -> None:
        async with sandbox:
            await record(sandbox, config, ["slow-1", "slow-2"])

    await asyncio.wait_for(run_and_stop(), timeout=120)  # a guard against a hang, not a bound
    resumed = await client.resume(sandbox.state)
    assert (resumed.root / "sessions/slow-1.jsonl").exists()
    assert not list((resumed.root / "memories/raw_memories").iterdir())
    config_ok = MemoryGenerateConfig(
        phase_one_model=phase_one_model(), phase_two_model=phase_two_model()
    )
    async with resumed:
        report = await get_manager(resumed, PATHS, config_ok).flush()
    assert sorted(report.processed) == ["slow-1", "slow-2"]


def _start_worker(workspace: Path, name: str, runs: int, mode: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(MEMORY_TESTS)}
    return subprocess.Popen(
        [sys.executable, str(WORKER), str(workspace), name, str(runs), mode],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def _wait_for(predicate: object, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return
        time.sleep(0.02)
    raise AssertionError("condition not reached in time")


def _assert_memory_files_parse(memories: Path) -> None:
    for path in memories.rglob("*"):
        if path.is_dir():
            continue
        assert ".tmp" not in path.name, f"half-written temp file left: {path}"
        data = path.read_bytes()
        if path.suffix == ".json":
            json.loads(data)
        elif path.suffix == ".jsonl":
            for line in data.decode().splitlines():
                json.loads(line)
        else:
            data.decode("utf-8")


async def _complete_on(workspace: Path) -> MemoryGenerateConfig:
    config = MemoryGenerateConfig(
        phase_one_model=phase_one_model(), phase_two_model=phase_two_model()
    )
    client = UnixLocalSandboxClient()
    async with await client.create(manifest=Manifest(root=workspace)) as sandbox:
        await record(sandbox, config, ["after-crash"])
    return config


async def test_sigkill_during_phase_one_then_new_session_completes(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    proc = _start_worker(workspace, "crashy", 3, "slow-one")
    raw_dir = workspace / "memories/raw_memories"
    try:
        _wait_for(lambda: (workspace / "memories/generation_log.jsonl").exists())
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=10)
    await _complete_on(workspace)
    states = state_of(workspace)
    assert states["crashy"]["status"] == "done" and states["after-crash"]["status"] == "done"
    assert sorted(p.name for p in raw_dir.iterdir()) == ["after-crash.md", "crashy.md"]
    lines = (workspace / "sessions/crashy.jsonl").read_text().splitlines()
    assert len(lines) == 3
    _assert_memory_files_parse(workspace / "memories")


async def test_temp_files_left_by_a_killed_write_are_swept_under_the_lock(
    tmp_path: Path, dead_pid: int
) -> None:
    """A kill between an atomic write's temp file and its rename leaves the temp behind (the
    CI run that first met this killed the worker inside a state write). The next generation
    removes exactly those names, in every directory sandmem writes, and nothing else."""
    workspace = tmp_path / "ws"
    now = int(time.time())
    dead = f"{dead_pid}.{now:x}"  # a writer that is gone
    old = f"{os.getpid()}.{now - 3600:x}"  # an hour old: stale even though the pid lives
    live = f"{os.getpid()}.{now:x}"  # a write in flight (e.g. a live memory update)
    leftovers = [
        f"memories/.generation_state.json.{dead}.77e6774f.tmp",
        f"memories/.MEMORY.md.{old}.01234567.tmp",
        f"memories/raw_memories/.crashy.md.{dead}.aaaaaaaa.tmp",
        f"memories/rollout_summaries/.crashy_slug.md.{dead}.bbbbbbbb.tmp",
        f"memories/skills/deploy/.SKILL.md.{dead}.cccccccc.tmp",
    ]
    kept = [
        f"memories/.MEMORY.md.{live}.dddddddd.tmp",
        "memories/notes.tmp",  # a user's file: not our pattern
        "memories/.MEMORY.md.tmp",
        "memories/skills/deploy/SKILL.md",
    ]
    for rel in leftovers + kept:
        (workspace / rel).parent.mkdir(parents=True, exist_ok=True)
        (workspace / rel).write_text("half")
    await _complete_on(workspace)
    assert [rel for rel in leftovers if (workspace / rel).exists()] == []
    assert [rel for rel in kept if not (workspace / rel).exists()] == []
    assert state_of(workspace)["after-crash"]["status"] == "done"


async def test_sigkill_mid_consolidation_leaves_the_live_pair_intact(tmp_path: Path) -> None:
    """Issue 14 (6): the consolidation writes only its stage; killed mid-way, the live
    MEMORY.md and memory_summary.md are still the previous pair until the next flush, which
    discards the stage and consolidates again."""
    workspace = tmp_path / "ws"
    proc = _start_worker(workspace, "first", 1, "normal")
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    memories = workspace / "memories"
    before = (memories / "MEMORY.md").read_bytes()
    summary_before = (memories / "memory_summary.md").read_bytes()
    proc = _start_worker(workspace, "second", 1, "slow-two")
    try:
        _wait_for(lambda: (memories / ".phase_two_stage/MEMORY.md").exists())
        _wait_for(lambda: (memories / ".phase_two_stage/MEMORY.md").read_bytes() == b"half")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=10)
    assert (memories / "MEMORY.md").read_bytes() == before
    assert (memories / "memory_summary.md").read_bytes() == summary_before
    await _complete_on(workspace)
    memory = (memories / "MEMORY.md").read_text()
    assert memory != "half" and memory != before.decode()
    assert "second task 0" in memory and "first task 0" in memory
    assert not (memories / ".phase_two_stage").exists()
    _assert_memory_files_parse(memories)


async def test_two_processes_append_and_flush_on_one_workspace(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    procs = [_start_worker(workspace, name, 20, "normal") for name in ("alpha", "beta")]
    for proc in procs:
        _out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
    for name in ("alpha", "beta"):
        lines = (workspace / f"sessions/{name}.jsonl").read_text().splitlines()
        tasks = sorted(json.loads(line)["input"][0]["content"] for line in lines)
        assert tasks == sorted(f"{name} task {i}" for i in range(20))
    selection = json.loads((workspace / "memories/phase_two_selection.json").read_text())
    assert sorted(s["rollout_id"] for s in selection["selected"]) == ["alpha", "beta"]
    raw = (workspace / "memories/raw_memories.md").read_text()
    assert "alpha task" in raw and "beta task" in raw
    _assert_memory_files_parse(workspace / "memories")


async def test_malformed_and_non_utf8_rollout_lines_are_survived(tmp_path: Path) -> None:
    config = MemoryGenerateConfig(
        phase_one_model=phase_one_model(), phase_two_model=phase_two_model()
    )
    client = UnixLocalSandboxClient()
    sandbox = await client.create(manifest=MANIFEST)
    async with sandbox:
        await record(sandbox, config, ["messy"])
        with (sandbox.root / "sessions/messy.jsonl").open("ab") as handle:
            handle.write(b"{not json\n\xff\xfe broken bytes\n")
    states = state_of(sandbox.root)
    assert states["messy"]["status"] == "done"
    assert states["messy"]["segments"] == 3
    assert "task messy" in (sandbox.root / "memories/raw_memories/messy.md").read_text()


HUGE_ROLLOUT_SCRIPT = r"""
import asyncio, json, resource, sys
sys.path.insert(0, sys.argv[2])
from memory_doubles import phase_one_model, phase_two_model
from sandmem.memory import MemoryGenerateConfig
from sandmem.memory.generation._attach import get_manager
from sandmem.memory.layout import MemoryPaths
from sandmem.sandboxes import Manifest, UnixLocalSandboxClient

ws = sys.argv[1]
one = phase_one_model()
config = MemoryGenerateConfig(phase_one_model=one, phase_two_model=phase_two_model())

async def main():
    sandbox = await UnixLocalSandboxClient().create(manifest=Manifest(root=ws))
    async with sandbox:
        seg = {"updated_at": "2026-01-01T00:00:00Z", "rollout_id": "huge",
               "input": [{"role": "user", "content": "first request"}],
               "generated_items": [{"type": "function_call_output", "call_id": "c",
                                    "output": "y" * 20_000}],
               "terminal_metadata": {"terminal_state": "completed", "exception_type": None,
                                     "exception_message": None, "has_final_output": False}}
        line = (json.dumps(seg) + "\n").encode()
        with open(f"{ws}/sessions/huge.jsonl", "wb") as handle:
            for _ in range(100 * 1024 * 1024 // len(line)):
                handle.write(line)
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        report = await get_manager(sandbox, MemoryPaths("memories", "sessions"), config).flush()
        after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        sent = one.requests[0].input[0]["content"]
        print(json.dumps({"processed": report.processed, "growth_kb": after - before,
                          "sent_bytes": len(sent.encode()), "note": "omitted" in sent}))

asyncio.run(main())
"""


def test_a_100_mb_rollout_is_processed_in_bounded_memory(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    (workspace / "sessions").mkdir(parents=True)
    out = subprocess.run(
        [sys.executable, "-c", HUGE_ROLLOUT_SCRIPT, str(workspace), str(MEMORY_TESTS)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["processed"] == ["huge"]
    assert result["note"] is True
    # the phase-one input stays within the 150,000-token cap (4 bytes a token) plus framing
    assert result["sent_bytes"] <= 150_000 * 4 + 4_000
    # bound: the 100 MB file is read once (100 MB) and cut to 32 MB before parsing
    assert result["growth_kb"] < 450 * 1024
