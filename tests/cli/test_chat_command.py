"""``sandmem chat``, driven through a pseudo-terminal like a person at a keyboard: turns
stream, /status and /memory answer, Ctrl-C cancels a turn but not the chat, Ctrl-D ends it and
generates memory, --resume continues it with its history."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import sys
import time
from pathlib import Path

import pytest
from cli_workspaces import invoke, memory_server_handler
from fake_openai import FakeOpenAIServer, FakeReply, FakeRequest

SCRIPT = "from sandmem.cli import main; main()"


def agent(req: FakeRequest) -> FakeReply:
    """``slow`` hangs; any other message runs ``echo hi`` once, then answers."""
    said = req.last_user_text()
    if said == "slow":
        return FakeReply(text="too late", delay_s=30)
    last_user = max(i for i, item in enumerate(req.items) if item.get("role") == "user")
    if not any(i.get("type") == "function_call_output" for i in req.items[last_user:]):
        return FakeReply(tool_calls=[("exec_command", {"cmd": "echo hi"}, f"c-{said}")])
    return FakeReply(text=f"Answer to {said}.", chunks=["Answer ", f"to {said}."])


class Terminal:
    """A child process on a pseudo-terminal, with expect-style reading."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        pid, fd = pty.fork()
        if pid == 0:  # the child: exec at once
            os.execve(sys.executable, [sys.executable, "-c", SCRIPT, *args], env)
        self.pid, self.fd = pid, fd
        self.seen = ""
        self.status: int | None = None

    def expect(self, pattern: str, timeout: float = 60) -> str:
        """Read until ``pattern`` (a regex) appears in what was read since the last match."""
        deadline = time.monotonic() + timeout
        while not (found := re.search(pattern, self.seen)):
            left = deadline - time.monotonic()
            if left <= 0:
                self.kill()
                pytest.fail(f"never saw {pattern!r}; the terminal showed:\n{self.seen}")
            ready, _, _ = select.select([self.fd], [], [], min(left, 1))
            if ready:
                try:
                    data = os.read(self.fd, 65536)
                except OSError:  # the child closed the terminal
                    data = b""
                if not data:
                    self.kill()
                    pytest.fail(f"the chat ended before {pattern!r}:\n{self.seen}")
                self.seen += data.decode("utf-8", "replace").replace("\r\n", "\n")
        before, self.seen = self.seen[: found.end()], self.seen[found.end() :]
        return before

    def send(self, text: str) -> None:
        os.write(self.fd, text.encode())

    def wait(self, timeout: float = 60) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with_data, _, _ = select.select([self.fd], [], [], 0.2)
            if with_data:
                try:
                    data = os.read(self.fd, 65536)
                except OSError:
                    data = b""
                self.seen += data.decode("utf-8", "replace").replace("\r\n", "\n")
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                os.close(self.fd)
                return os.waitstatus_to_exitcode(status)
        self.kill()
        pytest.fail(f"the chat did not exit:\n{self.seen}")

    def kill(self) -> None:
        try:
            os.kill(self.pid, 9)
            os.waitpid(self.pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass


def test_chat_through_a_terminal(tmp_path: Path, fake_openai: FakeOpenAIServer) -> None:
    fake_openai.handler = agent
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "SANDMEM_"))}
    env |= {"OPENAI_BASE_URL": fake_openai.base_url, "TERM": "dumb"}
    args = ["chat", "-w", str(tmp_path), "--engine", "extractive"]
    term = Terminal(args, env)
    banner = term.expect("you> ")
    assert "memory: the extractive engine" in banner and "/exit" in banner
    chat_id = re.search(r"chat (chat-[0-9a-f]+) \(new\)", banner).group(1)  # type: ignore[union-attr]

    term.send("hello\n")
    shown = term.expect("you> ")
    assert "→ exec_command: echo hi" in shown and "← exit 0" in shown
    assert "Answer to hello." in shown

    term.send("/status\n")
    assert f"chat {chat_id}: 1 turn(s) this session (0 cancelled)" in term.expect("you> ")

    term.send("slow\n")
    deadline = time.monotonic() + 60
    while fake_openai.in_flight == 0 and time.monotonic() < deadline:
        time.sleep(0.02)
    term.send("\x03")  # Ctrl-C: cancels the turn, the chat goes on
    cancelled = term.expect("you> ")
    assert "turn cancelled" in cancelled and "Traceback" not in cancelled

    term.send("/memory\n")
    assert "no memory" in term.expect("you> ")

    term.send("\x04")  # Ctrl-D ends the chat: memory is generated now
    code = term.wait()
    assert code == 0, term.seen
    assert "chat ended; generating memory" in term.seen
    assert f"✓ {chat_id}: extracted" in term.seen
    assert f"continue it with --resume or --session {chat_id}" in term.seen
    rollout = (tmp_path / f"sessions/{chat_id}.jsonl").read_text()
    segments = [json.loads(x) for x in rollout.splitlines()]
    states = [s["terminal_metadata"]["terminal_state"] for s in segments]
    assert states == ["completed"]  # the cancelled turn never got a reply: nothing recorded
    assert (tmp_path / ".sandmem/chat.db").is_file()

    # --resume continues the same chat: history replayed, memory of the first chat read
    fake_openai.reset()
    term = Terminal([*args, "--resume"], env)
    assert f"chat {chat_id} (continues)" in term.expect("you> ")
    term.send("again\n")
    assert "Answer to again." in term.expect("you> ")
    first = fake_openai.requests[0]
    history = json.dumps(first.items)
    assert history.index("hello") < history.index("Answer to hello.") < history.index("again")
    assert "<memory_summary>" in (first.instructions or "")
    term.send("/exit\n")
    assert term.wait() == 0, term.seen
    lines = (tmp_path / f"sessions/{chat_id}.jsonl").read_text().splitlines()
    assert len(lines) == 2


