"""A local OpenAI-compatible fake server, so tests exercise the real ``openai`` client.

Serves ``POST /v1/responses`` and ``POST /v1/chat/completions`` on 127.0.0.1 (random port) from
a background thread. A *handler* scripts the replies::

    def handler(req: FakeRequest) -> FakeReply:
        if not req.tool_outputs():
            return FakeReply(tool_calls=[("add", {"a": 1, "b": 2}, "call_1")])
        return FakeReply(text="3")

    with FakeOpenAIServer(handler) as server:
        client = AsyncOpenAI(api_key="test", base_url=server.base_url)

The same ``FakeReply`` renders as a valid reply of either API, and as a server-sent-event
stream of either API when the request asks for ``stream: true`` (Responses: ``response.created``
... ``response.output_text.delta`` ... ``response.completed``; Chat Completions: chunks, then
``[DONE]``, with a usage chunk when ``stream_options.include_usage``). ``FakeReply.chunks``
chooses the text deltas (default: the text split after each space). ``GET /v1/models``
lists ``server.models`` (``["gpt-5.4-mini"]`` unless changed; 404 while it is ``None``).
Faults are switched on with ``server.inject(...)`` (HTTP status and message, slow reply,
malformed body) for the next ``times``
requests. Every request is recorded in ``server.requests``; ``server.in_flight`` and
``server.max_in_flight`` count concurrent requests. A handler that raises answers HTTP 400
(not retried) and is recorded in ``server.handler_errors``; the ``fake_openai`` fixture fails
the test when there are any.
"""

from __future__ import annotations

import itertools
import json
import re
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Literal

Api = Literal["responses", "chat"]

_PATHS: dict[str, Api] = {"/v1/responses": "responses", "/v1/chat/completions": "chat"}


@dataclass
class FakeRequest:
    """One request the server received (``headers`` keys are lower case). ``received_at`` is
    ``time.perf_counter()`` when its headers were read (the same clock as the test's, since the
    server runs in the test's process); ``size`` is the body's length in bytes; ``path`` keeps
    the query string."""

    api: Api
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)
    received_at: float = 0.0
    size: int = 0
    path: str = ""

    @property
    def model(self) -> str:
        return str(self.body.get("model", ""))

    @property
    def stream(self) -> bool:
        """Whether the client asked for a server-sent-event stream."""
        return bool(self.body.get("stream"))

    @property
    def items(self) -> list[dict[str, Any]]:
        """Responses ``input`` as a list of items, or Chat ``messages``."""
        if self.api == "chat":
            return list(self.body.get("messages", []))
        value = self.body.get("input", [])
        if isinstance(value, str):
            return [{"role": "user", "content": value}]
        return list(value)

    @property
    def instructions(self) -> str | None:
        """Responses ``instructions``, or the text of the leading chat system message."""
        if self.api == "responses":
            return self.body.get("instructions")
        messages = self.items
        if messages and messages[0].get("role") == "system":
            return _text(messages[0].get("content"))
        return None

    def last_user_text(self) -> str:
        """The text of the last user message ("" when there is none)."""
        for item in reversed(self.items):
            if item.get("role") == "user":
                return _text(item.get("content"))
        return ""

    def tool_names(self) -> list[str]:
        """Names of the function tools offered."""
        names = []
        for tool in self.body.get("tools") or []:
            spec = tool.get("function", tool) if self.api == "chat" else tool
            names.append(spec.get("name", ""))
        return names

    def tools(self) -> list[dict[str, Any]]:
        """The function tools offered, as ``{"name", "description", "parameters", ...}``."""
        tools = self.body.get("tools") or []
        if self.api == "chat":
            return [dict(tool.get("function", {})) for tool in tools]
        return [{k: v for k, v in tool.items() if k != "type"} for tool in tools]

    def json_schema(self) -> dict[str, Any] | None:
        """The JSON-schema response format requested (``name``, ``schema``, ``strict``)."""
        if self.api == "chat":
            fmt = self.body.get("response_format") or {}
            if fmt.get("type") == "json_schema":
                return dict(fmt.get("json_schema", {}))
            return None
        fmt = (self.body.get("text") or {}).get("format") or {}
        if fmt.get("type") == "json_schema":
            return {k: v for k, v in fmt.items() if k != "type"}
        return None

    def wants_json(self) -> bool:
        return self.json_schema() is not None

    def tool_outputs(self) -> dict[str, Any]:
        """Tool outputs sent back, by call id (Responses ``function_call_output`` items, or chat
        ``tool`` messages)."""
        outputs: dict[str, Any] = {}
        for item in self.items:
            if self.api == "chat" and item.get("role") == "tool":
                outputs[item["tool_call_id"]] = item.get("content")
            elif item.get("type") == "function_call_output":
                outputs[item["call_id"]] = item.get("output")
        return outputs

    def tool_calls(self) -> list[tuple[str, str, str]]:
        """Tool calls in the transcript sent, as (name, arguments json, call id)."""
        calls: list[tuple[str, str, str]] = []
        for item in self.items:
            if self.api == "chat":
                for call in item.get("tool_calls") or []:
                    fn = call["function"]
                    calls.append((fn["name"], fn["arguments"], call["id"]))
            elif item.get("type") == "function_call":
                calls.append((item["name"], item["arguments"], item["call_id"]))
        return calls


