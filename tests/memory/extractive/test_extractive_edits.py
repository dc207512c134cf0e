"""Edits made by any agent's tool count as changes between two runs of a command (issue 35): a
test that failed, was fixed with Claude Code's ``Edit``/``Write``/``MultiEdit``/``NotebookEdit``,
Codex's ``apply_patch`` or a shell edit, and then passed, is remembered as *fixed by editing*,
never as *passed on a rerun with no change in between* (which would teach later runs that the
test is flaky). A genuine rerun with nothing in between still reads as one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from ingest_fixtures import _Claude, _cx, _jsonl

from sandmem.memory import ingest_sync
from sandmem.memory.extractive import extract
from sandmem.memory.extractive._edit_tools import edit_tool_changes
from sandmem.memory.extractive._shell import edits_files, file_effects

RERUN = "on a rerun with no change in between"
FAILED = "Exit code 1\nFAILED tests/test_cart.py::test_total - assert 10 == 12"
PATCH = (
    "*** Begin Patch\n*** Update File: shop/cart.py\n@@\n-    return price\n"
    "+    return price * qty\n*** End Patch"
)


def _claude_session(root: Path, between: list[tuple[str, dict[str, Any], str, bool]]) -> Path:
    """A Claude Code session: pytest fails, the ``between`` tool calls run (name, input,
    result, is_error), pytest passes."""
    c = _Claude("3a1b2c3d-0000-4000-8000-00000000abcd", "/home/dev/shop")
    c.entry("user", "The cart total test fails; fix shop/cart.py")
    calls = [("Bash", {"command": "pytest -q"}, FAILED, True)]
    calls += between
    calls += [("Bash", {"command": "pytest -q"}, "4 passed in 0.2s", False)]
    for n, (name, args, result, error) in enumerate(calls):
        tool_id = f"toolu_{n:02d}"
        c.entry("assistant", [{"type": "tool_use", "id": tool_id, "name": name, "input": args}])
        block = {"type": "tool_result", "tool_use_id": tool_id, "content": result}
        if error:
            block["is_error"] = True
        c.entry("user", [block])
    c.entry("assistant", [{"type": "text", "text": "Fixed the cart total; tests pass."}])
    return _jsonl(root / "claude" / "session.jsonl", c.rows)


def _remembered(tmp_path: Path, source: Path) -> tuple[str, str]:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    report = ingest_sync(workspace, [source])
    rollout_id = report.sources[0].rollout_id
    assert rollout_id is not None, report
    text = (workspace / "sessions" / f"{rollout_id}.jsonl").read_text(encoding="utf-8")
    artifacts = extract(rollout_id, text)
    assert artifacts is not None
    return artifacts.rollout_summary, artifacts.raw_memory


CLAUDE_EDITS = {
    "Edit": (
        {"file_path": "shop/cart.py", "old_string": "return price", "new_string": "return p * q"},
        "changed `return price` to `return p * q`",
    ),
    "Write": (
        {
            "file_path": "shop/cart.py",
            "content": "def total(price, qty):\n    return price * qty\n",
        },
        "defines `total(price, qty)`",
    ),
    "MultiEdit": (
        {
            "file_path": "shop/cart.py",
            "edits": [
                {"old_string": "return price", "new_string": "return price * qty"},
                {"old_string": "qty=0", "new_string": "qty=1"},
            ],
        },
        "changed `return price` to `return price * qty`; changed `qty=0` to `qty=1`",
    ),
    "NotebookEdit": (
        {"notebook_path": "shop/cart.ipynb", "cell_id": "c1", "new_source": "total = p * q"},
        "added `total = p * q`",
    ),
}


@pytest.mark.parametrize("tool", sorted(CLAUDE_EDITS))
def test_a_claude_code_edit_tool_is_the_fix(tmp_path: Path, tool: str) -> None:
    args, detail = CLAUDE_EDITS[tool]
    path = args.get("file_path", args.get("notebook_path"))
    source = _claude_session(tmp_path, [(tool, args, "The file was updated.", False)])
    summary, raw = _remembered(tmp_path, source)
    for text in (summary, raw):
        assert RERUN not in text
    verb = "writing" if tool == "Write" else "editing"
    assert f"fixed by {verb} `{path}` ({detail}" in raw
    assert "then it passed" in raw


SHELL_EDITS = [
    "sed -i 's/return price/return price * qty/' shop/cart.py",
    "echo 'QTY_DEFAULT = 1' >> shop/cart.py",
    "printf 'x' | tee shop/cart.py",
    "git apply fix.diff",
    "git checkout -- shop/cart.py",
    "git stash pop",
    "patch -p1 < fix.diff",
    "cp shop/cart_fixed.py shop/cart.py",
    "ruff format shop",
    "ruff check --fix shop",
    "cd shop && perl -pi -e 's/price/price * qty/' cart.py",
    "chmod +x scripts/run_tests.sh",
]


@pytest.mark.parametrize("command", SHELL_EDITS)
def test_a_shell_edit_is_the_fix(tmp_path: Path, command: str) -> None:
    source = _claude_session(tmp_path, [("Bash", {"command": command}, "", False)])
    summary, raw = _remembered(tmp_path, source)
    assert RERUN not in summary and RERUN not in raw
    assert "fixed by " in raw and "then it passed" in raw


def _codex_session(root: Path, between: list[dict[str, Any]]) -> Path:
    sid = "0199aaaa-bbbb-7ccc-8ddd-eeeeffff0000"

    def shell(call_id: str, cmd: str, output: str, code: int) -> list[dict[str, Any]]:
        args = json.dumps({"command": ["bash", "-lc", cmd]})
        out = json.dumps({"output": output, "metadata": {"exit_code": code}})
        return [
            _cx("10:00:01.000", "response_item", {"type": "function_call", "name": "shell",
                                                 "call_id": call_id, "arguments": args}),
            _cx("10:00:02.000", "response_item", {"type": "function_call_output",
                                                 "call_id": call_id, "output": out}),
        ]  # fmt: skip

    user = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "fix"}]}
    rows = [
        _cx("10:00:00.000", "session_meta", {"id": sid, "cwd": "/home/dev/shop"}),
        _cx("10:00:00.500", "response_item", user),
        *shell("s1", "pytest -q", "FAILED tests/test_cart.py::test_total", 1),
        *[_cx("10:00:03.000", "response_item", item) for item in between],
        *shell("s2", "pytest -q", "4 passed in 0.2s", 0),
    ]
    return _jsonl(root / "codex" / f"rollout-2026-11-20T10-00-00-{sid}.jsonl", rows)


CODEX_PATCHES = {
    "custom tool call": [
        {"type": "custom_tool_call", "call_id": "p1", "name": "apply_patch", "input": PATCH},
        {"type": "custom_tool_call_output", "call_id": "p1", "output": "Success."},
    ],
    "function call": [
        {
            "type": "function_call",
            "call_id": "p1",
            "name": "apply_patch",
            "arguments": json.dumps({"input": PATCH}),
        },
        {"type": "function_call_output", "call_id": "p1", "output": "Success."},
    ],
    "shell command": [
        {
            "type": "function_call",
            "call_id": "p1",
            "name": "shell",
            "arguments": json.dumps({"command": ["apply_patch", PATCH]}),
        },
        {"type": "function_call_output", "call_id": "p1", "output": "Success."},
    ],
}


@pytest.mark.parametrize("how", sorted(CODEX_PATCHES))
def test_a_codex_apply_patch_is_the_fix(tmp_path: Path, how: str) -> None:
    summary, raw = _remembered(tmp_path, _codex_session(tmp_path, CODEX_PATCHES[how]))
    assert RERUN not in summary and RERUN not in raw
    assert "fixed by editing `shop/cart.py` (changed `return price` to" in raw


NOT_CHANGES = {
    "nothing": [],
    "a read": [("Read", {"file_path": "shop/cart.py"}, "def total(): ...", False)],
    "a search": [("Grep", {"pattern": "price", "path": "shop"}, "shop/cart.py:3", False)],
    "cat and git diff": [
        ("Bash", {"command": "cat shop/cart.py"}, "def total(): ...", False),
        ("Bash", {"command": "git diff --stat"}, "", False),
    ],
    "a failed edit": [
        (
            "Edit",
            {"file_path": "shop/cart.py", "old_string": "nope", "new_string": "x"},
            "<tool_use_error>String to replace not found in file.</tool_use_error>",
            True,
        )
    ],
    "a formatter's check": [("Bash", {"command": "ruff format --check shop"}, "", False)],
}


@pytest.mark.parametrize("case", sorted(NOT_CHANGES))
def test_a_genuine_rerun_still_reads_as_one(tmp_path: Path, case: str) -> None:
    summary, raw = _remembered(tmp_path, _claude_session(tmp_path, NOT_CHANGES[case]))
    assert f"then it passed {RERUN}" in summary
    assert f"then it passed {RERUN}" in raw
    assert "fixed by" not in raw


def test_edit_tools_of_other_agents_are_recognised() -> None:
    found = {
        name: edit_tool_changes(name, args)
        for name, args in {
            "str_replace_based_edit_tool": {"command": "str_replace", "path": "a.py",
                                            "old_str": "x = 1", "new_str": "x = 2"},
            "write_file": {"path": "notes.md", "content": "# Notes\n"},
            "mcp__fs__edit_file": {"path": "a.py", "old": "x", "new": "y"},
            "delete_file": {"path": "old.py"},
        }.items()
    }  # fmt: skip
    assert [(c.action, c.path) for cs in found.values() for c in cs or []] == [
        ("changed", "a.py"),
        ("written", "notes.md"),
        ("changed", "a.py"),
        ("deleted", "old.py"),
    ]
    for name, args in {
        "str_replace_based_edit_tool": {"command": "view", "path": "a.py"},
        "Read": {"file_path": "a.py"},
        "Edit": {"old_string": "x"},  # no file named
        "memory_search": {"query": "edit"},
    }.items():
        assert edit_tool_changes(name, args) is None, name


def test_shell_commands_that_change_files_without_naming_them() -> None:
    for cmd in ("git apply x.diff", "git reset --hard", "git pull", "cargo fmt", "black .",
                "eslint --fix src", "prettier --write .", "patch < x.diff"):  # fmt: skip
        assert edits_files(cmd), cmd
    for cmd in ("git status", "black --check .", "ruff check src", "pytest -q", "grep -i x f"):
        assert not edits_files(cmd), cmd
    effects = {(e.action, e.path) for e in file_effects("git checkout -- a.py b.py; ln -s x y")}
    assert effects == {("changed", "a.py"), ("changed", "b.py"), ("created", "y")}
