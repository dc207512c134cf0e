"""MCP servers an agent takes tools from (``Agent(mcp_servers=[...])``), through the official
``mcp`` SDK (``pip install 'sandmem[mcp]'``; imported when a server connects).

- ``MCPServerStdio(params)`` starts a server process and talks to it over stdin/stdout;
  ``MCPServerStreamableHttp(params)`` talks to a Streamable HTTP endpoint.
- You own a server's lifetime, as in the reference SDK: ``async with server:`` (or
  ``connect()`` ... ``cleanup()``, in one task) around the runs that use it. ``cleanup`` closes
  the session, and for stdio ends the process; a server can connect again afterwards.
- ``list_tools`` asks the server for its tools (every page), keeps those its ``tool_filter``
  allows, and with ``cache_tools_list=True`` asks only once per connection. ``call_tool`` sends
  one call. Both retry ``max_retry_attempts`` times with exponential backoff.

The tools an agent sees, one run at a time, are built from these in ``agent/_mcp_tools.py``.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import inspect
import logging
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import (
    TYPE_CHECKING,
    Any,
    ClassVar,
    Generic,
    Literal,
    NotRequired,
    TypedDict,
    TypeVar,
    cast,
)

from sandmem._errors import MCPServerError, UserError
from sandmem._extras import require
from sandmem.agent._context import RunContextWrapper

if TYPE_CHECKING:
    from mcp import ClientSession
    from mcp.types import CallToolResult, Tool

    from sandmem.agent._agent import Agent
    from sandmem.agent._tools import ToolErrorFunction

logger = logging.getLogger("sandmem.mcp")
T = TypeVar("T")
#: ``failure_error_function`` left unset: the agent's ``mcp_config`` or the default decides
UNSET: Any = object()


@dataclass
class ToolFilterContext:
    """What a callable ``tool_filter`` gets besides the tool: the run's context, the agent
    asking and the server's name."""

    run_context: RunContextWrapper[Any]
    agent: Agent
    server_name: str


class ToolFilterStatic(TypedDict, total=False):
    """A fixed filter: only ``allowed_tool_names`` (when given), never ``blocked_tool_names``."""

    allowed_tool_names: list[str]
    blocked_tool_names: list[str]


#: ``(context, tool) -> bool`` (may be async): whether the agent sees ``tool``
ToolFilterCallable = Callable[[ToolFilterContext, Any], bool | Awaitable[bool]]
ToolFilter = ToolFilterCallable | ToolFilterStatic | None


def create_static_tool_filter(
    allowed_tool_names: list[str] | None = None, blocked_tool_names: list[str] | None = None
) -> ToolFilterStatic | None:
    """A ``ToolFilterStatic`` from an allow list and a block list (``None`` when neither)."""
    if allowed_tool_names is None and blocked_tool_names is None:
        return None
    found: ToolFilterStatic = {}
    if allowed_tool_names is not None:
        found["allowed_tool_names"] = list(allowed_tool_names)
    if blocked_tool_names is not None:
        found["blocked_tool_names"] = list(blocked_tool_names)
    return found


class MCPServerStdioParams(TypedDict):
    """How to start a stdio server: ``command`` and its ``args``; ``env`` is added to the MCP
    SDK's default environment (``PATH``, ``HOME``, ... — no credentials unless you pass them);
    ``cwd``; the text ``encoding`` and its error handler."""

    command: str
    args: NotRequired[list[str]]
    env: NotRequired[dict[str, str]]
    cwd: NotRequired[str | Path]
    encoding: NotRequired[str]
    encoding_error_handler: NotRequired[Literal["strict", "ignore", "replace"]]


class MCPServerStreamableHttpParams(TypedDict):
    """Where a Streamable HTTP server is: ``url``, extra ``headers``, the request ``timeout``
    (seconds, default 5), the stream's ``sse_read_timeout`` (default 300), whether to end the
    server's session on close (``terminate_on_close``, default true), an ``auth`` handler or a
    ``httpx_client_factory(headers=, timeout=, auth=)`` for the MCP SDK's HTTP client."""

    url: str
    headers: NotRequired[dict[str, str]]
    timeout: NotRequired[timedelta | float]
    sse_read_timeout: NotRequired[timedelta | float]
    terminate_on_close: NotRequired[bool]
    httpx_client_factory: NotRequired[Callable[..., Any]]
    auth: NotRequired[Any]


