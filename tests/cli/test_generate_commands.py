"""``sandmem memory generate`` and ``sandmem memory forget``, with the extractive engine and
through the fake OpenAI server."""

from __future__ import annotations

import json
import threading
from pathlib import Path

from cli_workspaces import (
    DEPLOY,
    INVOICE,
    build_workspace,
    failing_phase_one,
    invoke,
    invoke_json,
    memory_server_handler,
)
from click.testing import CliRunner, Result
from fake_openai import FakeOpenAIServer, FakeReply, FakeRequest

from sandmem.cli import cli
from sandmem.memory import EXTRACTIVE, MemoryGenerateConfig
from sandmem.memory.generation._degrade import FALLBACK_NOTE


def failing_config(**overrides: object) -> MemoryGenerateConfig:
    return MemoryGenerateConfig(
        phase_one_model=failing_phase_one(),
        phase_two_model=EXTRACTIVE,
        **overrides,  # type: ignore[arg-type]
    )


def statuses(root: Path) -> dict[str, str]:
    state = json.loads((root / "memories/generation_state.json").read_text())
    return {rid: entry["status"] for rid, entry in state["rollouts"].items()}


def test_generate_processes_a_pending_rollout(tmp_path: Path) -> None:
    root = build_workspace(tmp_path / "ws", [INVOICE], failing_config())
    assert not (root / "memories/raw_memories/invoice-fix.md").exists()
    result = invoke("memory", "generate", "-w", root, "--engine", "extractive")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[:3] == [
        "memory (memories/):",
        "  ✓ invoice-fix: extracted",
        "  consolidated",
    ]
    assert (root / "memories/raw_memories/invoice-fix.md").exists()
    assert "invoice" in (root / "memories/MEMORY.md").read_text().lower()
    assert statuses(root) == {"invoice-fix": "done"}
    again = invoke_json("memory", "generate", "-w", root, "--engine", "extractive", "--json")
    assert again["processed"] == [] and again["phase_two"] == "skipped"


def test_generate_retry_failed(tmp_path: Path) -> None:
    root = build_workspace(tmp_path / "ws", [INVOICE], failing_config(max_attempts=1))
    assert statuses(root) == {"invoice-fix": "failed"}
    status = invoke_json("memory", "status", "-w", root, "--json")
    failed = [c["rollout_id"] for c in status["conversations"] if c["status"] == "failed"]
    assert failed == ["invoice-fix"]
    plain = invoke_json("memory", "generate", "-w", root, "--engine", "extractive", "--json")
    assert plain["processed"] == [] and statuses(root) == {"invoice-fix": "failed"}
    retried = invoke_json(
        "memory", "generate", "-w", root, "--engine", "extractive", "--retry-failed", "--json"
    )
    assert retried["processed"] == ["invoice-fix"]
    assert retried["phase_two"] == "done"
    assert statuses(root) == {"invoice-fix": "done"}


def test_generate_through_a_model_server(tmp_path: Path, fake_openai: FakeOpenAIServer) -> None:
    root = build_workspace(tmp_path / "ws", [INVOICE, DEPLOY], failing_config())
    fake_openai.handler = memory_server_handler()
    env = {"OPENAI_BASE_URL": fake_openai.base_url}
    data = invoke_json("memory", "generate", "-w", root, "-m", "fake-model", "--json", env=env)
    assert data["processed"] == ["deploy-notes", "invoice-fix"]
    assert data["phase_two"] == "done"
    assert data["usage"]["phase_one"]["requests"] == 2
    assert {r.model for r in fake_openai.requests} == {"fake-model"}
    memory_md = (root / "memories/MEMORY.md").read_text()
    assert "learned in conversation invoice-fix" in memory_md
    status = invoke_json("memory", "status", "-w", root, "--json")
    assert status["tokens"]["phase_one"]["input_tokens"] > 0  # summed from the log


def test_generate_reports_failures_with_exit_1(
    tmp_path: Path, fake_openai: FakeOpenAIServer
) -> None:
    root = build_workspace(tmp_path / "ws", [INVOICE], failing_config())
    fake_openai.inject(status=400, times=100)
    env = {"OPENAI_BASE_URL": fake_openai.base_url}
    result = invoke("memory", "generate", "-w", root, "-m", "fake-model", env=env)
    assert result.exit_code == 1
    assert "✗ invoice-fix:" in result.stdout
    assert result.stderr.startswith("Error: memory generation incomplete: 1 conversation(s)")
    [pending] = invoke_json("memory", "status", "-w", root, "--json")["conversations"]
    assert pending["status"] == "pending"
    assert pending["attempts"] == 2  # the command's stop did not flush (and retry) again


