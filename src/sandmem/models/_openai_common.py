"""What both OpenAI adapters share: the client boundary (error translation) and settings helpers.

Errors of the ``openai`` client are translated here, and only here:

    openai.APITimeoutError      -> ModelRequestError(retryable=True)
    openai.APIConnectionError   -> ModelRequestError(retryable=True)
    openai.APIStatusError       -> ModelRequestError(status_code=..., retryable for 408/409/429/5xx)
    a reply that is not JSON    -> ModelRequestError(retryable=True)

The client's own retries (``max_retries``, exponential backoff, ``Retry-After``) run first; these
errors mean they were exhausted.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

import openai
from openai import AsyncOpenAI

from sandmem._errors import ModelBehaviorError, ModelRequestError, UserError
from sandmem._items import Item, content_text, item_kind
from sandmem._settings import ModelSettings
from sandmem.models import _text_tools
from sandmem.models._base import Model, ModelRequest

#: a client, or a function (plain or async) returning the client to use for this request
ClientSource = AsyncOpenAI | Callable[[], AsyncOpenAI | Awaitable[AsyncOpenAI]]

# ``extra_args`` keys that are request options of the openai client, not body fields
_CLIENT_OPTIONS = frozenset({"extra_headers", "extra_query", "timeout"})
_TOOL_CHOICE_MODES = frozenset({"auto", "required", "none"})


async def resolve_client(
    source: ClientSource, settings: ModelSettings | None = None
) -> AsyncOpenAI:
    """The client for one request; ``settings.retry.max_retries`` (when set) replaces the
    client's retry count for this request only (none when the run loop retries: a policy)."""
    if isinstance(source, AsyncOpenAI):
        client = source
    else:
        made = source()
        client = await made if inspect.isawaitable(made) else made
    retry = settings.retry if settings else None
    retries = None if retry is None else 0 if retry.runner_managed else retry.max_retries
    return client if retries is None else client.with_options(max_retries=retries)


def recover_text_tool_calls(
    output: list[Item], request: ModelRequest, client: AsyncOpenAI
) -> list[Item]:
    """``output`` with tool calls written as text turned into tool calls, when the request
    offered tools and recovery is on for it (``models/_text_tools.py``)."""
    if not request.tools:
        return output
    base_url = getattr(client, "base_url", None)
    if not _text_tools.enabled(request.settings.text_tool_calls, base_url):
        return output
    return _text_tools.recover(output, [tool.name for tool in request.tools])


def check_not_cut_off(output: list[Item], cut_off: bool, model: str, limit: int | None) -> None:
    """Raise ``ModelBehaviorError`` when the answer was cut off at its token limit before it
    said anything usable (no text, no tool call): a silent empty answer would end a run."""
    if not cut_off:
        return
    useful = any(
        item_kind(item) == "function_call"
        or (item_kind(item) == "message" and content_text(item.get("content")).strip())
        for item in output
    )
    if useful:
        return
    where = f"max_tokens={limit}" if limit is not None else "its token limit"
    raise ModelBehaviorError(
        f"model {model!r} used up {where} before answering (reasoning or a runaway answer); "
        "raise ModelSettings(max_tokens=...) or SANDMEM_MAX_TOKENS"
    )


def is_retryable_status(status: int) -> bool:
    return status in (408, 409, 429) or status >= 500


def _status_hint(status: int, model: str) -> str:
    """What to fix after a refused request (a 4xx that trying again would not change)."""
    if status == 401:
        return "the server refused the API key: check OPENAI_API_KEY (and OPENAI_BASE_URL)"
    if status == 403:
        return f"the key may not use {model!r}: check OPENAI_API_KEY and the model name"
    if status == 404:
        return (
            f"the server has no model {model!r} (or OPENAI_BASE_URL is wrong): name a model "
            "it serves with --model / SANDMEM_MODEL"
        )
    return "check the model name, key and request"


@contextmanager
def translated_errors(model: str, api: str) -> Iterator[None]:
    """Turn ``openai`` client errors raised inside the block into ``ModelRequestError``."""
    where = f"{api} request for model {model!r}"
    try:
        yield
    except openai.APITimeoutError as exc:
        raise ModelRequestError(
            f"{where} timed out{_timeout_of(exc)} after the client's retries; a local "
            "server on a CPU can take minutes per answer: raise the timeout in seconds "
            "(--timeout / SANDMEM_TIMEOUT, or OpenAIProvider(timeout=...)) or try again later",
            retryable=True,
            timeout=True,
        ) from exc
    except openai.APIConnectionError as exc:
        raise ModelRequestError(
            f"{where} could not reach the server ({exc}); check OPENAI_BASE_URL and that the "
            "server is running",
            retryable=True,
            network_error=True,
        ) from exc
    except openai.APIStatusError as exc:
        status = exc.status_code
        retryable = is_retryable_status(status)
        hint = "try again later" if retryable else _status_hint(status, model)
        raise ModelRequestError(
            f"{where} failed with HTTP {status}: {exc.message}; {hint}",
            status_code=status,
            retryable=retryable,
            retry_after=_retry_after(exc.response.headers),
        ) from exc
    except json.JSONDecodeError as exc:
        raise ModelRequestError(
            f"{where} got a reply that is not valid JSON ({exc}); is the server OpenAI-compatible?",
            retryable=True,
        ) from exc


