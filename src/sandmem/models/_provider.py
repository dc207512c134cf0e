"""``OpenAIProvider``: resolves model names to OpenAI models, configured from arguments or env.

Environment (read when a model is first needed, so a provider can be built before it is set):

- ``OPENAI_API_KEY`` / ``OPENAI_BASE_URL`` — credentials and server; a local server given by
  ``OPENAI_BASE_URL`` needs no key;
- ``SANDMEM_OPENAI_API`` — ``responses`` (default) or ``chat_completions``;
- ``SANDMEM_MODEL`` — the model used when an agent names none (default ``gpt-5.4-mini``).

The ``openai`` package is imported only when a client is created.
"""

from __future__ import annotations

import asyncio
import os
import weakref
from typing import TYPE_CHECKING, Literal

from sandmem._errors import UserError
from sandmem.models._base import Model, ModelProvider

if TYPE_CHECKING:
    from openai import AsyncOpenAI

ApiName = Literal["responses", "chat_completions"]

API_NAMES: tuple[ApiName, ...] = ("responses", "chat_completions")
DEFAULT_MODEL = "gpt-5.4-mini"
#: sent as the key to servers given by base URL only (local servers ignore it)
PLACEHOLDER_API_KEY = "sandmem-no-key"


class OpenAIProvider(ModelProvider):
    """Models from an OpenAI or OpenAI-compatible server.

    Arguments left ``None`` fall back to the environment (see the module docstring).
    ``timeout`` (seconds) bounds each HTTP request; ``max_retries`` is the ``openai`` client's
    retry count for 408/409/429/5xx and connection errors, with exponential backoff.

    One ``AsyncOpenAI`` client is created lazily per event loop (an ``asyncio`` client cannot
    be shared across loops, and ``Runner.run_sync`` starts a loop per call); ``openai_client``
    supplies a ready client instead, used as is.
    """

    def __init__(
        self,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        api: ApiName | None = None,
        timeout: float = 60.0,
        max_retries: int = 3,
        openai_client: AsyncOpenAI | None = None,
    ) -> None:
        if api is not None:
            _check_api(api, source="api")
        if timeout <= 0:
            raise UserError(f"timeout must be positive seconds, got {timeout!r}")
        if max_retries < 0:
            raise UserError(f"max_retries must be >= 0, got {max_retries!r}")
        self._api_key = api_key
        self._base_url = base_url
        self._api = api
        self.timeout = timeout
        self.max_retries = max_retries
        self._fixed_client = openai_client
        self._clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, AsyncOpenAI] = (
            weakref.WeakKeyDictionary()
        )

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

        model = name or os.environ.get("SANDMEM_MODEL", "").strip() or DEFAULT_MODEL
        if self.api == "chat_completions":
            return OpenAIChatCompletionsModel(model, self._client)
        return OpenAIResponsesModel(model, self._client)

    async def aclose(self) -> None:
        """Close the client created for the running event loop, if any."""
        client = self._clients.pop(asyncio.get_running_loop(), None)
        if client is not None:
            await client.close()

    def _client(self) -> AsyncOpenAI:
        if self._fixed_client is not None:
            return self._fixed_client
        loop = asyncio.get_running_loop()
        client = self._clients.get(loop)
        if client is None:
            client = self._new_client()
            self._clients[loop] = client
        return client

    def _new_client(self) -> AsyncOpenAI:
        from openai import AsyncOpenAI

        api_key = self._api_key or os.environ.get("OPENAI_API_KEY") or None
        base_url = self._base_url or os.environ.get("OPENAI_BASE_URL") or None
        if api_key is None and base_url is None:
            raise UserError(
                "no OpenAI server configured: set OPENAI_API_KEY (for api.openai.com) or "
                "OPENAI_BASE_URL (for an OpenAI-compatible server such as Ollama or vLLM), "
                "or pass api_key/base_url to OpenAIProvider"
            )
        return AsyncOpenAI(
            api_key=api_key or PLACEHOLDER_API_KEY,
            base_url=base_url,
            timeout=self.timeout,
            max_retries=self.max_retries,
        )


def _check_api(value: str, *, source: str) -> ApiName:
    if value not in API_NAMES:
        allowed = " or ".join(repr(name) for name in API_NAMES)
        raise UserError(f"{source} must be {allowed}, got {value!r}")
    return value
