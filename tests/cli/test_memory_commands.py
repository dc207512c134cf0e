"""``sandmem memory tree|show|search|status`` on generated workspaces."""

from __future__ import annotations

import json
from pathlib import Path

from cli_workspaces import (
    DEPLOY,
    INVOICE,
    build_workspace,
    failing_phase_one,
    invoke,
    invoke_json,
)

from sandmem.cli._output import human_size
from sandmem.memory import EXTRACTIVE, MemoryGenerateConfig


def test_tree_lists_memory_files_with_sizes(workspace: Path) -> None:
    result = invoke("memory", "tree", "-w", workspace)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == "memories/"
    assert "sessions/" in lines
    size = (workspace / "memories/MEMORY.md").stat().st_size
    assert f"├── MEMORY.md  {human_size(size)}" in lines
    assert "│   └── invoice-fix.md  " in "\n".join(lines)  # raw_memories/ is nested
    assert any(line.startswith("└── invoice-fix.jsonl  ") for line in lines)
    assert not any(".lock" in line or ".consolidated" in line for line in lines)
    visible = [
        p
        for top in ("memories", "sessions")
        for p in (workspace / top).rglob("*")
        if p.is_file() and not any(part.startswith(".") for part in p.relative_to(workspace).parts)
    ]
    assert lines[-1].startswith(f"{len(visible)} files, ")


def test_human_size() -> None:
    assert [human_size(n) for n in (0, 1023, 1024, 1536, 5 * 1024 * 1024)] == [
        "0 B",
        "1023 B",
        "1.0 KB",
        "1.5 KB",
        "5.0 MB",
    ]


def test_tree_json(workspace: Path) -> None:
    data = invoke_json("memory", "tree", "-w", workspace, "--json")
    files = {f["path"]: f["bytes"] for f in data["files"]}
    assert files["memories/MEMORY.md"] == (workspace / "memories/MEMORY.md").stat().st_size
    assert "sessions/invoice-fix.jsonl" in files
    assert "memories/raw_memories/deploy-notes.md" in files
    assert data["total_bytes"] == sum(files.values())
    assert not any(Path(p).name.startswith(".") for p in files)


def test_show_summary_memory_and_rollout(workspace: Path) -> None:
    summary = invoke("memory", "show", "-w", workspace)
    assert summary.exit_code == 0
    assert summary.stdout == (workspace / "memories/memory_summary.md").read_text()
    memory = invoke("memory", "show", "memory", "-w", workspace)
    assert memory.stdout == (workspace / "memories/MEMORY.md").read_text()
    rollout = invoke("memory", "show", "invoice-fix", "-w", workspace)
    assert rollout.exit_code == 0
    assert rollout.stdout.startswith("session_id: invoice-fix\n")
    assert "Fix the invoice total bug" in rollout.stdout


def test_show_errors_are_one_line(workspace: Path, tmp_path: Path) -> None:
    unknown = invoke("memory", "show", "nobody", "-w", workspace)
    assert unknown.exit_code == 1
    assert unknown.stderr.count("\n") == 1 and "no conversation 'nobody'" in unknown.stderr
    bad = invoke("memory", "show", "../etc", "-w", workspace)
    assert bad.exit_code == 1 and "invalid rollout id" in bad.stderr
    empty_dir = tmp_path / "empty"
    empty_dir.mkdir()
    missing = invoke("memory", "show", "-w", empty_dir)
    assert missing.exit_code == 1
    assert missing.stderr.startswith("Error: no memory in ")
    assert "Traceback" not in missing.output
    assert list(empty_dir.iterdir()) == []  # looking never creates the layout


def test_show_says_no_such_file_for_a_missing_file(tmp_path: Path) -> None:
    (tmp_path / "memories").mkdir()
    result = invoke("memory", "show", "-w", tmp_path)
    assert result.exit_code == 1
    assert result.stderr.startswith("Error: no such file: memories/memory_summary.md;")
    assert "is empty" not in result.stderr
    assert result.stdout == ""


def test_show_says_empty_for_an_empty_file(tmp_path: Path) -> None:
    (tmp_path / "memories").mkdir()
    (tmp_path / "memories/memory_summary.md").write_text("\n  \n")
    result = invoke("memory", "show", "-w", tmp_path)
    assert result.exit_code == 0
    assert result.stdout == ""
    assert "memories/memory_summary.md is empty" in result.stderr
    assert "no such file" not in result.stderr
    data = invoke_json("memory", "show", "-w", tmp_path, "--json")
    assert (data["exists"], data["empty"]) == (True, True)
    assert data["path"] == "memories/memory_summary.md"


