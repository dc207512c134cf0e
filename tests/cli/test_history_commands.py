"""``sandmem memory log|diff|restore|redact-history|inbox|approve|dismiss``."""

from __future__ import annotations

import re
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
    assert restored["parent"] == 2 and restored["changed"] == ["MEMORY.md"]  # against 2, not 1
    assert memory.read_text() == original
    again = invoke("memory", "restore", "-w", workspace, "2").stdout
    assert "restore  by=cli  from=2  changed: MEMORY.md" in again
    assert invoke("memory", "diff", "-w", workspace, "1", "3").stdout == ""
    assert invoke("memory", "diff", "-w", workspace, "2", "4").stdout == ""
    bad = invoke("memory", "restore", "-w", workspace, "42")
    assert bad.exit_code != 0 and "no version 42" in bad.stderr


def test_redact_history(workspace: Path) -> None:
    memory = workspace / "memories" / "MEMORY.md"
    memory.write_text(memory.read_text() + "\n- door code KOALA-7731\n")
    invoke("memory", "generate", "-w", workspace, "--engine", "extractive")
    assert "KOALA-7731" in invoke("memory", "search", "-w", workspace, "door code").stdout
    index = workspace / "memories" / ".index.sqlite"
    secret = re.compile(rb"(?i)koala|oala|7731")  # terms are stored prefix-compressed
    assert secret.search(index.read_bytes())  # the search index holds the secret's terms
    result = invoke_json("memory", "redact-history", "-w", workspace, r"KOALA-\d+", "--json")
    assert result["versions"] == [2]
    stored = [p for p in (workspace / "memories").rglob("*") if p.is_file() and p != index]
    # in the other files, 7731 alone is the secret only when no digit or hex digit borders it
    # (a nanosecond time or a digest in generation_state.json may hold those four digits)
    exact = re.compile(rb"(?i)koala|oala|(?<![0-9a-f])7731(?![0-9a-f])")
    assert not [p for p in stored if exact.search(p.read_bytes())]
    found = invoke("memory", "search", "-w", workspace, "door code").stdout
    assert "[REDACTED:history]" in found and "KOALA" not in found  # the index is built again
    assert not secret.search(index.read_bytes())
    for args in ((), ("(",)):
        usage = invoke("memory", "redact-history", "-w", workspace, *args)
        assert usage.exit_code == 2 and usage.stderr.count("Error: ") == 1, usage.stderr


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


def test_redact_history_names_the_files_it_renamed_and_never_the_old_name(
    workspace: Path,
) -> None:
    skill = workspace / "memories" / "skills" / "koala-7731-notes" / "SKILL.md"
    skill.parent.mkdir(parents=True)
    skill.write_text("# Notes\n")
    result = invoke("memory", "redact-history", "-w", workspace, r"KOALA-\d+")
    assert result.exit_code == 0, result.stderr
    assert "renamed (its name held the secret): skills/redacted-notes/SKILL.md" in result.stdout
    assert "7731" not in result.stdout + result.stderr
    assert (workspace / "memories/skills/redacted-notes/SKILL.md").read_text() == "# Notes\n"
    assert not skill.parent.exists()