def _refuse_unsupported(**given: Any) -> None:
    """The reference's options that need features sandmem lacks (approvals, guardrails, ...)."""
    if given.pop("require_approval", None) not in (None, "never"):
        raise UserError(
            "MCP servers' require_approval is not supported: sandmem has no human-in-the-loop "
            "approval (see docs/porting.md); leave it unset"
        )
    used = sorted(name for name, value in given.items() if value)
    if used:
        raise UserError(f"MCP servers do not support {used} in sandmem; leave them unset")


def _seconds(value: timedelta | float | None, default: float) -> float:
    if value is None:
        return default
    return value.total_seconds() if isinstance(value, timedelta) else float(value)


class MCPServer(abc.ABC):
    """An MCP server whose tools an agent uses. Subclasses say how to reach it
    (``create_streams``) and what it is called (``name``)."""

    def __init__(
        self,
        *,
        cache_tools_list: bool = False,
        client_session_timeout_seconds: float | None = 5,
        tool_filter: ToolFilter = None,
        use_structured_content: bool = False,
        max_retry_attempts: int = 0,
        retry_backoff_seconds_base: float = 1.0,
        retry_backoff_seconds_max: float | None = None,
        message_handler: Callable[..., Any] | None = None,
        failure_error_function: ToolErrorFunction | None = UNSET,
        max_list_pages: int | None = None,
    ) -> None:
        timeout = client_session_timeout_seconds
        if timeout is not None and not (isinstance(timeout, int | float) and timeout >= 0):
            raise UserError("client_session_timeout_seconds must be a number >= 0 or None")
        if max_retry_attempts < 0 or retry_backoff_seconds_base < 0:
            raise UserError("max_retry_attempts and retry_backoff_seconds_base must be >= 0")
        if max_list_pages is not None and max_list_pages < 1:
            raise UserError("max_list_pages must be at least 1 (or None for no limit)")
        self.cache_tools_list = cache_tools_list
        self.client_session_timeout_seconds = timeout or None
        self.tool_filter = tool_filter
        self.use_structured_content = use_structured_content
        self.max_retry_attempts = max_retry_attempts
        self.retry_backoff_seconds_base = retry_backoff_seconds_base
        self.retry_backoff_seconds_max = retry_backoff_seconds_max
        self.message_handler = message_handler
        #: how a failed call of this server's tools reads to the model (``None``: it fails the
        #: run); ``UNSET``: the agent's ``mcp_config`` or the default decides
        self.failure_error_function = failure_error_function
        self.max_list_pages = max_list_pages
        self.session: ClientSession | None = None
        self._stack: contextlib.AsyncExitStack | None = None
        self._tools: list[Tool] | None = None

    @property
    @abc.abstractmethod
    def name(self) -> str:
        """A readable name (in errors and logs)."""

    @abc.abstractmethod
    def create_streams(self) -> AbstractAsyncContextManager[Any]:
        """The MCP SDK transport context manager (yields the read and write streams)."""

    async def connect(self) -> None:
        """Start or reach the server and initialise an MCP session (``MCPServerError`` when
        that fails; nothing is left running then)."""
        mcp = require("mcp", "mcp")
        if self.session is not None:
            return
        stack = contextlib.AsyncExitStack()
        try:
            streams = await stack.enter_async_context(self.create_streams())
            session = await stack.enter_async_context(
                mcp.ClientSession(
                    streams[0],
                    streams[1],
                    read_timeout_seconds=self.client_session_timeout_seconds,
                    message_handler=self.message_handler,
                )
            )
            await session.initialize()
        except BaseException as exc:
            cause = await _close_after_failure(stack, exc)
            if not isinstance(cause, Exception) or isinstance(cause, UserError):
                raise
            raise MCPServerError(
                f"could not connect to MCP server {self.name!r}: {_describe(cause)}",
                server=self.name,
            ) from cause
        self._stack, self.session = stack, session

    async def cleanup(self) -> None:
        """Close the session (and end a stdio server's process). Errors while closing are
        logged, not raised: the server may already be gone."""
        stack, self._stack, self.session, self._tools = self._stack, None, None, None
        if stack is None:
            return
        try:
            await stack.aclose()
        except Exception as exc:
            logger.warning("MCP server %r did not close cleanly: %s", self.name, _describe(exc))

    async def __aenter__(self) -> MCPServer:
        await self.connect()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.cleanup()

    def invalidate_tools_cache(self) -> None:
        """Forget the cached tool list (``cache_tools_list=True``): the next run asks again."""
        self._tools = None

    def _connected(self) -> ClientSession:
        if self.session is None:
            raise UserError(
                f"MCP server {self.name!r} is not connected: use `async with server:` (or "
                "`await server.connect()`) around the runs of the agents that use it"
            )
        return self.session

    async def list_tools(
        self, run_context: RunContextWrapper[Any] | None = None, agent: Agent | None = None
    ) -> list[Tool]:
        """The server's tools that ``tool_filter`` allows (a callable filter needs
        ``run_context`` and ``agent``)."""
        session = self._connected()
        tools = self._tools if self.cache_tools_list else None
        if tools is None:
            tools = await self._retrying("list tools", lambda: self._all_pages(session))
            if self.cache_tools_list:
                self._tools = tools
        return await self._filtered(tools, run_context, agent)

    async def _all_pages(self, session: ClientSession) -> list[Tool]:
        from mcp.types import PaginatedRequestParams

        tools: list[Tool] = []
        cursor: str | None = None
        seen: set[str] = set()
        for page in range(1, (self.max_list_pages or 1_000_000) + 1):
            params = PaginatedRequestParams(cursor=cursor) if cursor else None
            result = await session.list_tools(params=params)
            tools.extend(result.tools)
            cursor = result.next_cursor
            if not cursor:
                return tools
            if cursor in seen:
                raise MCPServerError(
                    f"MCP server {self.name!r} repeated a tool-list cursor", server=self.name
                )
            seen.add(cursor)
            if page == self.max_list_pages:
                break
        raise UserError(
            f"MCP server {self.name!r} has more than max_list_pages={self.max_list_pages} pages "
            "of tools; raise max_list_pages"
        )

    async def _filtered(
        self, tools: list[Tool], run_context: RunContextWrapper[Any] | None, agent: Agent | None
    ) -> list[Tool]:
        rule = self.tool_filter
        if rule is None:
            return list(tools)
        if isinstance(rule, dict):
            allowed, blocked = rule.get("allowed_tool_names"), rule.get("blocked_tool_names", [])
            return [
                t
                for t in tools
                if (allowed is None or t.name in allowed) and t.name not in (blocked or [])
            ]
        if run_context is None or agent is None:
            raise UserError(
                f"MCP server {self.name!r} has a callable tool_filter: list_tools needs "
                "run_context and agent"
            )
        context = ToolFilterContext(run_context, agent, self.name)
        kept = []
        for tool in tools:
            verdict = rule(context, tool)
            if inspect.isawaitable(verdict):
                verdict = await verdict
            if verdict:
                kept.append(tool)
        return kept

    async def call_tool(
        self, tool_name: str, arguments: dict[str, Any] | None, meta: dict[str, Any] | None = None
    ) -> CallToolResult:
        """Call one tool of the server (``MCPServerError`` when the call fails)."""
        session = self._connected()
        return await self._retrying(
            f"call tool {tool_name!r}",
            lambda: session.call_tool(tool_name, arguments or {}, meta=cast(Any, meta)),
        )

    async def _retrying(self, what: str, request: Callable[[], Awaitable[T]]) -> T:
        for attempt in range(self.max_retry_attempts + 1):
            try:
                return await request()
            except Exception as exc:
                if attempt == self.max_retry_attempts:
                    raise MCPServerError(
                        f"MCP server {self.name!r} failed to {what}: {_describe(exc)}",
                        server=self.name,
                    ) from exc
                delay = self.retry_backoff_seconds_base * 2**attempt
                if self.retry_backoff_seconds_max is not None:
                    delay = min(delay, self.retry_backoff_seconds_max)
                logger.info("MCP server %r: %s failed; retrying in %.1f s", self.name, what, delay)
                await asyncio.sleep(delay)
        raise AssertionError("unreachable")


