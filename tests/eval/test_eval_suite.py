"""The suite format: the built-in suite parses, and every kind of bad suite is a UserError."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandmem import UserError
from sandmem.eval import load_suite, parse_suite

_MINIMAL = """
name = "mini"
[[task]]
id = "one"
[task.files]
"a.txt" = "a"
[[task.step]]
prompt = "do it"
check = "true"
"""


def test_builtin_suite_covers_the_kinds_the_issue_lists() -> None:
    suite = load_suite("builtin")
    kinds = {task.kind for task in suite.tasks}
    assert len(suite.tasks) >= 8
    assert {
        "bug-followup",
        "discovered-command",
        "correction",
        "preference",
        "dead-end",
        "stale-memory",
        "multi-agent",
        "memory-irrelevant",
    } <= kinds
    assert all(len(task.steps) >= 2 for task in suite.tasks)
    multi = next(task for task in suite.tasks if task.kind == "multi-agent")
    layouts = {(a.memories_dir, a.sessions_dir) for a in multi.agents.values()}
    assert len(layouts) == len(multi.agents) > 1


def test_suite_file_with_a_workspace_directory(tmp_path: Path) -> None:
    (tmp_path / "ws" / "src").mkdir(parents=True)
    (tmp_path / "ws" / "src" / "x.py").write_text("x = 1\n")
    suite_file = tmp_path / "suite.toml"
    suite_file.write_text(_MINIMAL.replace('[task.files]\n"a.txt" = "a"', 'workspace = "ws"'))
    suite = load_suite(suite_file)
    assert suite.workspace_files(suite.tasks[0]) == {"src/x.py": b"x = 1\n"}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("name = ", "not valid TOML"),
        ('name = "x"', "task"),
        (_MINIMAL.replace('id = "one"', 'id = "Bad Id"'), "must match"),
        (_MINIMAL + '\nagent = "ghost"\n', "agent 'ghost'"),
        (_MINIMAL + _MINIMAL.split('name = "mini"')[1], "unique"),
        (_MINIMAL + '[task.step.script]\nactions = [{ cmd = "a", patch = "b" }]\n', "exactly one"),
        (_MINIMAL + "surprise = 1\n", "Extra inputs"),
    ],
)
def test_bad_suites_are_user_errors(text: str, message: str) -> None:
    with pytest.raises(UserError, match=message):
        parse_suite(text, source="s.toml")


def test_missing_suite_file_says_what_to_pass(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="builtin"):
        load_suite(tmp_path / "nope.toml")


# -- issue 25, class 8: a suite's workspace stays inside the suite's directory ---------------


@pytest.mark.parametrize(
    "workspace", ["../..", "..", "/root", "~/.ssh", "ws/../../x", "a\\\\..\\\\..", "./../x"]
)
def test_a_workspace_outside_the_suite_directory_is_refused(workspace: str, tmp_path: Path) -> None:
    text = _MINIMAL.replace('[task.files]\n"a.txt" = "a"', f"workspace = '{workspace}'")
    with pytest.raises(UserError, match="inside the suite's directory"):
        parse_suite(text, base_dir=tmp_path, source="s.toml")


def test_a_workspace_link_leading_outside_is_refused_and_inner_links_not_followed(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_ed25519").write_text("private")
    suite_dir = tmp_path / "suite"
    (suite_dir / "ws").mkdir(parents=True)
    (suite_dir / "ws" / "ok.txt").write_text("ok")
    (suite_dir / "ws" / "ssh").symlink_to(home / ".ssh")
    (suite_dir / "ws" / "key").symlink_to(home / ".ssh" / "id_ed25519")
    (suite_dir / "out").symlink_to(home)
    for workspace, expected in (("ws", {"ok.txt": b"ok"}), ("out", None)):
        text = _MINIMAL.replace('[task.files]\n"a.txt" = "a"', f'workspace = "{workspace}"')
        suite = parse_suite(text, base_dir=suite_dir, source="s.toml")
        if expected is None:
            with pytest.raises(UserError, match="leads outside"):
                suite.workspace_files(suite.tasks[0])
        else:
            assert suite.workspace_files(suite.tasks[0]) == expected


def test_links_deeper_in_the_workspace_and_special_files_are_not_read(tmp_path: Path) -> None:
    """Round 4: a link leading out from a nested directory, a nested directory link, a FIFO
    (which would hang a read) and a socket are skipped; the workspace path itself through an
    inner link that resolves inside the suite is fine."""
    import os
    import socket

    home = tmp_path / "home"
    home.mkdir()
    (home / "secret").write_text("private")
    ws = tmp_path / "suite" / "ws"
    (ws / "a" / "b").mkdir(parents=True)
    (ws / "a" / "b" / "ok.txt").write_text("ok")
    (ws / "a" / "b" / "up").symlink_to("../../../../home")
    (ws / "a" / "key").symlink_to(home / "secret")
    os.mkfifo(ws / "a" / "fifo")
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(ws / "a" / "sock"))
    (tmp_path / "suite" / "alias").symlink_to("ws/a")
    for workspace, expected in (("ws", {"a/b/ok.txt": b"ok"}), ("alias", {"b/ok.txt": b"ok"})):
        text = _MINIMAL.replace('[task.files]\n"a.txt" = "a"', f'workspace = "{workspace}"')
        suite = parse_suite(text, base_dir=tmp_path / "suite", source="s.toml")
        assert suite.workspace_files(suite.tasks[0]) == expected


@pytest.mark.parametrize(
    "table",
    [
        '[task.files]\n"../../escape.txt" = "x"',
        '[task.files]\n"/etc/cron.d/x" = "x"',
        '[task.files]\n"a/../../b" = "x"',
        '[task.agents.default]\nmemories_dir = "../../m"',
        '[task.agents.default]\nmemories_dir = "/abs"',
        '[task.agents.default]\nsessions_dir = "memories"',
    ],
)
def test_inline_files_and_agent_layouts_are_checked_where_the_suite_is_read(table: str) -> None:
    """Before, these names were accepted and refused only when a task ran; a suite is parsed
    once, at its boundary, into names that stay inside the workspace."""
    text = _MINIMAL.replace('[task.files]\n"a.txt" = "a"', table)
    with pytest.raises(UserError):
        parse_suite(text, source="s.toml")


async def test_a_model_servers_error_text_is_redacted_in_every_report(tmp_path: Path) -> None:
    """Issue 25, class 5: an error text that echoes a key (as some servers do) is stored
    redacted in the cell results and in report.json, .md and .html; a refused key (HTTP 401)
    stops the eval with a redacted reason and leaves no file holding it."""
    from sandmem._errors import ModelRequestError
    from sandmem.eval import EvalOptions, EvalStopped, run_eval
    from sandmem.models import ModelProvider, ModelRequest
    from sandmem.testing import FunctionModel, text

    key = "sk-proj-" + "Zx9" * 24

    def refuse(request: ModelRequest) -> object:
        if request.input and request.input[-1].get("content") == "Say OK.":
            return [text("OK")]  # the check before the first task passes
        raise ModelRequestError(
            f"Error code: 400 - context too long for key {key}", status_code=400
        )

    def unauthorized(request: ModelRequest) -> object:
        raise ModelRequestError(
            f"Error code: 401 - Incorrect API key provided: {key}", status_code=401
        )

    class Provider(ModelProvider):
        def __init__(self, fn: object) -> None:
            self.fn = fn

        def get_model(self, name: str | None) -> FunctionModel:
            return FunctionModel(self.fn, name=name or "refusing")  # type: ignore[arg-type]

    suite_file = tmp_path / "suite.toml"
    suite_file.write_text(_MINIMAL)
    out = tmp_path / "out"
    report = await run_eval(
        str(suite_file),
        EvalOptions(
            out=out, model="refusing", memory_model="extractive", provider=Provider(refuse)
        ),
    )
    errors = [step.error for cell in report.cells for step in cell.steps]
    assert errors and all(e and "[REDACTED:openai-key]" in e for e in errors), errors
    with pytest.raises(EvalStopped) as stopped:
        await run_eval(
            str(suite_file),
            EvalOptions(
                out=tmp_path / "out401",
                model="m",
                memory_model="extractive",
                provider=Provider(unauthorized),
            ),
        )
    assert key not in str(stopped.value) and "[REDACTED:openai-key]" in str(stopped.value)
    assert _files_holding(tmp_path, key) == []


def _files_holding(root: Path, text: str) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and text in p.read_text(errors="replace")]
