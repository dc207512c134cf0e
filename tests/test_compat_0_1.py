"""Saved session states and memory layouts written by sandmem 0.1 still load.

``tests/data/compat_0_1/`` holds what the 0.1 code itself wrote (not hand-made copies of the
formats): the demo's two runs (fix a bug, then add its regression test) with the extractive
engine, made by the code at the end of the first round (``first``, commit a997076) and just
before the package layout of issue 24 (``layout``, commit eceaa1d). Each era has

- ``workspace/``: the ``memories/`` and ``sessions/`` of the layout after both runs;
- ``state.json``: the second session's ``SandboxSessionState`` (``first`` names its snapshot
  spec with ``kind``, ``layout`` with ``type``), its workspace root and snapshot directory
  replaced here by the test's own;
- ``snapshot.tar.gz``: that session's snapshot archive (the state's ``<session_id>.tar``).
"""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest

from sandmem import (
    Memory,
    MemoryGenerateConfig,
    MemoryReadConfig,
    RunConfig,
    Runner,
    SandboxAgent,
    SandboxRunConfig,
    SandboxStateError,
    Shell,
    UnixLocalSandboxClient,
)
from sandmem.memory import generate, list_conversations, search, status
from sandmem.models import ModelRequest
from sandmem.sandboxes import Manifest, SandboxSessionState
from sandmem.testing import FunctionModel

DATA = Path(__file__).parent / "data" / "compat_0_1"
ERAS = ["first", "layout"]
CONVERSATIONS = {"fix-invoice", "regression-test"}
EXTRACTIVE = MemoryGenerateConfig(phase_one_model="extractive", phase_two_model="extractive")


def _workspace(era: str, tmp_path: Path) -> Path:
    workspace = tmp_path / "workspace"
    shutil.copytree(DATA / era / "workspace", workspace)
    return workspace


@pytest.mark.parametrize("era", ERAS)
async def test_a_0_1_layout_reads_as_generated(era: str, tmp_path: Path) -> None:
    """Its state, selection and raw memory headers are understood: both conversations are
    done, the last consolidation is known, and a generation finds nothing to redo."""
    workspace = _workspace(era, tmp_path)
    memory = workspace / "memories"
    files = (memory / "MEMORY.md", memory / "memory_summary.md")
    before = [p.read_bytes() for p in files]

    found = await status(workspace)
    assert found.counts.done == found.counts.total == len(CONVERSATIONS)
    rows = await list_conversations(workspace)
    assert {c.rollout_id for c in rows} == CONVERSATIONS
    assert {c.status for c in rows} == {"done"}
    assert found.last_consolidation is not None
    assert found.last_consolidation.status == "done"
    assert found.tokens.phase_one.requests == 0  # the extractive engine's log records

    report = await generate(workspace, config=EXTRACTIVE)
    assert report.processed == [] and report.failed == {}
    assert report.phase_two == "skipped"
    assert [p.read_bytes() for p in files] == before

    hits = await search(workspace, "regression test")
    assert hits.hits, "the 0.1 memory files are searchable"


@pytest.mark.parametrize("era", ERAS)
async def test_a_new_run_reads_0_1_memory_and_records_beside_it(era: str, tmp_path: Path) -> None:
    workspace = _workspace(era, tmp_path)
    summary = (workspace / "memories" / "memory_summary.md").read_text().strip()
    seen: list[str] = []

    def reply(request: ModelRequest) -> str:
        seen.append(request.instructions or "")
        return "done"

    agent = SandboxAgent(
        name="engineer",
        model=FunctionModel(reply),
        capabilities=[
            Memory(read=MemoryReadConfig(live_update=False), generate=EXTRACTIVE),
            Shell(),
        ],
    )
    client = UnixLocalSandboxClient()
    session = await client.create(manifest=Manifest(root=workspace))
    async with session:
        config = RunConfig(sandbox=SandboxRunConfig(session=session))
        await Runner.run(agent, "What did we fix?", run_config=config, conversation_id="third")
    assert summary.splitlines()[0] in seen[0]
    rows = await list_conversations(workspace)
    assert {c.rollout_id for c in rows} == {*CONVERSATIONS, "third"}
    assert {c.status for c in rows} == {"done"}


@pytest.mark.parametrize("era", ERAS)
async def test_a_0_1_session_state_parses_and_its_snapshot_restores(
    era: str, tmp_path: Path
) -> None:
    """The 0.1 state format and snapshot archive still read. A state written before states
    carried a ``proof`` is refused by ``resume`` for that reason alone (issue 25, documented in
    docs/security.md); once its owner vouches for it (``state.signed()``), it resumes from its
    0.1 snapshot."""
    state = json.loads((DATA / era / "state.json").read_text())
    snapshots = tmp_path / "snapshots"
    snapshots.mkdir()
    archive = gzip.decompress((DATA / era / "snapshot.tar.gz").read_bytes())
    (snapshots / f"{state['session_id']}.tar").write_bytes(archive)
    state["snapshot"]["base_path"] = str(snapshots)
    state["manifest"]["root"] = str(tmp_path / "sandmem-ws-resumed")
    text = json.dumps(state)

    client = UnixLocalSandboxClient()
    with pytest.raises(SandboxStateError, match="carries no proof"):
        await client.resume(text)

    parsed = SandboxSessionState.model_validate_json(text)
    assert parsed.snapshot is not None and parsed.snapshot.base_path == snapshots
    session = await client.resume(parsed.signed())
    async with session:
        memory_md = await session.read_bytes("memories/MEMORY.md")
        rollouts = sorted(await session.listdir("sessions"))
        fixed = await session.read_bytes("tests/test_invoice_total_regression.py")
    expected = (DATA / era / "workspace" / "memories" / "MEMORY.md").read_bytes()
    assert memory_md == expected
    assert [r for r in rollouts if r.endswith(".jsonl")] == [
        "fix-invoice.jsonl",
        "regression-test.jsonl",
    ]
    assert b"def test_" in fixed
    await client.delete(session)
