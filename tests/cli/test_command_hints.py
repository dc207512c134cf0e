"""What the commands say about their surroundings: ``view --open`` without a browser, ``generate``
without a server setting (exit 2), ``run`` in the current directory, hints spelled as the
command was started, the client flags on every command that calls a model."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_workspaces import invoke
from fake_openai import FakeOpenAIServer

# ---------------------------------------------------------------- point 9 and PATH


def test_view_open_without_a_browser_says_so(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import webbrowser

    monkeypatch.setattr(webbrowser, "open", lambda url: False)
    page = workspace.parent / "view.html"
    result = invoke("memory", "view", "-w", workspace, "--open", "--out", page)
    assert result.exit_code == 1
    assert "Error: no web browser found to open the page" in result.stderr
    assert page.is_file()


def test_generate_without_a_server_setting_exits_2(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    for args in (("generate",), ("forget", "invoice-fix", "--yes")):
        result = invoke("memory", *args, "-w", workspace)
        assert result.exit_code == 2, (args, result.stderr)
        assert result.stderr.startswith("Error: no model server configured")


def test_run_defaults_to_the_current_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "here.txt").write_text("x")
    result = invoke("run", "--model", "scripted", "hi", env={})
    assert result.exit_code == 0, result.stderr
    assert "here.txt" in result.stdout  # the scripted agent listed the current directory


def test_hints_spell_the_command_as_it_was_started(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After `make demo` the venv is not activated: a hint says `.venv/bin/sandmem ...`."""
    import sys

    from sandmem._log_lines import command_name

    script = tmp_path / ".venv/bin/sandmem"
    script.parent.mkdir(parents=True)
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", [str(script), "demo"])
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    assert command_name() == ".venv/bin/sandmem"
    monkeypatch.setenv("PATH", f"{script.parent}:/usr/bin:/bin")
    assert command_name() == "sandmem"
    monkeypatch.setattr(sys, "argv", ["-c"])  # inside another program
    assert command_name() == "sandmem"


def test_every_command_that_calls_a_model_takes_the_client_flags(
    tmp_path: Path, fake_openai: FakeOpenAIServer
) -> None:
    commands = [
        ("run",),
        ("chat",),
        ("eval",),
        ("demo",),
        ("worker",),
        ("mcp",),
        ("memory", "generate"),
        ("memory", "forget"),
        ("memory", "ingest"),
    ]
    for command in commands:
        shown = invoke(*command, "--help").stdout
        for flag in ("--timeout SECONDS", "--max-retries N", "-v, --debug"):
            assert flag in shown, (command, flag)
    fake_openai.inject(delay_s=5.0, times=1000)  # the demo on a hung server gives up at once
    env = {"OPENAI_BASE_URL": fake_openai.base_url}
    args = ("demo", "--model", "m", "--timeout", "0.3", "--max-retries", "0", "-v")
    demo = invoke(*args, "--keep", tmp_path / "kept", env=env)
    assert demo.exit_code == 1 and "timed out" in demo.stdout + demo.stderr
    assert len(fake_openai.requests) == 1  # --max-retries 0
    assert f"sandmem debug: POST {fake_openai.base_url}/responses" in demo.stderr
