"""Live output of ``sandmem run``: text and tool lines appear while the run is going, the
answer before memory generation; ``--json`` streams the events; ``--quiet`` prints the answer.

The timing test runs the real console script with its stdout and stderr on pipes (so line
flushing is what is tested) against the fake server, and compares timestamps taken on one
clock (``time.perf_counter`` in this process: the server runs in a thread here)."""

from __future__ import annotations

import json
import os
import selectors
import subprocess
import sys
import time
from pathlib import Path

from cli_workspaces import invoke, memory_server_handler
from fake_openai import FakeOpenAIServer, FakeReply, FakeRequest

from sandmem.cli._live import call_summary, output_summary

CHUNKS = ["Checked ", "the file: ", "it prints ", "hi."]
ANSWER = "".join(CHUNKS)
SCRIPT = "from sandmem.cli import main; main()"


def scripted(final: FakeReply) -> object:
    """Turn 1 runs ``echo hi``; turn 2 answers with ``final``; memory requests as usual."""
    memory = memory_server_handler(ANSWER)

    def handler(req: FakeRequest) -> FakeReply:
        if req.wants_json() or "write_file" in req.tool_names():
            return memory(req)
        if not req.tool_outputs():
            return FakeReply(tool_calls=[("exec_command", {"cmd": "echo hi"}, "call-1")])
        return final

    return handler


def read_timed(proc: subprocess.Popen[bytes]) -> list[tuple[float, str, bytes]]:
    """Every read from the child's stdout/stderr as (time, stream, bytes), until both close."""
    assert proc.stdout is not None and proc.stderr is not None
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ, "out")
    sel.register(proc.stderr, selectors.EVENT_READ, "err")
    reads: list[tuple[float, str, bytes]] = []
    deadline = time.monotonic() + 120
    while sel.get_map() and time.monotonic() < deadline:
        for key, _ in sel.select(timeout=1):
            data = os.read(key.fd, 65536)
            if not data:
                sel.unregister(key.fileobj)
                continue
            reads.append((time.perf_counter(), key.data, data))
    proc.wait(timeout=60)
    return reads


def first_time(reads: list[tuple[float, str, bytes]], stream: str, text: str) -> float:
    """When ``text`` was complete in ``stream`` (its reads joined)."""
    seen = b""
    for at, name, data in reads:
        if name == stream:
            seen += data
            if text.encode() in seen:
                return at
    raise AssertionError(f"{text!r} never appeared on {stream}: {seen!r}")


def test_text_and_tool_lines_appear_before_the_run_ends(
    tmp_path: Path, fake_openai: FakeOpenAIServer
) -> None:
    final = FakeReply(text=ANSWER, chunks=CHUNKS, chunk_delay_s=0.4)
    fake_openai.handler = scripted(final)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "SANDMEM_"))}
    env["OPENAI_BASE_URL"] = fake_openai.base_url
    with subprocess.Popen(
        [sys.executable, "-c", SCRIPT, "run", "-w", str(tmp_path), "-m", "m", "check it"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    ) as proc:
        reads = read_timed(proc)
    out = b"".join(d for _, s, d in reads if s == "out").decode()
    err = b"".join(d for _, s, d in reads if s == "err").decode()
    assert proc.returncode == 0, err
    assert out == ANSWER + "\n"  # streamed, and not printed a second time
    assert "→ exec_command: echo hi\n" in err and "  ← exit 0: hi (" in err
    agent = [r for r in fake_openai.requests if "exec_command" in r.tool_names()]
    second_turn = next(r for r in agent if r.tool_outputs()).received_at
    phase_one = min(r.received_at for r in fake_openai.requests if r.wants_json())
    # the tool lines were on stderr before the model was even asked for turn 2
    assert first_time(reads, "err", "→ exec_command: echo hi") < second_turn
    assert first_time(reads, "err", "  ← exit 0") < second_turn
    # the first words of the answer were on stdout before its last words left the server
    assert first_time(reads, "out", CHUNKS[0]) < final.sent_at[-1]
    # the whole answer was on stdout before memory generation sent its first request
    assert first_time(reads, "out", ANSWER) < phase_one


def test_json_streams_the_events_then_the_memory_report(
    tmp_path: Path, fake_openai: FakeOpenAIServer
) -> None:
    fake_openai.handler = scripted(FakeReply(text=ANSWER, chunks=CHUNKS))
    env = {"OPENAI_BASE_URL": fake_openai.base_url}
    result = invoke("run", "-w", tmp_path, "--engine", "extractive", "--json", "go", env=env)
    assert result.exit_code == 0, result.output
    events = [json.loads(line) for line in result.stdout.splitlines()]
    kinds = [e["type"] if e["type"] != "run_item_stream_event" else e["name"] for e in events]
    assert kinds[:4] == ["start", "agent_updated_stream_event", "tool_called", "tool_output"]
    deltas = [e["data"]["delta"] for e in events if e["type"] == "raw_response_event"]
    assert deltas == CHUNKS
    assert kinds[-4:] == ["message_output_created", "result", "memory", "end"]
    called = next(e for e in events if e.get("name") == "tool_called")
    assert called["item"]["name"] == "exec_command"
    assert json.loads(called["item"]["arguments"]) == {"cmd": "echo hi"}
    assert events[-3]["final_output"] == ANSWER


def test_quiet_prints_only_the_answer(tmp_path: Path, fake_openai: FakeOpenAIServer) -> None:
    fake_openai.handler = scripted(FakeReply(text=ANSWER, chunks=CHUNKS))
    env = {"OPENAI_BASE_URL": fake_openai.base_url}
    result = invoke("run", "-w", tmp_path, "--engine", "extractive", "-q", "go", env=env)
    assert result.exit_code == 0, result.output
    assert result.stdout == ANSWER + "\n" and result.stderr == ""
    loud = invoke("run", "-w", tmp_path, "--engine", "extractive", "go", env=env)
    lines = loud.stderr.splitlines()
    assert lines[0].startswith("sandmem: agent: ")
    assert lines[1:3] == ["→ exec_command: echo hi", lines[2]] and lines[2].startswith("  ← exit 0")


def test_summaries() -> None:
    assert call_summary("exec_command", json.dumps({"cmd": "pytest -q\n  -x"})) == "pytest -q -x"
    patch = "*** Begin Patch\n*** Update File: a.py\n@@\n-x\n+y\n*** Add File: b.py\n+z\n"
    assert call_summary("apply_patch", json.dumps({"patch": patch})) == "a.py, b.py"
    assert call_summary("view_image", json.dumps({"path": "x.png"})) == 'path="x.png"'
    assert len(call_summary("exec_command", json.dumps({"cmd": "y" * 500}))) == 80
    assert output_summary("Exit code: 3\nOutput:\nboom\n") == "exit 3: boom (26 B)"
    shell = "Exit code: 0\nWall time: 0.1 s\nOutput:\ncollected 3\n...\n3 passed in 0.02s\n"
    assert output_summary(shell) == "exit 0: 3 passed in 0.02s (72 B)"
    assert output_summary("Exit code: 0\nWall time: 0.0 s\nOutput: (none)") == "exit 0, 44 B"
    assert output_summary("Error: ValueError: bad") == "Error: ValueError: bad"
    assert output_summary("x" * 2048) == "2.0 KB"