def test_generate_flush_timeout_cuts_a_slow_consolidation_short_and_falls_back(
    tmp_path: Path, fake_openai: FakeOpenAIServer
) -> None:
    """``--flush-timeout``: a consolidation slower than it is cut short, and the extractive
    engine consolidates instead (marked); the command says the generation is incomplete."""
    root = build_workspace(tmp_path / "ws", [INVOICE, DEPLOY], failing_config())
    release = threading.Event()
    answer = memory_server_handler()

    def slow_consolidation(req: FakeRequest) -> FakeReply:
        if "write_file" in req.tool_names():
            release.wait(30)
        return answer(req)  # type: ignore[no-any-return]

    fake_openai.handler = slow_consolidation
    env = {"OPENAI_BASE_URL": fake_openai.base_url}
    args = ("memory", "generate", "-w", root, "-m", "fake-model", "--json")
    try:
        result = invoke(*args, "--flush-timeout", "3", env=env)
    finally:
        release.set()
    assert result.exit_code == 1, result.output
    data = json.loads(result.stdout)
    assert data["timed_out"] and data["phase_two"] == "fallback"
    assert sorted(data["processed"]) == ["deploy-notes", "invoice-fix"]
    assert "timed out after 3.0s" in data["phase_two_error"]
    summary = (root / "memories/memory_summary.md").read_text()
    assert summary.startswith(FALLBACK_NOTE) and "invoice" in summary.lower()
    for bad in ("0", "-1", "soon"):
        refused = invoke(*args, "--flush-timeout", bad, env=env)
        assert refused.exit_code == 2 and "--flush-timeout" in refused.stderr


def test_generate_needs_a_model_server_or_the_extractive_engine(workspace: Path) -> None:
    result = invoke("memory", "generate", "-w", workspace)
    assert result.exit_code == 2  # a missing setting, as docs/cli.md says
    assert "no model server configured" in result.stderr
    assert "--engine extractive" in result.stderr
    both = invoke("memory", "generate", "-w", workspace, "--engine", "extractive", "-m", "x")
    assert both.exit_code == 2 and "not both" in both.stderr


def test_forget_removes_files_and_reconsolidates(workspace: Path) -> None:
    assert "deploy-notes" in (workspace / "memories/MEMORY.md").read_text()
    summary = next((workspace / "memories/rollout_summaries").glob("deploy-notes_*.md"))
    result = invoke(
        "memory", "forget", "deploy-notes", "-w", workspace, "--engine", "extractive", "--yes"
    )
    assert result.exit_code == 0, result.output
    assert "forgot deploy-notes:" in result.stdout
    assert not summary.exists()
    assert not (workspace / "memories/raw_memories/deploy-notes.md").exists()
    assert not (workspace / "sessions/deploy-notes.jsonl").exists()
    assert "deploy-notes" not in statuses(workspace)
    for name in ("MEMORY.md", "memory_summary.md", "raw_memories.md", "phase_two_selection.json"):
        assert "deploy-notes" not in (workspace / "memories" / name).read_text(), name
    assert "invoice-fix" in (workspace / "memories/MEMORY.md").read_text()
    show = invoke("memory", "show", "deploy-notes", "-w", workspace)
    assert show.exit_code == 1


def test_forget_the_last_conversation_empties_memory(tmp_path: Path) -> None:
    root = build_workspace(tmp_path / "ws", [INVOICE])
    data = invoke_json(
        "memory", "forget", "invoice-fix", "-w", root, "--engine", "extractive", "--json", "-y"
    )
    assert data["rollout_id"] == "invoice-fix"
    removed = sorted(data["removed"])
    assert removed[:2] == ["memories/raw_memories/invoice-fix.md", removed[1]]
    assert removed[1].startswith("memories/rollout_summaries/invoice-fix_")
    assert removed[2:] == ["sessions/invoice-fix.jsonl"]
    assert not any((root / p).exists() for p in removed)
    assert data["clears_memory"] is True and data["dry_run"] is False
    assert data["report"]["complete"] is True
    assert (root / "memories/MEMORY.md").read_text() == ""
    assert (root / "memories/memory_summary.md").read_text() == ""
    selection = json.loads((root / "memories/phase_two_selection.json").read_text())
    assert selection["selected"] == []


def test_forget_unknown_or_invalid_id(workspace: Path) -> None:
    before = sorted(p.name for p in (workspace / "memories/raw_memories").iterdir())
    unknown = invoke("memory", "forget", "nobody", "-w", workspace, "--engine", "extractive")
    assert unknown.exit_code == 1 and "no conversation 'nobody'" in unknown.stderr
    invalid = invoke("memory", "forget", "a/../b", "-w", workspace, "--engine", "extractive")
    assert invalid.exit_code == 1 and "invalid rollout id" in invalid.stderr
    assert sorted(p.name for p in (workspace / "memories/raw_memories").iterdir()) == before


