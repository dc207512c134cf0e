"""The offline scripted agent of ``run`` and ``chat`` (``--model scripted``): pointed at without a
key, it reads memory and records nothing, works on a workspace without memory, and its
keywords are plain words."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_workspaces import error_lines, invoke

# ---------------------------------------------------------------- 2: offline run and chat


@pytest.mark.parametrize("command", [["run", "hello"], ["chat"]])
def test_without_a_key_the_error_points_at_the_offline_agent(
    tmp_path: Path, command: list[str]
) -> None:
    result = invoke(command[0], "-w", tmp_path, *command[1:])
    assert result.exit_code == 2
    [line] = error_lines(result.stderr)
    assert "no model server configured" in line and "--model scripted" in line


def _files(workspace: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(workspace)): p.read_bytes()
        for p in workspace.rglob("*")
        if p.is_file() and ".index" not in p.name and ".lock" not in p.name
    }


def test_the_scripted_agent_reads_memory_and_records_nothing(workspace: Path) -> None:
    before = _files(workspace)
    result = invoke("run", "-w", workspace, "--model", "scripted", "fix the invoice total bug")
    assert result.exit_code == 0, result.stderr
    # it searched memory the way the memory prompt tells a model to
    assert (
        "→ exec_command: grep -n -i -E 'fix|invoice|total|bug' memories/MEMORY.md" in result.stderr
    )
    assert "Memory: " in result.stdout and "line(s) of memories/MEMORY.md match" in result.stdout
    assert "invoice" in result.stdout.split("Memory: ", 1)[1].lower()
    # no endpoint it never contacts, no memory model it never uses
    start = result.stderr.splitlines()[0]
    assert "API at" not in start and "openai.com" not in start and "extractive" not in start
    assert "its runs are not recorded" in start
    # nothing recorded, nothing generated: memory is byte for byte what it was
    assert _files(workspace) == before


def test_the_scripted_agent_on_a_workspace_without_memory(tmp_path: Path) -> None:
    result = invoke(
        "run", "-w", tmp_path, "--model", "scripted", "which bug did you fix last time?"
    )
    assert result.exit_code == 0, result.stderr
    assert "Memory: none shown to this run" in result.stdout
    assert not any(tmp_path.iterdir())  # no junk memory entry, no layout


@pytest.mark.parametrize(
    ("task", "words"),
    [
        ("which bug did you fix last time?", ["bug", "fix"]),
        ("Fix the INVOICE total; rm -rf / `x` $(y)", ["fix", "invoice", "total"]),
        ("add a regression test for format_invoice_total", ["add", "regression", "test"]),
        ("a b c ?? !!", []),
    ],
)
def test_scripted_keywords_are_plain_words(task: str, words: list[str]) -> None:
    from sandmem.cli._scripted import keywords

    found = keywords(task)
    assert found[: len(words)] == words
    assert all(w.isalnum() and w.islower() for w in found)  # safe inside '...' in a shell
