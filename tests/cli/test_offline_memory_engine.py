"""Memory generated without a model: each way to choose the extractive engine (flag, environment,
the workspace's ``sandmem.toml``), which setting wins, one error line for a bad or linked
setting, and what a dry run says the real run needs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from cli_workspaces import error_lines, invoke, pending_conversation

from sandmem.cli._models import choose_models

# ---------------------------------------------------------------- 3: an offline memory engine

OFFLINE_WAYS = {
    "--model": (["--model", "extractive"], {}, None),
    "--memory-model": (["--memory-model", "extractive"], {}, None),
    "env": ([], {"SANDMEM_MEMORY_MODEL": "extractive"}, None),
    "sandmem.toml": ([], {}, '[memory]\nmodel = "extractive"\n'),
}


@pytest.mark.parametrize("way", list(OFFLINE_WAYS))
def test_memory_generates_offline_by_each_setting(tmp_path: Path, way: str) -> None:
    flags, env, settings = OFFLINE_WAYS[way]
    pending_conversation(tmp_path, "a")
    if settings is not None:
        (tmp_path / "sandmem.toml").write_text(settings)
    result = invoke("memory", "generate", "-w", tmp_path, *flags, env=env)
    assert result.exit_code == 0, result.stderr
    assert "✓ a: extracted" in result.stdout
    assert (tmp_path / "memories" / "MEMORY.md").read_text().strip()


def test_without_any_setting_the_error_names_every_offline_way(tmp_path: Path) -> None:
    pending_conversation(tmp_path, "a")
    result = invoke("memory", "generate", "-w", tmp_path)
    assert result.exit_code == 2
    [line] = error_lines(result.stderr)
    for way in ("--model extractive", "SANDMEM_MEMORY_MODEL=extractive", "sandmem.toml"):
        assert way in line


def test_the_flag_and_the_environment_come_before_the_workspace_setting(tmp_path: Path) -> None:
    (tmp_path / "sandmem.toml").write_text('[memory]\nmodel = "extractive"\n')
    assert choose_models("m", None, "model", tmp_path).memory == "extractive"
    assert choose_models("m", None, "model", tmp_path).memory_source == "sandmem.toml"
    assert choose_models("m", "other", "model", tmp_path).memory == "other"
    os.environ["SANDMEM_MEMORY_MODEL"] = "from-env"
    try:
        assert choose_models("m", None, "model", tmp_path).memory == "from-env"
    finally:
        del os.environ["SANDMEM_MEMORY_MODEL"]
    assert choose_models("scripted", "extractive", "model", tmp_path).memory == "extractive"


@pytest.mark.parametrize(
    ("content", "says"),
    [
        ("[memory\nmodel=", "not valid TOML"),
        ("[memory]\nmodel = 3\n", "[memory] model must be"),
        ("[memory]\nmodel = '  '\n", "[memory] model must be"),
        (b"\xff\xfe[memory]", "not valid TOML"),
        ("# " + "x" * 70_000, "larger than 64 KiB"),
    ],
)
def test_a_bad_workspace_setting_is_one_error_line(
    tmp_path: Path, content: str | bytes, says: str
) -> None:
    target = tmp_path / "sandmem.toml"
    if isinstance(content, bytes):
        target.write_bytes(content)
    else:
        target.write_text(content)
    result = invoke("memory", "generate", "-w", tmp_path)
    assert result.exit_code == 2
    [line] = error_lines(result.stderr)
    assert says in line


def test_a_linked_or_special_workspace_setting_is_refused(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere.toml"
    elsewhere.write_text('[memory]\nmodel = "extractive"\n')
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "sandmem.toml").symlink_to(elsewhere)
    result = invoke("memory", "generate", "-w", ws)
    assert result.exit_code == 2 and "cannot read" in result.stderr
    (ws / "sandmem.toml").unlink()
    os.mkfifo(ws / "sandmem.toml")
    result = invoke("memory", "generate", "-w", ws)
    assert result.exit_code == 2 and "not a regular file" in result.stderr


def test_forget_dry_run_says_what_the_real_run_needs(workspace: Path) -> None:
    dry = invoke("memory", "forget", "-w", workspace, "invoice-fix", "--dry-run")
    assert dry.exit_code == 0, dry.stderr
    assert "  (the real run needs a model: no model server" in dry.stdout
    assert "--model extractive" in dry.stdout
    offline = invoke(
        "memory", "forget", "-w", workspace, "invoice-fix", "--dry-run", "-m", "extractive"
    )
    assert "  (with the extractive engine (no model))" in offline.stdout
    real = invoke("memory", "forget", "-w", workspace, "invoice-fix", "--yes", "-m", "extractive")
    assert real.exit_code == 0, real.stderr
    assert not (workspace / "sessions" / "invoice-fix.jsonl").exists()
