"""Runner-managed retries of one model request (``ModelRetrySettings`` with a ``policy``).

Each failed attempt is shown to the policy (``sandmem._retry``); it answers retry or not, and
how long to wait (else the ``backoff`` schedule). A streamed request is retried only while
nothing of its answer has been emitted. Without a policy the request is made once here (the
``openai`` client's own retries apply, with ``max_retries`` as their count).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Awaitable, Callable

from sandmem._retry import (
    ModelRetryBackoffSettings,
    RetryPolicyContext,
    decide,
    normalize_error,
)
from sandmem.models._base import ModelRequest, ModelResponse

logger = logging.getLogger("sandmem.run")


async def with_retries(
    request: ModelRequest,
    attempt: Callable[[], Awaitable[ModelResponse]],
    *,
    stream: bool = False,
    started: Callable[[], bool] = lambda: False,
) -> ModelResponse:
    """``attempt()``, retried as ``request.settings.retry`` says (see the module docstring)."""
    retry = request.settings.retry
    if retry is None or retry.policy is None or not retry.runner_managed:
        return await attempt()
    budget = retry.max_retries or 0
    for number in itertools.count(1):
        try:
            return await attempt()
        except Exception as exc:
            if number > budget or (stream and started()):
                raise
            context = RetryPolicyContext(
                error=exc,
                attempt=number,
                max_retries=budget,
                stream=stream,
                normalized=normalize_error(exc),
                previous_response_id=request.previous_response_id,
                conversation_id=request.conversation_id,
            )
            decision = await decide(retry.policy, context)
            if not decision.retry:
                raise
            delay = decision.delay
            if delay is None:
                delay = (retry.backoff or ModelRetryBackoffSettings()).delay(number)
            logger.info(
                "model request failed (%s); retry %d of %d in %.2f s",
                type(exc).__name__,
                number,
                budget,
                delay,
            )
            await asyncio.sleep(delay)
    raise AssertionError("unreachable")
