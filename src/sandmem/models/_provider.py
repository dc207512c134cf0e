"""``OpenAIProvider``: resolves model names to OpenAI models, configured from arguments or env.

Environment (read when a request needs a client, so a provider can be built before it is set):

- ``OPENAI_API_KEY`` / ``OPENAI_BASE_URL`` — credentials and server; a local server given by
  ``OPENAI_BASE_URL`` needs no key;
- ``SANDMEM_OPENAI_API`` — ``responses`` (default) or ``chat_completions``;
- ``SANDMEM_MODEL`` — the model used when an agent names none (default ``gpt-5.4-mini``);
- ``SANDMEM_TIMEOUT`` / ``SANDMEM_MAX_RETRIES`` — seconds per HTTP request (default 60) and
  the client's retry count (default 3), when the provider is given none.

Requests are logged to the ``sandmem.http`` logger at DEBUG level (method, URL, status, time;
never a header, so never the key) when that level is enabled as the client is created.

Clients are the expensive part: building an ``AsyncOpenAI`` client loads the TLS certificates
(tens of milliseconds of blocking work) and each client keeps its own connection pool. So a
provider creates **one client per event loop and configuration**, lazily, in a worker thread
(the event loop keeps running meanwhile), and every model it hands out reuses it. A client is
closed by ``aclose()``, or when its event loop shuts down (``asyncio.run`` and
``Runner.run_sync`` do that on exit).

``default_provider()`` is the provider a run or a memory flush uses when none is configured:
one per process, so every run and every flush in the process shares its client.

The ``openai`` package is imported only when a client is created.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
import weakref
from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING, Any, Literal

from sandmem._errors import UserError
from sandmem.models._base import Model, ModelProvider

if TYPE_CHECKING:
    from openai import AsyncOpenAI

ApiName = Literal["responses", "chat_completions"]

API_NAMES: tuple[ApiName, ...] = ("responses", "chat_completions")
DEFAULT_MODEL = "gpt-5.4-mini"
#: sent as the key to servers given by base URL only (local servers ignore it)
PLACEHOLDER_API_KEY = "sandmem-no-key"

DEFAULT_TIMEOUT_S = 60.0
DEFAULT_MAX_RETRIES = 3
#: (api key, base URL, timeout, retries, request log on) a client was built for
_ClientKey = tuple[str | None, str | None, float, int, bool]
http_logger = logging.getLogger("sandmem.http")


class _LoopClients:
    """The clients of one provider on one event loop, and their creation in progress."""

    def __init__(self) -> None:
        self.clients: dict[_ClientKey, AsyncOpenAI] = {}
        self.creating: dict[_ClientKey, asyncio.Future[AsyncOpenAI]] = {}
        self.closer: AsyncGenerator[None, None] | None = None

    async def close(self) -> None:
        clients, self.clients = list(self.clients.values()), {}
        for client in clients:
            await client.close()


class OpenAIProvider(ModelProvider):
    """Models from an OpenAI or OpenAI-compatible server.

    Arguments left ``None`` fall back to the environment (see the module docstring).
    ``timeout`` (seconds) bounds each HTTP request; ``max_retries`` is the ``openai`` client's
    retry count for 408/409/429/5xx and connection errors, with exponential backoff.

    Every model of a provider shares one ``AsyncOpenAI`` client per event loop (an ``asyncio``
    client cannot be shared across loops, and ``Runner.run_sync`` starts a loop per call),
    created on first use in a worker thread; ``openai_client`` supplies a ready client instead,
    used as is (and never closed by the provider).
    """

    def __init__(
        self,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        api: ApiName | None = None,
        timeout: float | None = None,
        max_retries: int | None = None,
        openai_client: AsyncOpenAI | None = None,
    ) -> None:
        if api is not None:
            _check_api(api, source="api")
        self._api_key = api_key
        self._base_url = base_url
        self._api = api
        self.timeout = timeout
        self.max_retries = max_retries
        self._fixed_client = openai_client
        self._loops: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopClients] = (
            weakref.WeakKeyDictionary()
        )

    @property
    def timeout(self) -> float:
        """Seconds per HTTP request: the argument, else ``SANDMEM_TIMEOUT``, else 60."""
        if self._timeout is not None:
            return self._timeout
        return _env_number("SANDMEM_TIMEOUT", DEFAULT_TIMEOUT_S, float, minimum=None)

    @timeout.setter
    def timeout(self, value: float | None) -> None:
        if value is not None and not value > 0:
            raise UserError(f"timeout must be positive seconds, got {value!r}")
        self._timeout = value

    @property
    def max_retries(self) -> int:
        """The client's retries: the argument, else ``SANDMEM_MAX_RETRIES``, else 3."""
        if self._max_retries is not None:
            return self._max_retries
        return int(_env_number("SANDMEM_MAX_RETRIES", DEFAULT_MAX_RETRIES, int, minimum=0))

    @max_retries.setter
    def max_retries(self, value: int | None) -> None:
        if value is not None and value < 0:
            raise UserError(f"max_retries must be >= 0, got {value!r}")
        self._max_retries = value

    @property
    def api(self) -> ApiName:
        """The API used for new models: the ``api`` argument, else ``SANDMEM_OPENAI_API``."""
        if self._api is not None:
            return self._api
        value = os.environ.get("SANDMEM_OPENAI_API", "").strip()
        if not value:
            return "responses"
        return _check_api(value, source="SANDMEM_OPENAI_API")

    def get_model(self, name: str | None) -> Model:
        from sandmem.models.openai_chat import OpenAIChatCompletionsModel
        from sandmem.models.openai_responses import OpenAIResponsesModel

        model = name or model_from_env() or DEFAULT_MODEL
        self._start_client()
        if self.api == "chat_completions":
            return OpenAIChatCompletionsModel(model, self.client)
        return OpenAIResponsesModel(model, self.client)

    async def client(self) -> AsyncOpenAI:
        """The client for the running event loop, created in a worker thread on first use
        (concurrent first callers share one creation)."""
        if self._fixed_client is not None:
            return self._fixed_client
        key = self._client_key()
        slot = self._slot()
        client = slot.clients.get(key)
        if client is not None:
            return client
        client = await asyncio.shield(self._creation(slot, key))
        slot.clients.setdefault(key, client)
        return slot.clients[key]

    def _creation(self, slot: _LoopClients, key: _ClientKey) -> asyncio.Future[AsyncOpenAI]:
        creating = slot.creating.get(key)
        if creating is None:
            creating = asyncio.ensure_future(asyncio.to_thread(self._new_client, key))
            slot.creating[key] = creating
            creating.add_done_callback(lambda done: _settle(slot, key, done))
        return creating

    def _start_client(self) -> None:
        """Begin creating the running loop's client in the background (when there is a loop,
        a configuration and no client yet), so it is ready, or nearly, by the first request:
        a run asks for its model before its capabilities prepare."""
        if self._fixed_client is not None:
            return
        try:
            asyncio.get_running_loop()
            key = self._client_key()
        except (RuntimeError, UserError):
            return  # no loop, or not configured: the first request creates it (or says why)
        slot = self._slot()
        if key not in slot.clients:
            future = self._creation(slot, key)
            future.add_done_callback(_consume_error)

    def _client(self) -> AsyncOpenAI:
        """The client for the running event loop, created here (blocking) when missing."""
        if self._fixed_client is not None:
            return self._fixed_client
        key = self._client_key()
        slot = self._slot()
        if key not in slot.clients:
            slot.clients[key] = self._new_client(key)
        return slot.clients[key]

    async def aclose(self) -> None:
        """Close the clients created for the running event loop, if any."""
        slot = self._loops.pop(asyncio.get_running_loop(), None)
        if slot is not None:
            await slot.close()

    def _slot(self) -> _LoopClients:
        loop = asyncio.get_running_loop()
        slot = self._loops.get(loop)
        if slot is None:
            slot = _LoopClients()
            self._loops[loop] = slot
            slot.closer = _closer(slot)
        return slot

    def _client_key(self) -> _ClientKey:
        api_key = self._api_key or os.environ.get("OPENAI_API_KEY") or None
        base_url = self._base_url or os.environ.get("OPENAI_BASE_URL") or None
        if api_key is None and base_url is None:
            raise UserError(
                "no OpenAI server configured: set OPENAI_API_KEY (for api.openai.com) or "
                "OPENAI_BASE_URL (for an OpenAI-compatible server such as Ollama or vLLM), "
                "or pass api_key/base_url to OpenAIProvider"
            )
        debug = http_logger.isEnabledFor(logging.DEBUG)
        return api_key, base_url, self.timeout, self.max_retries, debug

    def _new_client(self, key: _ClientKey) -> AsyncOpenAI:
        from openai import AsyncOpenAI

        api_key, base_url, timeout, max_retries, debug = key
        return AsyncOpenAI(
            api_key=api_key or PLACEHOLDER_API_KEY,
            base_url=base_url,
            timeout=timeout,
            max_retries=max_retries,
            http_client=_logging_http_client(timeout) if debug else None,
        )