def test_show_a_pending_conversation_and_its_raw_memory(workspace: Path, tmp_path: Path) -> None:
    raw = invoke("memory", "show", "invoice-fix", "--raw", "-w", workspace)
    assert raw.exit_code == 0
    assert raw.stdout == (workspace / "memories/raw_memories/invoice-fix.md").read_text()
    config = MemoryGenerateConfig(phase_one_model=failing_phase_one(), phase_two_model=EXTRACTIVE)
    root = build_workspace(tmp_path / "pending", [INVOICE], config)
    summary = invoke("memory", "show", "invoice-fix", "-w", root)
    assert summary.exit_code == 1
    assert "no such file: conversation 'invoice-fix' has no rollout summary yet" in summary.stderr
    missing_raw = invoke("memory", "show", "invoice-fix", "--raw", "-w", root)
    assert missing_raw.exit_code == 1
    assert "no such file: memories/raw_memories/invoice-fix.md" in missing_raw.stderr
    usage = invoke("memory", "show", "memory", "--raw", "-w", root)
    assert usage.exit_code == 2
    rollout = invoke("memory", "show", "invoice-fix", "--rollout", "-w", root)
    assert rollout.exit_code == 0
    assert rollout.stdout == (root / "sessions/invoice-fix.jsonl").read_text()
    both = invoke("memory", "show", "invoice-fix", "--rollout", "--raw", "-w", root)
    assert both.exit_code == 2 and "not both" in both.stderr


def test_list_shows_conversations_with_status_date_task_and_summary(tmp_path: Path) -> None:
    config = MemoryGenerateConfig(phase_one_model=failing_phase_one(), phase_two_model=EXTRACTIVE)
    root = build_workspace(tmp_path / "ws", [INVOICE])
    build_workspace(root, [DEPLOY], config)  # recorded later, extraction fails
    result = invoke("memory", "list", "-w", root)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].startswith("deploy-notes  pending  20")  # the most recent first
    assert lines[0].endswith(f"  {DEPLOY.prompt}")
    assert lines[1].startswith("invoice-fix  done  20") and lines[1].endswith(INVOICE.prompt)
    [summary] = (root / "memories/rollout_summaries").glob("invoice-fix_*.md")
    assert lines[2] == f"    memories/rollout_summaries/{summary.name}"
    assert len(lines) == 3  # no summary line for the pending one
    data = invoke_json("memory", "list", "-w", root, "--json")
    assert [c["rollout_id"] for c in data] == ["deploy-notes", "invoice-fix"]
    assert data[1]["summary_file"] == f"memories/rollout_summaries/{summary.name}"
    assert data[1]["task"] == INVOICE.prompt and data[1]["terminal_state"] == "completed"
    assert data[0]["summary_file"] is None and data[0]["attempts"] == 1


def test_list_of_a_layout_without_conversations(tmp_path: Path) -> None:
    (tmp_path / "memories").mkdir()
    result = invoke("memory", "list", "-w", tmp_path)
    assert result.exit_code == 0 and result.stdout == ""
    assert "no conversations recorded yet" in result.stderr
    assert invoke_json("memory", "list", "-w", tmp_path, "--json") == []


SECTIONS = """# Memory

## Deploying to staging
Keywords: deploy, staging, kubectl
- Run `make deploy ENV=staging`; the cluster needs VPN.

## Invoice totals
Keywords: invoice, tax, rounding
- The invoice total multiplies the tax rate; it was added by mistake.
- Rounding happens once, at the end: round(total, 2).

## Flaky tests
Keywords: pytest, flaky
- test_invoice_export is flaky under xdist; run it alone.
"""


def test_search_ranks_the_best_section_first(workspace: Path) -> None:
    (workspace / "memories/MEMORY.md").write_text(SECTIONS)
    result = invoke("memory", "search", "-w", workspace, "invoice", "tax", "rounding")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    # the best section is "Invoice totals"; its best line is the one with all three words
    keywords = SECTIONS.splitlines().index("Keywords: invoice, tax, rounding") + 1
    assert lines[0] == f"memories/MEMORY.md:{keywords}: Keywords: invoice, tax, rounding"
    data = invoke_json("memory", "search", "-w", workspace, "--json", "invoice tax rounding")
    hits = data["hits"]
    assert hits[0]["heading"] == "Memory > Invoice totals"
    assert {h["tier"] for h in hits} == {"memory", "transcript"}
    for tier in ("memory", "transcript"):  # scores order the hits within each tier
        ranked = [h["score"] for h in hits if h["tier"] == tier]
        assert ranked == sorted(ranked, reverse=True)
    scores = [h["score"] for h in hits if h["tier"] == "memory"]
    assert len(set(scores)) == len(scores) > 1  # not all the same (they were all 3e-06)
    assert scores[0] > 2 * scores[-1]
    deploy = invoke_json("memory", "search", "-w", workspace, "--json", "deploying", "-n", "1")
    assert [h["heading"] for h in deploy["hits"]] == ["Memory > Deploying to staging"]


