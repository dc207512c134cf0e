"""``sandmem memory log|diff|restore|redact-history|inbox|approve|dismiss``."""

from __future__ import annotations

from pathlib import Path

from cli_workspaces import invoke, invoke_json

from sandmem import memory as api
from sandmem.memory import EXTRACTIVE, MemoryGenerateConfig

EXTRACT = MemoryGenerateConfig(phase_one_model=EXTRACTIVE, phase_two_model=EXTRACTIVE)


def test_log_diff_restore(workspace: Path) -> None:
    memory = workspace / "memories" / "MEMORY.md"
    original = memory.read_text()
    memory.write_text(original + "\n- hand note: the staging password lives in the vault\n")
    assert invoke("memory", "generate", "-w", workspace, "--engine", "extractive").exit_code == 0
    lines = invoke("memory", "log", "-w", workspace).stdout.splitlines()
    assert len(lines) == 2
    assert "hand_edit" in lines[0] and "changed: MEMORY.md" in lines[0]
    assert "consolidation" in lines[1] and "+" in lines[1]
    data = invoke_json("memory", "log", "-w", workspace, "--json")
    assert [v["version"] for v in data] == [2, 1]
    assert data[1]["engine"] == "extractive"
    text = invoke("memory", "diff", "-w", workspace).stdout
    assert text.startswith("--- a/MEMORY.md\n+++ b/MEMORY.md\n")
    assert "+- hand note: the staging password lives in the vault" in text
    restored = invoke_json("memory", "restore", "-w", workspace, "1", "--json")
    assert (restored["version"], restored["kind"], restored["client"]) == (3, "restore", "cli")
    assert memory.read_text() == original
    assert invoke("memory", "diff", "-w", workspace, "1", "3").stdout == ""
    bad = invoke("memory", "restore", "-w", workspace, "42")
    assert bad.exit_code != 0 and "no version 42" in bad.stderr


def test_redact_history(workspace: Path) -> None:
    memory = workspace / "memories" / "MEMORY.md"
    memory.write_text(memory.read_text() + "\n- door code KOALA-7731\n")
    invoke("memory", "generate", "-w", workspace, "--engine", "extractive")
    result = invoke_json("memory", "redact-history", "-w", workspace, r"KOALA-\d+", "--json")
    assert result["versions"] == [2]
    stored = [p for p in (workspace / "memories").rglob("*") if p.is_file()]
    assert not [p for p in stored if b"KOALA-7731" in p.read_bytes()]
    assert invoke("memory", "redact-history", "-w", workspace).exit_code != 0


def test_inbox_approve_dismiss(workspace: Path) -> None:
    review = EXTRACT.model_copy(update={"review": True})
    memory = workspace / "memories" / "MEMORY.md"
    before = memory.read_text()
    (workspace / "memories" / "phase_two_selection.json").unlink()  # consolidate again
    api.generate_sync(workspace, config=review)
    assert memory.read_text() == before
    listing = invoke("memory", "inbox", "-w", workspace)
    assert "consolidation" in listing.stdout and "base=" in listing.stdout
    [proposal] = invoke_json("memory", "inbox", "-w", workspace, "--json")
    done = invoke("memory", "dismiss", "-w", workspace, proposal["id"])
    assert done.exit_code == 0 and proposal["id"] in done.stdout
    assert invoke_json("memory", "inbox", "-w", workspace, "--json") == []
    missing = invoke("memory", "approve", "-w", workspace, proposal["id"])
    assert missing.exit_code != 0 and "no pending proposal" in missing.stderr


def test_history_commands_have_help() -> None:
    for name in ("log", "diff", "restore", "redact-history", "inbox", "approve", "dismiss"):
        result = invoke("memory", name, "--help")
        assert result.exit_code == 0 and "Usage: " in result.stdout, name
