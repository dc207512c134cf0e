"""``make demo`` runs offline unless asked, and a demo on an unreachable server says how to run
it offline."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from cli_workspaces import error_lines, invoke

# ---------------------------------------------------------------- 9: make demo offline

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("args", "mode"),
    [
        ([], "--offline"),
        (["OFFLINE=1"], "--offline"),
        (["ONLINE=1"], "--online"),
        (["MODEL=qwen3:8b"], "--model 'qwen3:8b'"),
        (["MODEL=x", "OFFLINE=1"], "--offline --model 'x'"),  # the demo refuses the mix
    ],
)
def test_make_demo_is_offline_unless_asked(args: list[str], mode: str) -> None:
    import shutil
    import subprocess

    if shutil.which("make") is None:
        pytest.skip("no make")
    env = {**os.environ, "OPENAI_API_KEY": "sk-an-unrelated-key"}  # must not switch it online
    done = subprocess.run(
        ["make", "-s", "-n", "-o", ".venv/.installed", "demo", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    [command] = done.stdout.splitlines()
    assert command.startswith(f".venv/bin/sandmem demo {mode} --keep ")


def test_a_demo_on_an_unreachable_server_says_how_to_run_it_offline(tmp_path: Path) -> None:
    import socket

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{probe.getsockname()[1]}/v1"
    result = invoke("demo", "--keep", tmp_path / "demo", env={"OPENAI_BASE_URL": url})
    assert result.exit_code == 1
    [line] = error_lines(result.stderr)
    assert "cannot reach the model server" in line
    assert "run the demo offline: make demo OFFLINE=1 (sandmem demo --offline)" in line
    assert not (tmp_path / "demo").exists() or not any((tmp_path / "demo").iterdir())
    without = invoke("demo", "--model", "m", "--keep", tmp_path / "d2")
    assert without.exit_code != 0
    assert "run the demo offline" in without.stderr