ToolCall = tuple[str, dict[str, Any] | str, str]


@dataclass
class FakeReply:
    """What the fake model answers: text and/or tool calls, plus usage numbers.

    ``tool_calls`` are (name, arguments as a dict or a JSON string, call id). ``delay_s``
    holds the reply back (the request stays in flight meanwhile). ``chunks`` are the text
    deltas of a streamed reply (they must join to ``text``); ``chunk_delay_s`` paces a
    streamed reply: the server waits that long before each event after the first, so a
    client can show text while the reply is still arriving. ``before_event`` (called in the
    server's thread with each event of a streamed reply before it leaves) lets a test hold
    the stream until the client has shown what it got so far.
    """

    text: str | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)
    input_tokens: int = 10
    output_tokens: int = 5
    reasoning: str | None = None
    delay_s: float = 0.0
    chunks: list[str] | None = None
    chunk_delay_s: float = 0.0
    before_event: Callable[[bytes], None] | None = None
    #: when each event of a paced stream left the server (``time.perf_counter()``)
    sent_at: list[float] = field(default_factory=list)
    #: the answer stopped at its token limit (Responses: ``incomplete``; Chat: ``length``)
    cut_off: bool = False

    def text_chunks(self) -> list[str]:
        if self.text is None:
            return []
        if self.chunks is not None:
            if "".join(self.chunks) != self.text:
                raise ValueError("FakeReply.chunks must join to FakeReply.text")
            return list(self.chunks)
        return re.findall(r"\S+\s*|\s+", self.text) or [""]

    @classmethod
    def json(cls, data: Any, **kwargs: Any) -> FakeReply:
        """A structured-output reply: ``data`` serialised as the message text."""
        return cls(text=json.dumps(data), **kwargs)


Handler = Callable[[FakeRequest], FakeReply]


@dataclass
class _Fault:
    status: int | None
    delay_s: float
    malformed: bool
    retry_after_s: float | None
    times: int
    message: str = "injected fault"


def echo_handler(req: FakeRequest) -> FakeReply:
    """Default handler: answers ``echo: <last user text>``."""
    return FakeReply(text=f"echo: {req.last_user_text()}")


class _Server(ThreadingHTTPServer):
    # A deep listen backlog, like a real model server: with the stdlib's 5, a burst of
    # concurrent requests has SYNs dropped and the client retries them a second later.
    request_queue_size = 128


