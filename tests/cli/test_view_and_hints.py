"""Small things a new user meets: the viewer's help says the page size the code uses and its page
lists newest first with the real summary size; a workspace given as an argument gets a hint;
the no-memory error speaks to CLI users."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_workspaces import error_lines, invoke, invoke_json

# ---------------------------------------------------------------- 12: the smaller ones


def test_view_help_says_the_page_size_the_code_uses() -> None:
    from sandmem.memory.views._viewer import PAGE_SIZE

    text = " ".join(invoke("memory", "view", "--help").stdout.split())
    assert f"Over {PAGE_SIZE} conversations it shows the newest {PAGE_SIZE}" in text


@pytest.mark.parametrize("command", ["tree", "list", "status", "log"])
def test_a_workspace_given_as_an_argument_gets_a_hint(
    tmp_path: Path, command: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "ws").mkdir()
    monkeypatch.chdir(tmp_path)
    result = invoke("memory", command, "ws")
    assert result.exit_code == 2
    [line] = error_lines(result.stderr)
    assert line.endswith("; to name the workspace, use -w ws")
    not_a_dir = invoke("memory", command, "no-such-dir")
    assert "use -w" not in not_a_dir.stderr


def test_the_no_memory_error_speaks_to_cli_users(tmp_path: Path) -> None:
    result = invoke("memory", "tree", "-w", tmp_path)
    assert result.exit_code == 1
    [line] = error_lines(result.stderr)
    assert "--memories-dir / --sessions-dir" in line and "MemoryLayoutConfig(" not in line


def test_the_viewer_lists_newest_first_and_the_real_summary_size(workspace: Path) -> None:
    from sandmem._log_lines import human_size

    page = workspace.parent / "view.html"
    assert invoke("memory", "view", "-w", workspace, "--out", page).exit_code == 0
    html = page.read_text()
    assert html.index(">deploy-notes<") < html.index(">invoice-fix<")  # as `memory list`
    listed = [c["rollout_id"] for c in invoke_json("memory", "list", "-w", workspace, "--json")]
    assert listed == ["deploy-notes", "invoice-fix"]
    size = (workspace / "memories" / "memory_summary.md").stat().st_size
    # the size on disk, in the CLI's form (tests/cli/test_file_sizes_agree.py: every surface)
    assert f"memory_summary.md, {human_size(size)}" in html
    tree = invoke_json("memory", "tree", "-w", workspace, "--json")
    sizes = {f["path"]: f["bytes"] for f in tree["files"]}
    assert sizes["memories/memory_summary.md"] == size