def _logging_http_client(timeout: float) -> Any:
    """The ``openai`` default HTTP client with hooks that log each request on
    ``sandmem.http``: method, URL, status and time (never headers: the key is one)."""
    import openai

    # openai 3.x sends through httpx2 and names its default client accordingly; the
    # 1.x line (our declared minimum) has only the httpx one.
    client_class = (
        getattr(openai, "DefaultAsyncHttpx2Client", None) or openai.DefaultAsyncHttpxClient
    )
    started: dict[int, float] = {}

    async def on_request(request: Any) -> None:
        started[id(request)] = time.monotonic()
        http_logger.debug("%s %s", request.method, request.url)

    async def on_response(response: Any) -> None:
        request = response.request
        took = time.monotonic() - started.pop(id(request), time.monotonic())
        http_logger.debug(
            "%s %s -> HTTP %s in %.2f s", request.method, request.url, response.status_code, took
        )

    return client_class(
        timeout=timeout, event_hooks={"request": [on_request], "response": [on_response]}
    )


def _env_number(
    name: str, default: float, kind: type[float] | type[int], *, minimum: float | None
) -> float:
    """A positive (or ``>= minimum``) number from the environment, else ``default``."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = kind(raw)
    except ValueError:
        value = None
    ok = value is not None and (value > 0 if minimum is None else value >= minimum)
    if not ok:
        need = "a positive number of seconds" if minimum is None else f"an integer >= {minimum}"
        raise UserError(f"{name} must be {need}, got {raw!r}")
    assert value is not None
    return value


async def _close_at_loop_shutdown(slot: _LoopClients) -> AsyncGenerator[None, None]:
    try:
        yield
    finally:
        await slot.close()


def _settle(slot: _LoopClients, key: _ClientKey, done: asyncio.Future[AsyncOpenAI]) -> None:
    """A finished creation: its client becomes the loop's (unless one is there already)."""
    slot.creating.pop(key, None)
    if not done.cancelled() and done.exception() is None:
        slot.clients.setdefault(key, done.result())


