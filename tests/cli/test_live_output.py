"""Live output of ``sandmem run``: text and tool lines appear while the run is going, the
answer before memory generation; ``--json`` streams the events; ``--quiet`` prints the answer.

The timing test runs the real console script with its stdout and stderr on pipes (so line
flushing is what is tested) against the fake server. It takes no clock readings: the fake
server's handler (a thread of this process) reads the pipes when a request arrives, and a
write to a pipe is in the kernel's buffer once it returns, so what the child wrote before it
sent a request is there to read. The answer's last chunk is held back until the ones before
it are on stdout (a CLI that printed the answer only at its end would never show them: the
test fails after a bounded wait)."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from cli_workspaces import invoke, memory_server_handler
from fake_openai import FakeOpenAIServer, FakeReply, FakeRequest

from sandmem.cli._live import call_summary, output_summary

CHUNKS = ["Checked ", "the file: ", "it prints ", "hi."]
ANSWER = "".join(CHUNKS)
SCRIPT = "from sandmem.cli import main; main()"


def scripted(final: FakeReply, on_request: Any = None) -> Any:
    """Turn 1 runs ``echo hi``; turn 2 answers with ``final``; memory requests as usual.
    ``on_request(req)`` sees every request first."""
    memory = memory_server_handler(ANSWER)

    def handler(req: FakeRequest) -> FakeReply:
        if on_request is not None:
            on_request(req)
        if req.wants_json() or "write_file" in req.tool_names():
            return memory(req)
        if not req.tool_outputs():
            return FakeReply(tool_calls=[("exec_command", {"cmd": "echo hi"}, "call-1")])
        return final

    return handler


class Pipes:
    """A child's stdout and stderr as two pipes made here, read as the bytes come (by the
    test's thread and by the fake server's handler thread)."""

    def __init__(self) -> None:
        self._read: dict[str, int] = {}
        self.write: dict[str, int] = {}
        for name in ("out", "err"):
            self._read[name], self.write[name] = os.pipe()
            os.set_blocking(self._read[name], False)
        self._data = {"out": b"", "err": b""}
        self._open = set(self._read)
        self._lock = threading.Lock()

    def close_write_ends(self) -> None:
        for fd in self.write.values():
            os.close(fd)

    def close(self) -> None:
        for fd in self._read.values():
            os.close(fd)

    def _drain(self) -> None:
        with self._lock:
            for name in sorted(self._open):
                while True:
                    try:
                        data = os.read(self._read[name], 65536)
                    except BlockingIOError:
                        break
                    if not data:
                        self._open.discard(name)
                        break
                    self._data[name] += data

    def now(self, stream: str) -> str:
        """Everything the child has written to ``stream`` so far."""
        self._drain()
        return self._data[stream].decode(errors="replace")

    def wait_for(self, stream: str, text: str, within: float = 30.0) -> str:
        """``stream`` once it holds ``text`` (or as it is after ``within`` seconds)."""
        deadline = time.monotonic() + within
        while text not in (seen := self.now(stream)) and time.monotonic() < deadline:
            time.sleep(0.01)
        return seen

    def read_to_end(self, within: float = 120.0) -> tuple[str, str]:
        deadline = time.monotonic() + within
        while self._open and time.monotonic() < deadline:
            select.select([self._read[n] for n in self._open], [], [], 0.5)
            self._drain()
        return self.now("out"), self.now("err")


def _delta(event: bytes) -> str | None:
    """The text delta a server-sent event carries, if any."""
    for line in event.decode().splitlines():
        if line.startswith("data: {"):
            data = json.loads(line[len("data: ") :])
            return data.get("delta") if isinstance(data, dict) else None
    return None


def test_text_and_tool_lines_appear_before_the_run_ends(
    tmp_path: Path, fake_openai: FakeOpenAIServer
) -> None:
    pipes = Pipes()
    seen: dict[str, str] = {}  # what the child had written when ...

    def on_request(req: FakeRequest) -> None:
        memory = req.wants_json() or "write_file" in req.tool_names()
        if memory:
            seen.setdefault("memory starts", pipes.now("out"))
        elif req.tool_outputs():
            seen.setdefault("turn 2 is asked for", pipes.now("err"))

    def before_event(event: bytes) -> None:
        if _delta(event) == CHUNKS[-1]:
            seen["the last chunk leaves"] = pipes.wait_for("out", "".join(CHUNKS[:-1]))

    final = FakeReply(text=ANSWER, chunks=CHUNKS, before_event=before_event)
    fake_openai.handler = scripted(final, on_request)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "SANDMEM_"))}
    env["OPENAI_BASE_URL"] = fake_openai.base_url
    try:
        with subprocess.Popen(
            [sys.executable, "-c", SCRIPT, "run", "-w", str(tmp_path), "-m", "m", "check it"],
            stdout=pipes.write["out"],
            stderr=pipes.write["err"],
            env=env,
        ) as proc:
            pipes.close_write_ends()
            out, err = pipes.read_to_end()
            proc.wait(timeout=60)
    finally:
        pipes.close()
    assert proc.returncode == 0, err
    assert out == ANSWER + "\n"  # streamed, and not printed a second time
    assert "→ exec_command: echo hi\n" in err and "  ← exit 0: hi (" in err
    # the tool lines were on stderr before the model was even asked for turn 2
    assert "→ exec_command: echo hi\n" in seen["turn 2 is asked for"]
    assert "  ← exit 0: hi (" in seen["turn 2 is asked for"]
    # the first words of the answer were on stdout before its last words left the server
    assert seen["the last chunk leaves"] == "".join(CHUNKS[:-1])
    # the whole answer was on stdout before memory generation sent its first request
    assert seen["memory starts"] == ANSWER + "\n"


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