def test_search_covers_rollout_summaries_and_skills(workspace: Path) -> None:
    skill = workspace / "memories/skills/release/SKILL.md"
    skill.parent.mkdir(parents=True)
    skill.write_text("# Release\n\n1. Bump the version with hatch version minor.\n")
    data = invoke_json("memory", "search", "-w", workspace, "--json", "hatch")
    assert data["hits"][0]["path"] == "memories/skills/release/SKILL.md"
    assert data["hits"][0]["line"] == 3
    summaries = invoke_json("memory", "search", "-w", workspace, "--json", "staging cluster")
    assert any(
        h["path"].startswith("memories/rollout_summaries/deploy-notes_") for h in summaries["hits"]
    )


def test_search_accepts_any_input(workspace: Path) -> None:
    for query in ('"unbalanced', "AND OR NOT", "NEAR(a b", "***", "col:value", "-x ^y"):
        result = invoke("memory", "search", "-w", workspace, "--", query)
        assert result.exit_code == 0, (query, result.output)
    none = invoke("memory", "search", "-w", workspace, "zzzyxw")
    assert none.stdout == "" and "no matches" in none.stderr


def test_status_lists_a_failed_extraction_as_pending(tmp_path: Path) -> None:
    config = MemoryGenerateConfig(phase_one_model=failing_phase_one(), phase_two_model=EXTRACTIVE)
    root = build_workspace(tmp_path / "ws", [INVOICE], config)
    data = invoke_json("memory", "status", "-w", root, "--json")
    assert data["counts"] == {"total": 1, "done": 0, "pending": 1, "failed": 0, "skipped": 0}
    [pending] = data["conversations"]
    assert pending["status"] == "pending"
    assert pending["rollout_id"] == "invoice-fix"
    assert pending["attempts"] == 1
    assert "RuntimeError: phase one exploded" in pending["last_error"]
    assert pending["last_attempt_at"]
    assert data["tokens"]["phase_one"]["runs"] == 1
    assert data["tokens"]["phase_one"]["failed_runs"] == 1
    assert data["last_consolidation"] is None
    text = invoke("memory", "status", "-w", root)
    assert text.exit_code == 0
    assert "1 pending" in text.stdout
    assert "invoice-fix  attempts 1" in text.stdout
    assert "error: RuntimeError: phase one exploded" in text.stdout
    assert "last consolidation: never" in text.stdout


def test_status_reports_sizes_tokens_and_consolidation(workspace: Path) -> None:
    data = invoke_json("memory", "status", "-w", workspace, "--json")
    assert data["counts"]["done"] == 2
    assert data["conversations"] == []  # only pending and failed ones are listed
    memory_md = workspace / "memories/MEMORY.md"
    assert data["files"]["MEMORY.md"]["bytes"] == memory_md.stat().st_size
    assert data["dirs"]["raw_memories"]["files"] == 2
    assert data["dirs"]["sessions"]["files"] == 2
    last = data["last_consolidation"]
    assert last["status"] == "done" and last["error"] is None and last["selected"] == 2
    log = (workspace / "memories/generation_log.jsonl").read_text().splitlines()
    tokens = data["tokens"]
    assert tokens["phase_one"]["runs"] + tokens["phase_two"]["runs"] == len(log)
    assert json.loads(log[-1])["phase"] == "two"
    assert {DEPLOY.rollout_id, INVOICE.rollout_id} <= set(json.loads(log[-1])["rollouts"])


def test_json_output_is_the_api_models(workspace: Path) -> None:
    """The commands print the models of the public API: the CLI and the API cannot disagree."""
    from sandmem import memory

    status = invoke_json("memory", "status", "-w", workspace, "--json")
    assert status == memory.status_sync(workspace).model_dump(mode="json")
    listed = invoke_json("memory", "list", "-w", workspace, "--json")
    assert listed == [c.model_dump(mode="json") for c in memory.list_conversations_sync(workspace)]
    hits = invoke_json("memory", "search", "-w", workspace, "--json", "invoice")
    assert hits == memory.search_sync(workspace, "invoice").model_dump(mode="json")
    shown = invoke_json("memory", "show", "memory", "-w", workspace, "--json")
    assert shown == memory.show_sync(workspace, "memory").model_dump(mode="json")


def test_status_text_names_the_failure_class_and_next_retry(tmp_path: Path) -> None:
    from sandmem.models._base import ModelRequest
    from sandmem.testing import FunctionModel

    def refuse(request: ModelRequest) -> str:
        raise ConnectionRefusedError("model server down")

    config = MemoryGenerateConfig(phase_one_model=FunctionModel(refuse), phase_two_model=EXTRACTIVE)
    root = build_workspace(tmp_path / "ws", [INVOICE], config)
    text = invoke("memory", "status", "-w", root)
    assert text.exit_code == 0, text.output
    [line] = [ln for ln in text.stdout.splitlines() if ln.startswith("  invoice-fix  ")]
    assert "attempts 0  (environment)" in line and "  next retry 20" in line
    listed = invoke_json("memory", "list", "-w", root, "--json")
    assert listed[0]["failure_kind"] == "environment" and listed[0]["next_retry_at"]