def _consume_error(future: asyncio.Future[AsyncOpenAI]) -> None:
    """A background creation's error is raised again by the request that awaits it; mark it
    retrieved here so an unawaited one is not logged as never retrieved."""
    if not future.cancelled():
        future.exception()


def _closer(slot: _LoopClients) -> AsyncGenerator[None, None]:
    """An async generator, started on the running loop and parked at its ``yield``: the loop
    finalises the generators started on it in ``shutdown_asyncgens()`` (which ``asyncio.run``
    calls on exit), and this one's ``finally`` closes the loop's clients then. Its first step
    has no await, so it is taken here synchronously."""
    closer = _close_at_loop_shutdown(slot)
    step = closer.__anext__()  # the loop registers the generator on this first iteration
    try:
        step.send(None)
    except StopIteration:
        pass
    return closer


_DEFAULT_PROVIDER: OpenAIProvider | None = None


def default_provider() -> OpenAIProvider:
    """The process's shared ``OpenAIProvider()``, used by runs and memory flushes that are
    given no model provider (so they share its clients). Configured from the environment."""
    global _DEFAULT_PROVIDER
    if _DEFAULT_PROVIDER is None:
        _DEFAULT_PROVIDER = OpenAIProvider()
    return _DEFAULT_PROVIDER


def model_from_env() -> str | None:
    """The model ``SANDMEM_MODEL`` names (``None`` when unset or blank): the one reader of it."""
    return os.environ.get("SANDMEM_MODEL", "").strip() or None


def _check_api(value: str, *, source: str) -> ApiName:
    if value not in API_NAMES:
        allowed = " or ".join(repr(name) for name in API_NAMES)
        raise UserError(f"{source} must be {allowed}, got {value!r}")
    return value