def _timeout_of(exc: openai.APITimeoutError) -> str:
    """`` at N s``: the read timeout the request had, when the client says ("" otherwise)."""
    try:
        timeout = exc.request.extensions.get("timeout") or {}
        read = timeout.get("read") if isinstance(timeout, dict) else None
    except Exception:  # a client whose request carries no extensions
        return ""
    return f" at {read:g} s" if isinstance(read, int | float) else ""


def _retry_after(headers: Any) -> float | None:
    """The wait a server asked for: ``retry-after-ms``, or ``retry-after`` in seconds."""
    for name, scale in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            return max(float(value) / scale, 0.0)
        except ValueError:
            continue  # an HTTP date: left to the backoff
    return None


def split_extra_args(extra_args: dict[str, Any] | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """``ModelSettings.extra_args`` as (client request options, extra body fields)."""
    options: dict[str, Any] = {}
    body: dict[str, Any] = {}
    for key, value in (extra_args or {}).items():
        if key in _CLIENT_OPTIONS:
            options[key] = value
        elif key == "extra_body" and isinstance(value, dict):
            body.update(value)
        else:
            body[key] = value
    return options, body


#: ``create`` arguments kept as named arguments by ``raw_body_call``
_NAMED = frozenset({"model", "stream", *_CLIENT_OPTIONS})


def raw_body_call(kwargs: dict[str, Any], *, required: tuple[str, ...] = ()) -> dict[str, Any]:
    """``kwargs`` of a ``create`` call with every body field moved into ``extra_body``.

    The ``openai`` client walks each named argument against its typed-dict definitions before
    sending (an identity for the plain JSON we build, but ~1 ms per history item, on the event
    loop: hundreds of milliseconds for a long transcript); ``extra_body`` is merged into the
    JSON body as it is (its keys win over named ones). The body sent is the same either way.
    Arguments the client insists on (``required``, e.g. Chat's ``messages``) are passed named
    as empty lists, and overridden by their real value in ``extra_body``.
    """
    call: dict[str, Any] = {key: value for key, value in kwargs.items() if key in _NAMED}
    call.update({key: [] for key in required if key in kwargs})
    body = {key: value for key, value in kwargs.items() if key not in _NAMED}
    body.update(body.pop("extra_body", None) or {})
    call["extra_body"] = body
    return call


def apply_extra_args(kwargs: dict[str, Any], settings: ModelSettings) -> None:
    """Merge the settings' ``extra_headers`` / ``extra_query`` / ``extra_body`` and
    ``extra_args`` into the keyword arguments of a ``create`` call (in place)."""
    options, body = split_extra_args(settings.extra_args)
    for name in ("extra_headers", "extra_query"):
        value = getattr(settings, name)
        if value:
            options[name] = {**value, **options.get(name, {})}
    if settings.extra_body:
        body = {**settings.extra_body, **body}
    kwargs.update(options)
    if body:
        kwargs["extra_body"] = body


def tool_choice(choice: str | dict[str, Any], *, chat: bool) -> str | dict[str, Any]:
    """``ModelSettings.tool_choice`` in the API's form: a mode, a tool name, or a dict as is."""
    if isinstance(choice, dict) or choice in _TOOL_CHOICE_MODES:
        return choice
    if chat:
        return {"type": "function", "function": {"name": choice}}
    return {"type": "function", "name": choice}


def set_if(kwargs: dict[str, Any], **values: Any) -> None:
    """Set each keyword whose value is not ``None``."""
    kwargs.update({key: value for key, value in values.items() if value is not None})


class OpenAIModelBase(Model):
    """What both OpenAI models share: the model name and where the client comes from.

    ``client`` is an ``AsyncOpenAI`` client, or a function (plain or async) returning the
    client to use for each request (the provider passes its async ``client``, so clients are
    created lazily, off the event loop, one per event loop). ``openai_client=`` is the
    reference's keyword for the same argument.
    """

    def __init__(
        self,
        model: str,
        client: ClientSource | None = None,
        *,
        openai_client: ClientSource | None = None,
    ) -> None:
        if client is not None and openai_client is not None and client is not openai_client:
            raise UserError("pass the client once: as client or as openai_client")
        chosen = client if client is not None else openai_client
        if chosen is None:
            raise UserError(
                f"{type(self).__name__} needs a client: {type(self).__name__}(model, "
                "openai_client=AsyncOpenAI(...))"
            )
        self.model = model
        self.name = model
        self._client: ClientSource = chosen

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.model!r})"
