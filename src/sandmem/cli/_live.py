"""Live output of a streamed run: the model's text as it arrives (stdout), one line per tool
call and one per tool result (stderr), a spinner while waiting (stderr, terminals only); or,
with ``--json``, every stream event as one JSON line on stdout."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import asdict, is_dataclass
from typing import Any

import click

from sandmem._items import Item, message_text
from sandmem._log_lines import human_size, one_line
from sandmem._terminal import json_text, printable, raw
from sandmem.agent._agent import Agent
from sandmem.agent._stream_events import StreamEvent
from sandmem.run._runner import Runner, RunResultStreaming

_SPINNER = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"
_SPIN_S = 0.1
#: off a terminal, a line this often (seconds) while the run waits on the model or a tool
HEARTBEAT_S = 5.0
_ARG_CHARS = 80
_TEXT_DELTA = "response.output_text.delta"


def _short(text: str, limit: int = _ARG_CHARS) -> str:
    text = one_line(text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def call_summary(name: str, arguments: str) -> str:
    """A tool call in a few words: the command of ``exec_command``, the files of a patch, else
    the arguments."""
    try:
        args = json.loads(arguments or "{}")
    except ValueError:
        return _short(arguments)
    if not isinstance(args, dict):
        return _short(str(args))
    if name == "exec_command" and isinstance(args.get("cmd"), str):
        return _short(args["cmd"])
    if name == "apply_patch" and isinstance(args.get("patch"), str):
        files = [
            line.split(":", 1)[1].strip()
            for line in args["patch"].splitlines()
            if line.startswith(("*** Add File:", "*** Update File:", "*** Delete File:"))
        ]
        return _short(", ".join(files) or "(no files)")
    return _short(", ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in args.items()))


def output_summary(output: Any) -> str:
    """A tool result in a few words: the exit code (shell), the last line the command printed
    (as the demo shows it: for tests, the summary) and the size; or the tool's error."""
    text = output if isinstance(output, str) else json.dumps(output, default=str)
    size = human_size(len(text.encode()))
    first = text.split("\n", 1)[0]
    if first.startswith("Exit code:"):
        _, _, body = text.partition("\nOutput:\n")
        head = _short(body.strip().rsplit("\n", 1)[-1], 60) if body.strip() else ""
        code = first.removeprefix("Exit code:").strip()
        return f"exit {code}: {head} ({size})" if head else f"exit {code}, {size}"
    if first.startswith("Command timed out"):
        return _short(first, 100)
    if text.startswith("Error:"):
        return _short(first, 100)
    return size


def event_json(event: StreamEvent) -> dict[str, Any] | None:
    """A stream event as JSON data. Raw model events are kept only for text deltas (the rest
    repeat what the item events say)."""
    if event.type == "raw_response_event":
        data = event.data
        if getattr(data, "type", None) != _TEXT_DELTA:
            return None
        return {"type": event.type, "data": {"type": _TEXT_DELTA, "delta": data.delta}}
    if event.type == "run_item_stream_event":
        return {"type": event.type, "name": event.name, "item": event.item.raw_item}
    return {"type": event.type, "agent": event.new_agent.name}


def _jsonable(value: Any) -> Any:  # pragma: no cover - defensive for unknown payloads
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    if is_dataclass(value) and not isinstance(value, type):
        return asdict(value)
    return str(value)