class FakeOpenAIServer:
    """See the module docstring. ``base_url`` ends with ``/v1``."""

    def __init__(self, handler: Handler = echo_handler) -> None:
        self.handler: Handler = handler
        self.requests: list[FakeRequest] = []
        self.handler_errors: list[str] = []
        self.in_flight = 0
        self.max_in_flight = 0
        #: what ``GET /v1/models`` lists (``None``: that path answers 404, as some servers do);
        #: one model by default, so a CLI run that names none uses it
        self.models: list[str] | None = ["gpt-5.4-mini"]
        #: ``limit_in_flight(n)``: a request arriving while ``n`` are in flight gets HTTP 429
        self.in_flight_limit: int | None = None
        #: the requests answered 429 by that limit (``received_at`` of each, in order)
        self.rate_limited: list[float] = []
        self._faults: list[_Fault] = []
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self) -> FakeOpenAIServer:
        if self._httpd is not None:
            return self
        httpd = _Server(("127.0.0.1", 0), _make_request_handler(self))
        httpd.daemon_threads = True
        self._httpd = httpd
        self._thread = threading.Thread(
            target=httpd.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        httpd, self._httpd = self._httpd, None
        if httpd is None:
            return
        httpd.shutdown()
        httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> FakeOpenAIServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def port(self) -> int:
        if self._httpd is None:
            raise RuntimeError("FakeOpenAIServer is not started")
        return int(self._httpd.server_address[1])

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    # -- scripting ----------------------------------------------------------------------------

    def inject(
        self,
        *,
        status: int | None = None,
        times: int = 1,
        delay_s: float = 0.0,
        malformed: bool = False,
        retry_after_s: float | None = 0.01,
        message: str = "injected fault",
    ) -> None:
        """Apply a fault to the next ``times`` requests (faults queue up in order).

        ``status``: answer that HTTP error instead of calling the handler. ``delay_s``: hold
        the reply back. ``malformed``: answer 200 with a body that is not JSON.
        ``retry_after_s`` is sent as ``retry-after-ms`` with an error status so the client's
        backoff stays short in tests; ``None`` leaves the client's own backoff (~0.5 s+).
        ``message`` is the error body's message (a server's "model not found", say).
        """
        if times < 1:
            raise ValueError("times must be >= 1")
        with self._lock:
            self._faults.append(_Fault(status, delay_s, malformed, retry_after_s, times, message))

    def limit_in_flight(self, limit: int | None) -> None:
        """Answer HTTP 429 (``rate_limit_exceeded``) to a request that arrives while
        ``limit`` others are in flight, like a server with a concurrency quota (``None``: no
        limit). Rejections are recorded in ``rate_limited``."""
        with self._lock:
            self.in_flight_limit = limit

    def clear_faults(self) -> None:
        with self._lock:
            self._faults.clear()

    def reset(self) -> None:
        """Forget recorded requests, faults and the in-flight maximum."""
        with self._lock:
            self.requests.clear()
            self.handler_errors.clear()
            self._faults.clear()
            self.rate_limited.clear()
            self.max_in_flight = self.in_flight

    def requests_for(self, api: Api) -> list[FakeRequest]:
        return [req for req in self.requests if req.api == api]

    # -- serving (runs in the server's threads) -----------------------------------------------

    def _next_fault(self) -> _Fault | None:
        with self._lock:
            if not self._faults:
                return None
            fault = self._faults[0]
            fault.times -= 1
            if fault.times == 0:
                self._faults.pop(0)
            return fault

    def _enter(self, req: FakeRequest) -> bool:
        """Count the request in; ``False`` when the in-flight limit rejects it."""
        with self._lock:
            self.requests.append(req)
            if self.in_flight_limit is not None and self.in_flight >= self.in_flight_limit:
                self.rate_limited.append(req.received_at)
                self.in_flight += 1
                return False
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            return True

    def _leave(self) -> None:
        with self._lock:
            self.in_flight -= 1

    def _answer(
        self, req: FakeRequest, admitted: bool
    ) -> tuple[int, dict[str, str], bytes | Iterable[bytes]]:
        """``_respond``, or HTTP 429 for a request the in-flight limit rejected."""
        if not admitted:
            return 429, {}, _error_body(429, "too many requests in flight")
        return self._respond(req)

    def _respond(self, req: FakeRequest) -> tuple[int, dict[str, str], bytes | Iterable[bytes]]:
        """(status, headers, body) for one request, faults applied."""
        fault = self._next_fault()
        if fault is not None and fault.delay_s:
            time.sleep(fault.delay_s)
        if fault is not None and fault.status is not None:
            headers = {}
            if fault.retry_after_s is not None:
                headers["retry-after-ms"] = str(int(fault.retry_after_s * 1000))
            return fault.status, headers, _error_body(fault.status, fault.message)
        if fault is not None and fault.malformed:
            return 200, {}, b'{"id": "broken", "output": [ this is not json'
        try:
            reply = self.handler(req)
        except Exception:
            self.handler_errors.append(traceback.format_exc())
            return 400, {"x-should-retry": "false"}, _error_body(400, "fake handler raised")
        if reply.delay_s:
            time.sleep(reply.delay_s)
        n = next(self._ids)
        if req.stream:
            events = (
                _sse_responses(req, reply, n)
                if req.api == "responses"
                else _sse_chat(req, reply, n)
            )
            if reply.chunk_delay_s or reply.before_event:
                return 200, {"content-type": "text/event-stream"}, _paced(events, reply)
            return 200, {"content-type": "text/event-stream"}, events
        rendered = (
            _render_responses(req, reply, n)
            if req.api == "responses"
            else _render_chat(req, reply, n)
        )
        return 200, {}, json.dumps(rendered).encode()


def _make_request_handler(server: FakeOpenAIServer) -> type[BaseHTTPRequestHandler]:
    class RequestHandler(BaseHTTPRequestHandler):
        # HTTP/1.0: one request per connection, so no pooled connection outlives a test's loop
        protocol_version = "HTTP/1.0"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            if self.path.split("?", 1)[0] != "/v1/models" or server.models is None:
                self._send(404, {}, _error_body(404, f"unknown path {self.path}"))
                return
            data = [{"id": name, "object": "model", "owned_by": "fake"} for name in server.models]
            body = json.dumps({"object": "list", "data": data}).encode()
            self._send(200, {"content-type": "application/json"}, body)

        def do_POST(self) -> None:
            received_at = time.perf_counter()
            api = _PATHS.get(self.path.split("?", 1)[0])
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            if api is None:
                self._send(404, {}, _error_body(404, f"unknown path {self.path}"))
                return
            try:
                body = json.loads(raw or b"{}")
            except json.JSONDecodeError:
                self._send(400, {}, _error_body(400, "request body is not JSON"))
                return
            headers = {key.lower(): value for key, value in self.headers.items()}
            req = FakeRequest(api, body, headers, received_at, len(raw), self.path)
            admitted = server._enter(req)
            try:
                status, headers, data = server._answer(req, admitted)
            finally:
                server._leave()  # before sending: the client may count on it once it has the reply
            self._send(status, headers, data)

        def _send(
            self, status: int, headers: dict[str, str], data: bytes | Iterable[bytes]
        ) -> None:
            try:
                self.send_response(status)
                headers = {"content-type": "application/json", **headers}
                if isinstance(data, bytes):
                    headers["content-length"] = str(len(data))
                for key, value in headers.items():
                    self.send_header(key, value)
                self.end_headers()
                for chunk in [data] if isinstance(data, bytes) else data:
                    self.wfile.write(chunk)
                    self.wfile.flush()  # a stream's events leave one by one
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (e.g. its timeout fired during a slow reply)

    return RequestHandler


def _paced(events: list[bytes], reply: FakeReply) -> Iterator[bytes]:
    for index, event in enumerate(events):
        if index and reply.chunk_delay_s:
            time.sleep(reply.chunk_delay_s)
        if reply.before_event is not None:
            reply.before_event(event)
        reply.sent_at.append(time.perf_counter())
        yield event


def _error_body(status: int, message: str) -> bytes:
    kind = "rate_limit_exceeded" if status == 429 else "server_error" if status >= 500 else None
    error = {"message": f"{message} (HTTP {status})", "type": kind or "invalid_request_error"}
    return json.dumps({"error": {**error, "param": None, "code": kind}}).encode()


def _arguments(value: dict[str, Any] | str) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _render_responses(req: FakeRequest, reply: FakeReply, n: int) -> dict[str, Any]:
    output: list[dict[str, Any]] = []
    if reply.reasoning is not None:
        output.append(
            {
                "type": "reasoning",
                "id": f"rs_{n}",
                "summary": [{"type": "summary_text", "text": reply.reasoning}],
            }
        )
    if reply.text is not None:
        output.append(
            {
                "type": "message",
                "id": f"msg_{n}",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": reply.text, "annotations": []}],
            }
        )
    for i, (name, args, call_id) in enumerate(reply.tool_calls):
        output.append(
            {
                "type": "function_call",
                "id": f"fc_{n}_{i}",
                "call_id": call_id,
                "name": name,
                "arguments": _arguments(args),
                "status": "completed",
            }
        )
    return {
        "id": f"resp_{n}",
        "object": "response",
        "created_at": int(time.time()),
        "model": req.model,
        "status": "incomplete" if reply.cut_off else "completed",
        "incomplete_details": {"reason": "max_output_tokens"} if reply.cut_off else None,
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": req.body.get("tool_choice", "auto"),
        "tools": req.body.get("tools", []),
        "usage": {
            "input_tokens": reply.input_tokens,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": reply.output_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": reply.input_tokens + reply.output_tokens,
        },
    }


def _sse(event: str | None, data: Any) -> bytes:
    head = f"event: {event}\n" if event else ""
    body = data if isinstance(data, str) else json.dumps(data)
    return f"{head}data: {body}\n\n".encode()


def _sse_responses(req: FakeRequest, reply: FakeReply, n: int) -> list[bytes]:
    """The Responses API's event stream for ``reply``: created, then each output item added,
    its deltas, done, and ``response.completed`` carrying the whole response."""
    final = _render_responses(req, reply, n)
    sequence = itertools.count()
    events: list[bytes] = []

    def emit(kind: str, **fields: Any) -> None:
        events.append(_sse(kind, {"type": kind, "sequence_number": next(sequence), **fields}))

    emit("response.created", response={**final, "status": "in_progress", "output": []})
    for index, item in enumerate(final["output"]):
        if item["type"] == "message":
            emit(
                "response.output_item.added",
                output_index=index,
                item={**item, "status": "in_progress", "content": []},
            )
            part = {"type": "output_text", "text": "", "annotations": []}
            ids = {"item_id": item["id"], "output_index": index, "content_index": 0}
            emit("response.content_part.added", part=part, **ids)
            for delta in reply.text_chunks():
                emit("response.output_text.delta", delta=delta, logprobs=[], **ids)
            emit("response.output_text.done", text=reply.text, logprobs=[], **ids)
            emit("response.content_part.done", part=item["content"][0], **ids)
        elif item["type"] == "function_call":
            emit(
                "response.output_item.added",
                output_index=index,
                item={**item, "arguments": "", "status": "in_progress"},
            )
            ids = {"item_id": item["id"], "output_index": index}
            emit("response.function_call_arguments.delta", delta=item["arguments"], **ids)
            emit(
                "response.function_call_arguments.done",
                arguments=item["arguments"],
                name=item["name"],
                **ids,
            )
        else:
            emit("response.output_item.added", output_index=index, item=item)
        emit("response.output_item.done", output_index=index, item=item)
    emit("response.completed", response=final)
    return events


def _sse_chat(req: FakeRequest, reply: FakeReply, n: int) -> list[bytes]:
    """Chat Completions chunks for ``reply``: role, text deltas, tool-call deltas, the finish
    reason, a usage chunk when asked for, then ``[DONE]``."""
    base = {
        "id": f"chatcmpl-{n}",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": req.model,
    }

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        return _sse(None, {**base, "choices": [choice]})

    events = [chunk({"role": "assistant", "content": ""})]
    if reply.reasoning is not None:
        events.append(chunk({"reasoning_content": reply.reasoning}))
    events.extend(chunk({"content": delta}) for delta in reply.text_chunks())
    for index, (name, args, call_id) in enumerate(reply.tool_calls):
        head = {
            "index": index,
            "id": call_id,
            "type": "function",
            "function": {"name": name, "arguments": ""},
        }
        events.append(chunk({"tool_calls": [head]}))
        text = _arguments(args)
        for piece in (text[: len(text) // 2], text[len(text) // 2 :]):
            events.append(
                chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
            )
    events.append(chunk({}, "tool_calls" if reply.tool_calls else "stop"))
    if (req.body.get("stream_options") or {}).get("include_usage"):
        usage = {
            "prompt_tokens": reply.input_tokens,
            "completion_tokens": reply.output_tokens,
            "total_tokens": reply.input_tokens + reply.output_tokens,
        }
        events.append(_sse(None, {**base, "choices": [], "usage": usage}))
    events.append(_sse(None, "[DONE]"))
    return events


def _render_chat(req: FakeRequest, reply: FakeReply, n: int) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.text}
    if reply.reasoning is not None:
        message["reasoning_content"] = reply.reasoning
    if reply.tool_calls:
        message["tool_calls"] = [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": name, "arguments": _arguments(args)},
            }
            for name, args, call_id in reply.tool_calls
        ]
    return {
        "id": f"chatcmpl-{n}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": req.model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "length"
                if reply.cut_off
                else "tool_calls"
                if reply.tool_calls
                else "stop",
            }
        ],
        "usage": {
            "prompt_tokens": reply.input_tokens,
            "completion_tokens": reply.output_tokens,
            "total_tokens": reply.input_tokens + reply.output_tokens,
        },
    }


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            part.get("text", "") for part in content if isinstance(part, dict) and "text" in part
        )
    return ""