def _invoke_with_input(text: str, *args: str | Path) -> Result:
    return CliRunner().invoke(cli, [str(a) for a in args], input=text, catch_exceptions=False)


def test_forget_asks_for_confirmation_and_keeps_everything_on_no(workspace: Path) -> None:
    before = sorted(p.relative_to(workspace) for p in workspace.rglob("*") if p.is_file())
    answer = _invoke_with_input(
        "n\n", "memory", "forget", "deploy-notes", "-w", workspace, "--engine", "extractive"
    )
    assert answer.exit_code == 1
    assert "Forget this conversation? [y/N]" in answer.stderr
    assert "  would remove sessions/deploy-notes.jsonl" in answer.stderr
    assert "Error: not forgotten: deploy-notes is unchanged" in answer.stderr
    # nothing on stdout but, with click < 8.3's test runner, the echo of the typed answer
    assert "pass --yes" in answer.stderr and answer.stdout.strip() in ("", "n")
    after = sorted(p.relative_to(workspace) for p in workspace.rglob("*") if p.is_file())
    assert after == before
    # no terminal and no --yes: nothing to answer with, so nothing is removed
    closed = invoke("memory", "forget", "deploy-notes", "-w", workspace, "--engine", "extractive")
    assert closed.exit_code == 1 and "not forgotten" in closed.stderr
    assert (workspace / "sessions/deploy-notes.jsonl").exists()


def test_forget_goes_ahead_on_yes(workspace: Path) -> None:
    answer = _invoke_with_input(
        "y\n", "memory", "forget", "deploy-notes", "-w", workspace, "--engine", "extractive"
    )
    assert answer.exit_code == 0, answer.output
    assert "forgot deploy-notes:" in answer.stdout
    assert "  removed sessions/deploy-notes.jsonl" in answer.stdout
    assert not (workspace / "sessions/deploy-notes.jsonl").exists()


def test_forget_dry_run_changes_nothing(workspace: Path) -> None:
    before = {p: p.read_bytes() for p in workspace.rglob("*") if p.is_file()}
    result = invoke("memory", "forget", "deploy-notes", "-w", workspace, "--dry-run")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == "forget deploy-notes (dry run, nothing changed):"
    assert "  would remove sessions/deploy-notes.jsonl" in lines
    assert "  would remove memories/raw_memories/deploy-notes.md" in lines
    assert "  would remove its entry in generation_state.json" in lines
    assert lines[-2] == "  then re-consolidate MEMORY.md and memory_summary.md without it"
    assert lines[-1].startswith("  (the real run needs a model: no model server configured")
    data = invoke_json("memory", "forget", "deploy-notes", "-w", workspace, "--dry-run", "--json")
    assert data["dry_run"] is True and data["report"] is None and data["clears_memory"] is False
    assert "sessions/deploy-notes.jsonl" in data["removed"]
    assert {p: p.read_bytes() for p in workspace.rglob("*") if p.is_file()} == before
    unknown = invoke("memory", "forget", "nobody", "-w", workspace, "--dry-run")
    assert unknown.exit_code == 1 and "no conversation 'nobody'" in unknown.stderr


def test_generate_after_an_outage_needs_no_retry_failed(
    tmp_path: Path, fake_openai: FakeOpenAIServer
) -> None:
    """Issue 14 (3): three generations while the server is down use no attempt; the first one
    after it is back processes every conversation."""
    root = build_workspace(tmp_path / "ws", [INVOICE, DEPLOY], failing_config(max_attempts=3))
    fake_openai.handler = memory_server_handler()
    env = {"OPENAI_BASE_URL": fake_openai.base_url}
    fake_openai.inject(status=503, times=10_000)
    for _ in range(3):
        result = invoke("memory", "generate", "-w", root, "-m", "fake-model", env=env)
        assert result.exit_code == 1
        assert "(server problem: no attempt used, retried later)" in result.stdout
    status = invoke_json("memory", "status", "-w", root, "--json")
    assert status["counts"]["failed"] == 0 and status["counts"]["pending"] == 2
    rows = status["conversations"]
    assert {r["attempts"] for r in rows} == {1}  # only the recorded run's own failure
    assert {r["failure_kind"] for r in rows} == {"environment"}
    assert all(r["next_retry_at"] for r in rows)
    text = invoke("memory", "status", "-w", root).stdout
    assert "(environment)" in text and "next retry " in text
    fake_openai.reset()
    data = invoke_json("memory", "generate", "-w", root, "-m", "fake-model", "--json", env=env)
    assert data["processed"] == ["deploy-notes", "invoice-fix"] and data["failed"] == {}
    assert invoke_json("memory", "status", "-w", root, "--json")["counts"]["failed"] == 0