def test_ctrl_c_during_the_final_memory_generation_exits_130(
    tmp_path: Path, fake_openai: FakeOpenAIServer
) -> None:
    memory = memory_server_handler("unused")

    def handler(req: FakeRequest) -> FakeReply:
        if req.wants_json():
            reply = memory(req)
            reply.delay_s = 30  # phase one hangs
            return reply
        return agent(req)

    fake_openai.handler = handler
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "SANDMEM_"))}
    env |= {"OPENAI_BASE_URL": fake_openai.base_url, "TERM": "dumb"}
    term = Terminal(["chat", "-w", str(tmp_path), "-m", "m", "--session", "c1"], env)
    term.expect("you> ")
    # a key press comes after the prompt is up; sent within microseconds of it, the signal
    # can land before input() blocks in read(), which then never sees it (a race a person
    # at a keyboard cannot hit)
    time.sleep(0.3)
    term.send("hello\n")
    assert "Answer to hello." in term.expect("you> ")
    term.send("/exit\n")
    term.expect("generating memory")
    deadline = time.monotonic() + 60
    while not any(r.wants_json() for r in fake_openai.requests) and time.monotonic() < deadline:
        time.sleep(0.02)
    term.send("\x03")
    assert term.wait() == 130, term.seen
    assert "interrupted during memory generation: the chat is recorded in" in term.seen
    assert "sessions/c1.jsonl" in term.seen and "sandmem memory generate" in term.seen
    assert "Traceback" not in term.seen


def test_up_arrow_recalls_the_last_line_offline(tmp_path: Path) -> None:
    """Line editing and history at the chat prompt (readline): Up recalls the line typed
    before, Enter sends it again. ``--model scripted`` needs no server."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "SANDMEM_"))}
    env |= {"TERM": "dumb"}
    term = Terminal(["chat", "-w", str(tmp_path), "--model", "scripted"], env)
    banner = term.expect("you> ")
    assert "agent: scripted" in banner
    time.sleep(0.3)  # let input() block first (see the Ctrl-C test)
    term.send("list the files please\r")
    assert "You asked: list the files please" in term.expect("you> ")
    time.sleep(0.3)
    term.send("\x1b[A")  # the Up arrow
    term.send("\r")
    again = term.expect("you> ")
    assert "^[[A" not in again
    assert "You asked: list the files please" in again
    term.send("/status\r")
    status = term.expect("you> ")
    assert "2 turn(s) this session" in status
    assert "no tokens (the scripted agent is not a model)" in status and "tokens in" not in status
    assert "API at" not in banner + status  # it contacts no server
    term.send("/exit\r")
    assert term.wait() == 0, term.seen
    assert (tmp_path / ".sandmem/chat_history").read_text().count("list the files please") >= 1
    assert not (tmp_path / "memories").exists()  # its turns are not recorded: no junk memory
    assert not (tmp_path / "sessions").exists()


def test_ctrl_c_at_the_prompt_ends_the_chat_and_says_what_was_saved(
    tmp_path: Path, fake_openai: FakeOpenAIServer
) -> None:
    """Issue 39: like every long-running command, the first Ctrl-C with nothing to cancel
    stops it (exit 130) after saying what was saved; memory is not generated then."""
    fake_openai.handler = agent
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "SANDMEM_"))}
    env |= {"OPENAI_BASE_URL": fake_openai.base_url, "TERM": "dumb"}
    term = Terminal(["chat", "-w", str(tmp_path), "-m", "m", "--session", "c2"], env)
    banner = term.expect("you> ")
    assert "/exit (or Ctrl-D) ends the chat" in banner and "Ctrl-C" in banner
    time.sleep(0.3)  # let input() block first (see the test above)
    term.send("hello\n")
    assert "Answer to hello." in term.expect("you> ")
    time.sleep(0.3)
    term.send("\x03")
    assert term.wait() == 130, term.seen
    assert "chat ended (Ctrl-C): its 1 turn(s) are recorded in" in term.seen
    assert "sessions/c2.jsonl" in term.seen and "memory generate" in term.seen
    assert (tmp_path / "sessions" / "c2.jsonl").is_file()
    assert not any(r.wants_json() for r in fake_openai.requests)  # no generation started
    assert "Traceback" not in term.seen


def test_resume_needs_an_earlier_chat(tmp_path: Path, fake_openai: FakeOpenAIServer) -> None:
    env = {"OPENAI_BASE_URL": fake_openai.base_url}
    result = invoke("chat", "-w", tmp_path, "--resume", env=env)
    assert result.exit_code == 2 and "no earlier chat" in result.stderr
    both = invoke("chat", "-w", tmp_path, "--resume", "--session", "x", env=env)
    assert both.exit_code == 2
    bad = invoke("chat", "-w", tmp_path, "--session", "bad id", env=env)
    assert bad.exit_code == 2 and "--session" in bad.stderr