class LiveView:
    """Follows one streamed run. ``text`` streams the model's text to stdout (off for
    ``--quiet``, where only the final answer is printed); ``tools`` prints the tool lines;
    ``spinner`` animates a waiting line on stderr (only meaningful on a terminal);
    ``heartbeat`` prints a line every ``HEARTBEAT_S`` seconds of waiting instead (for a pipe
    or a log, where a spinner cannot be drawn)."""

    def __init__(
        self,
        *,
        text: bool = True,
        tools: bool = True,
        spinner: bool = False,
        heartbeat: bool = False,
        as_json: bool = False,
    ) -> None:
        self.text = text and not as_json
        self.tools = tools and not as_json
        self.as_json = as_json
        self.spinner = spinner and not as_json
        self.heartbeat = heartbeat and not self.spinner and not as_json
        self.streamed: list[str] = []  # the text of the current message, as streamed
        self._last_message = ""
        self._mid_line = False
        self._waiting: str | None = None
        self._spin_shown = False
        self._since = time.monotonic()

    # ------------------------------------------------------------------ lines

    def _end_line(self) -> None:
        if self._mid_line:
            click.echo("")
            self._mid_line = False

    def _clear_spinner(self) -> None:
        if self._spin_shown:
            _draw("\r\033[K")
            self._spin_shown = False

    def _err_line(self, text: str) -> None:
        self._clear_spinner()
        self._end_line()
        click.echo(text, err=True)

    def _wait(self, what: str | None) -> None:
        self._waiting = what
        self._since = time.monotonic()
        if what is None:
            self._clear_spinner()

    async def _spin(self) -> None:
        for frame in _forever_frames():
            await asyncio.sleep(_SPIN_S)
            if self._waiting is None or self._mid_line:
                continue
            elapsed = time.monotonic() - self._since
            line = printable(f"{frame} {self._waiting} {elapsed:.0f}s", one_line=True)
            _draw(f"\r\033[K{line}")
            self._spin_shown = True

    async def _beat(self) -> None:
        since, due = self._since, HEARTBEAT_S
        while True:
            await asyncio.sleep(HEARTBEAT_S / 5)
            if self._since != since:  # a new wait began: count from its start
                since, due = self._since, HEARTBEAT_S
            elapsed = time.monotonic() - since
            if self._waiting is not None and elapsed >= due:
                self._err_line(f"… still {self._waiting} ({elapsed:.0f} s)")
                due += HEARTBEAT_S

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Around the event loop of one run: the spinner (or heartbeat) task, and clean lines
        at the end."""
        self._wait("waiting for the model")
        ticker = self._spin() if self.spinner else self._beat() if self.heartbeat else None
        task = asyncio.ensure_future(ticker) if ticker is not None else None
        try:
            yield
        finally:
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            self._wait(None)
            self._clear_spinner()
            self._end_line()

    # ------------------------------------------------------------------ events

    def on_event(self, event: StreamEvent) -> None:
        if self.as_json:
            data = event_json(event)
            if data is not None:
                click.echo(json_text(json.dumps(data, ensure_ascii=False, default=_jsonable)))
            return
        if event.type == "raw_response_event":
            data = event.data
            if getattr(data, "type", None) == _TEXT_DELTA and data.delta:
                self._wait(None)
                self.streamed.append(data.delta)
                if self.text:
                    click.echo(data.delta, nl=False)
                    self._mid_line = not data.delta.endswith("\n")
            return
        if event.type == "run_item_stream_event":
            self._on_item(event.name, event.item.raw_item)

    def _on_item(self, name: str, item: Item) -> None:
        if name == "message_output_created":
            text = message_text(item)
            if self.text and not self.streamed and text:  # a model that did not stream
                click.echo(text, nl=False)
                self._mid_line = not text.endswith("\n")
            self._last_message = text or "".join(self.streamed)
            self.streamed = []
            self._end_line()
        elif name == "tool_called":
            tool = str(item.get("name", "?"))
            if self.tools:
                self._err_line(f"→ {tool}: {call_summary(tool, str(item.get('arguments', '')))}")
            self._wait(f"running {tool}")
        elif name == "tool_output":
            if self.tools:
                self._err_line(f"  ← {output_summary(item.get('output', ''))}")
            self._wait("waiting for the model")

    def answer_shown(self, final_output: Any) -> bool:
        """Whether the final answer already went to stdout as streamed text."""
        return self.text and self._last_message.strip() == str(final_output).strip()


async def stream_run(
    view: LiveView, agent: Agent, prompt: str, **kwargs: Any
) -> RunResultStreaming:
    """``Runner.run_streamed`` followed by ``view``; returns the finished run (its error, if
    any, is raised). When the caller is cancelled (Ctrl-C), the run is cancelled too and
    awaited, so it is recorded (as ``cancelled``) before the caller's cleanup."""
    streamed = Runner.run_streamed(agent, prompt, **kwargs)
    try:
        async with view.running():
            async for event in streamed.stream_events():
                view.on_event(event)
    except asyncio.CancelledError:
        streamed.cancel()
        with contextlib.suppress(Exception):
            async for _ in streamed.stream_events():
                pass
        raise
    return streamed


def _forever_frames() -> Any:
    index = 0
    while True:
        yield _SPINNER[index % len(_SPINNER)]
        index += 1


def _draw(text: str) -> None:
    """The spinner's own control sequences, on the terminal itself (past the sanitiser that
    every other print goes through: ``_terminal``)."""
    stream = raw(sys.stderr)
    stream.write(text)
    stream.flush()