async def _close_after_failure(
    stack: contextlib.AsyncExitStack, exc: BaseException
) -> BaseException:
    """Close what a failed ``connect`` opened; return the real cause of the failure. A
    transport's task group that failed (e.g. connection refused) cancels the request waiting
    on it, so the waiter sees ``CancelledError`` while the error comes out of closing."""
    try:
        await stack.aclose()
    except Exception as closing:
        if isinstance(exc, asyncio.CancelledError):
            return closing
    return exc


def _describe(exc: BaseException) -> str:
    """One line for an error, looking inside exception groups (anyio task groups)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {exc}"


P = TypeVar("P", MCPServerStdioParams, MCPServerStreamableHttpParams)


class _ParamsServer(MCPServer, Generic[P]):
    """A server made from transport ``params`` with the reference's constructor (positional
    order included). The options of the reference that need approvals, guardrails or tool
    metadata hooks are refused when set."""

    #: the ``params`` key a server cannot do without, and how its default name starts
    _required: ClassVar[str]
    _kind: ClassVar[str]

    def __init__(
        self,
        params: P,
        cache_tools_list: bool = False,
        name: str | None = None,
        client_session_timeout_seconds: float | None = 5,
        tool_filter: ToolFilter = None,
        use_structured_content: bool = False,
        max_retry_attempts: int = 0,
        retry_backoff_seconds_base: float = 1.0,
        message_handler: Callable[..., Any] | None = None,
        require_approval: Any = None,
        failure_error_function: ToolErrorFunction | None = UNSET,
        tool_meta_resolver: Any = None,
        custom_data_extractor: Any = None,
        retry_backoff_seconds_max: float | None = None,
        *,
        tool_input_guardrails: list[Any] | None = None,
        tool_output_guardrails: list[Any] | None = None,
        max_list_pages: int | None = None,
    ) -> None:
        _refuse_unsupported(
            require_approval=require_approval,
            tool_meta_resolver=tool_meta_resolver,
            custom_data_extractor=custom_data_extractor,
            tool_input_guardrails=tool_input_guardrails,
            tool_output_guardrails=tool_output_guardrails,
        )
        super().__init__(
            cache_tools_list=cache_tools_list,
            client_session_timeout_seconds=client_session_timeout_seconds,
            tool_filter=tool_filter,
            use_structured_content=use_structured_content,
            max_retry_attempts=max_retry_attempts,
            retry_backoff_seconds_base=retry_backoff_seconds_base,
            retry_backoff_seconds_max=retry_backoff_seconds_max,
            message_handler=message_handler,
            failure_error_function=failure_error_function,
            max_list_pages=max_list_pages,
        )
        required = params.get(self._required) if isinstance(params, dict) else None
        if not required:
            raise UserError(
                f"{type(self).__name__} needs params={{{self._required!r}: ...}} (a dict)"
            )
        self.params: P = params
        self._name = name or f"{self._kind}: {required}"

    @property
    def name(self) -> str:
        return self._name


class MCPServerStdio(_ParamsServer[MCPServerStdioParams]):
    """An MCP server started as a subprocess and reached over stdio (see ``MCPServer`` for
    the options; ``name`` defaults to ``stdio: <command>``)."""

    _required, _kind = "command", "stdio"

    def create_streams(self) -> AbstractAsyncContextManager[Any]:
        mcp = require("mcp", "mcp")
        params = mcp.StdioServerParameters(
            command=self.params["command"],
            args=list(self.params.get("args", [])),
            env=self.params.get("env"),
            cwd=self.params.get("cwd"),
            encoding=self.params.get("encoding", "utf-8"),
            encoding_error_handler=self.params.get("encoding_error_handler", "strict"),
        )
        stream: AbstractAsyncContextManager[Any] = mcp.stdio_client(params)
        return stream


class MCPServerStreamableHttp(_ParamsServer[MCPServerStreamableHttpParams]):
    """An MCP server reached over Streamable HTTP (see ``MCPServer`` for the options;
    ``name`` defaults to ``streamable_http: <url>``)."""

    _required, _kind = "url", "streamable_http"

    @contextlib.asynccontextmanager
    async def _streams(self) -> Any:
        from mcp.client.streamable_http import streamable_http_client

        httpx2 = require("httpx2", "mcp")
        params = self.params
        headers, auth = params.get("headers"), params.get("auth")
        timeout = httpx2.Timeout(
            _seconds(params.get("timeout"), 5.0),
            read=_seconds(params.get("sse_read_timeout"), 300.0),
        )
        factory = params.get("httpx_client_factory")
        if factory is not None:
            client = factory(headers=headers, timeout=timeout, auth=auth)
        else:
            client = httpx2.AsyncClient(headers=headers, timeout=timeout, auth=auth)
        async with (
            client,
            streamable_http_client(
                params["url"],
                http_client=client,
                terminate_on_close=params.get("terminate_on_close", True),
            ) as streams,
        ):
            yield streams

    def create_streams(self) -> AbstractAsyncContextManager[Any]:
        stream: AbstractAsyncContextManager[Any] = self._streams()
        return stream
