"""The two-run scenario through the real pipeline with the extractive engine: a scripted agent
really runs pytest and patches the invoice bug in a local sandbox; when the session stops,
phase one and phase two run without a model."""

from __future__ import annotations

from pathlib import Path

from sandmem import RunConfig, Runner, SandboxAgent, SandboxRunConfig
from sandmem.capabilities import Filesystem, Shell
from sandmem.capabilities.memory import Memory
from sandmem.demo._policy import scripted_engineer
from sandmem.demo._workspace import FIX_TASK, REGRESSION_TASK, command_env, invoice_workspace
from sandmem.memory import MemoryGenerateConfig
from sandmem.memory.layout import parse_header
from sandmem.sandboxes import UnixLocalSandboxClient

FIX = (
    "changed `return round(subtotal + tax_rate, 2)` to `return round(subtotal * (1 + tax_rate), 2)`"
)


def agent() -> SandboxAgent:
    memory = Memory(
        generate=MemoryGenerateConfig(phase_one_model="extractive", phase_two_model="extractive")
    )
    return SandboxAgent(
        name="engineer",
        model=scripted_engineer(),
        capabilities=[memory, Filesystem(), Shell()],
    )


async def test_invoice_fix_then_regression_test_with_the_extractive_engine() -> None:
    client = UnixLocalSandboxClient(env=command_env())
    sandbox = await client.create(manifest=invoice_workspace())
    root: Path = sandbox.root
    async with sandbox:
        await Runner.run(
            agent(),
            FIX_TASK,
            run_config=RunConfig(sandbox=SandboxRunConfig(session=sandbox)),
            conversation_id="invoice-fix",
        )
    summary = (root / "memories/memory_summary.md").read_text()
    assert "`src/acme_metrics/report.py`" in summary
    assert FIX in summary
    assert "-m pytest -q` works (tests)" in summary
    fields, raw = parse_header((root / "memories/raw_memories/invoice-fix.md").read_text())
    assert fields["rollout_summary_file"].startswith("rollout_summaries/invoice-fix_")
    assert "- Fix: " in raw and "then it passed (rollout invoice-fix)" in raw

    sandbox = await client.create(manifest=invoice_workspace())
    async with sandbox:
        (sandbox.root / "memories").mkdir(exist_ok=True)
        for path in (root / "memories").rglob("*"):
            target = sandbox.root / "memories" / path.relative_to(root / "memories")
            if path.is_dir():
                target.mkdir(parents=True, exist_ok=True)
            else:
                target.write_bytes(path.read_bytes())
        (sandbox.root / "src/acme_metrics/report.py").write_text(
            (root / "src/acme_metrics/report.py").read_text()
        )
        await Runner.run(
            agent(),
            REGRESSION_TASK,
            run_config=RunConfig(sandbox=SandboxRunConfig(session=sandbox)),
            conversation_id="regression-test",
        )
    memory_md = (sandbox.root / "memories/MEMORY.md").read_text()
    headings = [line for line in memory_md.splitlines() if line.startswith("## ")]
    assert len(headings) == 1, memory_md  # both runs are about the same files: one group
    assert "(rollout regression-test)" in memory_md and "(rollout invoice-fix)" in memory_md
    summary = (sandbox.root / "memories/memory_summary.md").read_text()
    assert FIX in summary
