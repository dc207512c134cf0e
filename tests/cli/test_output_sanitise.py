"""What a command prints never acts on the terminal: control characters and escape sequences
in data (a client's self-declared name, an ingested task, a proposal's run, a file name) are
stripped by the one sanitiser (``sandmem._terminal``) every command's output goes through."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from cli_workspaces import DEPLOY, INVOICE, Conversation, build_workspace, invoke

from sandmem._terminal import json_text, printable

OSC52 = "\x1b]52;c;cm0gLXJmIH4K\x07"  # writes "rm -rf ~" to the clipboard
FORGED = "\r\x1b[2K   9  2026-01-01  consolidation  by=admin"  # overwrites the line shown
BIDI = "\u202etxt.exe"
C1 = "\x9b31m\x9d0;title\x9c"
HOSTILE = [OSC52, FORGED, BIDI, C1, "\x1b[31mred\x1b[0m", "\x1bP+q\x1b\\", "\x07\x08\x7f"]
#: nothing that acts on a terminal: ESC, other C0 but newline and tab, DEL, C1, bidi controls
ACTIVE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        (f"cursor{OSC52}", "cursor"),
        ("ok\x1b]0;title\x1b\\ after", "ok after"),
        ("a\x1b[2Kb\x1b[1;31mc", "abc"),
        ("line\rforged", "lineforged"),
        ("\u202eevil\u2066x\u2069", "evilx"),
        ("tab\tand\nnewline", "tab\tand\nnewline"),
        ("x\x9b2Jy", "xy"),
        ("unterminated \x1b]52;c;abc\nnext line", "unterminated \nnext line"),
        ("lone \x1b", "lone "),
        ("plain text, ünïcödé, 表", "plain text, ünïcödé, 表"),
    ],
)
def test_printable_strips_what_acts_on_a_terminal(text: str, shown: str) -> None:
    assert printable(text) == shown


def test_one_line_turns_line_breaks_into_spaces() -> None:
    assert printable("a\nb\tc\rd\u2028e", one_line=True) == "a b c d e"


def test_json_text_stays_the_same_json_value() -> None:
    value = {"client": "".join(HOSTILE)}
    text = json_text(json.dumps(value, ensure_ascii=False))
    assert json.loads(text) == value
    assert not ACTIVE.search(text)


def _plant_client(workspace: Path, client: str) -> None:
    versions = sorted((workspace / "memories" / ".history" / "versions").iterdir())
    record = json.loads(versions[-1].read_text())
    record["attribution"].update(client=client, note=client)
    versions[-1].write_text(json.dumps(record))


@pytest.mark.parametrize("hostile", HOSTILE)
def test_memory_log_prints_no_escape_from_a_client_name(tmp_path: Path, hostile: str) -> None:
    workspace = build_workspace(tmp_path / "ws", [INVOICE])
    _plant_client(workspace, f"cursor{hostile}")
    result = invoke("memory", "log", "-w", workspace)
    assert result.exit_code == 0
    assert "cursor" in result.stdout and not ACTIVE.search(result.stdout + result.stderr)
    text = invoke("memory", "log", "-w", workspace, "--json").stdout
    assert not ACTIVE.search(text)
    assert json.loads(text)[0]["client"] == f"cursor{hostile}"  # escaped, the value whole


def test_memory_list_and_status_print_no_escape_from_an_ingested_task(tmp_path: Path) -> None:
    task = f"Fix the build{OSC52}{FORGED}{BIDI}"
    hostile = Conversation("hostile-task", task, "ls", f"done{OSC52}")
    workspace = build_workspace(tmp_path / "ws", [hostile, DEPLOY])
    for args in (("memory", "list"), ("memory", "status"), ("memory", "tree")):
        result = invoke(*args, "-w", workspace)
        assert result.exit_code == 0, result.stderr
        assert not ACTIVE.search(result.stdout + result.stderr), args
    assert "Fix the build" in invoke("memory", "list", "-w", workspace).stdout


def test_inbox_prints_no_escape_from_a_proposal(tmp_path: Path) -> None:
    import hashlib

    workspace = build_workspace(tmp_path / "ws", [INVOICE])
    history = workspace / "memories" / ".history"
    new = b"# Memory\n\n- proposed" + OSC52.encode() + b"\n"
    digest = hashlib.sha256(new).hexdigest()
    (history / "objects" / digest).write_bytes(new)
    live = (workspace / "memories" / "MEMORY.md").read_bytes()
    record = {
        "id": "phostile",
        "attribution": {"kind": "live_edit", "run": f"run{FORGED}", "client": OSC52},
        "files": {"MEMORY.md": digest},
        "before": {"MEMORY.md": hashlib.sha256(live).hexdigest()},
    }
    (history / "proposals").mkdir(exist_ok=True)
    (history / "proposals" / "phostile.json").write_text(json.dumps(record))
    result = invoke("memory", "inbox", "-w", workspace)
    assert result.exit_code == 0 and "phostile" in result.stdout
    assert not ACTIVE.search(result.stdout + result.stderr)


def test_a_warning_about_a_bad_record_is_one_printable_line(tmp_path: Path) -> None:
    workspace = build_workspace(tmp_path / "ws", [INVOICE])
    proposals = workspace / "memories" / ".history" / "proposals"
    proposals.mkdir(exist_ok=True)
    (proposals / "pbad.json").write_text('{"id": "pbad\\u001b]52;c;eA==\\u0007", "files": {')
    result = invoke("memory", "inbox", "-w", workspace)
    assert result.exit_code == 0
    [line] = [line for line in result.stderr.splitlines() if "pbad.json" in line]
    assert line.startswith("sandmem warning:") and not ACTIVE.search(result.stderr)
