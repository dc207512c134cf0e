"""Runner-managed retries of model requests: the policy types of ``ModelRetrySettings``.

With ``ModelSettings(retry=ModelRetrySettings(max_retries=n, policy=p))`` the run loop sends
each model request with the ``openai`` client's own retries off; when a request fails it asks
``p(RetryPolicyContext)`` whether to try again (``True``/``False`` or a ``RetryDecision`` with a
delay), up to ``n`` more times, waiting ``RetryDecision.delay`` or the ``backoff`` schedule.
Without a policy, ``max_retries`` is the client's retry count for the request instead. The
building blocks of policies are in ``retry_policies`` (the reference SDK's names).
"""

from __future__ import annotations

import inspect
import random
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass
from typing import Any

from pydantic import ConfigDict, Field

from sandmem._config_base import ConfigModel


class ModelRetryBackoffSettings(ConfigModel):
    """The wait before retry ``k`` (1-based): ``initial_delay * multiplier**(k-1)``, at most
    ``max_delay``, times a random factor in [0.5, 1] with ``jitter``. Defaults: 0.5 s, x2, 8 s,
    jitter on."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    initial_delay: float | None = Field(default=None, ge=0)
    max_delay: float | None = Field(default=None, ge=0)
    multiplier: float | None = Field(default=None, ge=0)
    jitter: bool | None = None

    def delay(self, retry: int) -> float:
        base = 0.5 if self.initial_delay is None else self.initial_delay
        factor = 2.0 if self.multiplier is None else self.multiplier
        ceiling = 8.0 if self.max_delay is None else self.max_delay
        wait = min(base * factor ** max(retry - 1, 0), ceiling)
        return wait * random.uniform(0.5, 1.0) if self.jitter is not False else wait

    def to_json_dict(self) -> dict[str, Any]:
        return self.model_dump()


@dataclass
class ModelRetryNormalizedError:
    """What a policy needs to know about a failed request, whatever raised it."""

    status_code: int | None = None
    error_code: str | None = None
    message: str | None = None
    request_id: str | None = None
    retry_after: float | None = None
    is_abort: bool = False
    is_network_error: bool = False
    is_timeout: bool = False


@dataclass
class RetryDecision:
    """A policy's answer: ``retry`` or not, after ``delay`` seconds (``None``: the backoff)."""

    retry: bool
    delay: float | None = None
    reason: str | None = None
    approve_unsafe_replay: bool = False


@dataclass
class RetryPolicyContext:
    """One failed attempt as a policy sees it (``attempt`` counts from 1)."""

    error: Exception
    attempt: int
    max_retries: int
    stream: bool
    normalized: ModelRetryNormalizedError
    provider_advice: Any = None
    previous_response_id: str | None = None
    conversation_id: str | None = None


#: ``(context) -> bool | RetryDecision`` (may be async)
RetryPolicy = Callable[[RetryPolicyContext], bool | RetryDecision | Awaitable[bool | RetryDecision]]


def normalize_error(error: Exception) -> ModelRetryNormalizedError:
    """The facts of ``error``: ``ModelRequestError`` carries them (status, ``Retry-After``,
    network or timeout); for anything else only the message is known."""
    return ModelRetryNormalizedError(
        status_code=getattr(error, "status_code", None),
        message=str(error),
        retry_after=getattr(error, "retry_after", None),
        is_network_error=bool(getattr(error, "network_error", False)),
        is_timeout=bool(getattr(error, "timeout", False)) or isinstance(error, TimeoutError),
    )


async def decide(policy: RetryPolicy, context: RetryPolicyContext) -> RetryDecision:
    """The policy's answer as a ``RetryDecision``."""
    value = policy(context)
    if inspect.isawaitable(value):
        value = await value
    return value if isinstance(value, RetryDecision) else RetryDecision(retry=bool(value))


class retry_policies:
    """Building blocks of retry policies; combine them with ``any`` and ``all``."""

    @staticmethod
    def never() -> RetryPolicy:
        """Never retry."""
        return lambda context: False

    @staticmethod
    def provider_suggested() -> RetryPolicy:
        """Retry what the model adapter marked retryable (timeouts, connection errors, HTTP
        408/409/429/5xx), waiting what the server's ``Retry-After`` says when it says."""

        def policy(context: RetryPolicyContext) -> RetryDecision:
            retryable = bool(getattr(context.error, "retryable", False))
            reason = "the model adapter marked the error retryable" if retryable else None
            return RetryDecision(retryable, context.normalized.retry_after, reason)

        return policy

    @staticmethod
    def retry_after() -> RetryPolicy:
        """Retry when the server said when to (``Retry-After``), after that long."""

        def policy(context: RetryPolicyContext) -> RetryDecision:
            after = context.normalized.retry_after
            return RetryDecision(after is not None, after, "retry-after" if after else None)

        return policy

    @staticmethod
    def network_error() -> RetryPolicy:
        """Retry connection errors and timeouts."""
        return lambda c: c.normalized.is_network_error or c.normalized.is_timeout

    @staticmethod
    def http_status(statuses: Collection[int]) -> RetryPolicy:
        """Retry these HTTP statuses."""
        wanted = frozenset(statuses)
        return lambda c: c.normalized.status_code in wanted

    @staticmethod
    def any(*policies: RetryPolicy) -> RetryPolicy:
        """Retry when one of ``policies`` says so (the first such decision wins)."""

        async def policy(context: RetryPolicyContext) -> RetryDecision:
            for one in policies:
                decision = await decide(one, context)
                if decision.retry:
                    return decision
            return RetryDecision(False)

        return policy

    @staticmethod
    def all(*policies: RetryPolicy) -> RetryPolicy:
        """Retry only when every one of ``policies`` says so (the longest delay wins)."""

        async def policy(context: RetryPolicyContext) -> RetryDecision:
            delays: list[float] = []
            for one in policies:
                decision = await decide(one, context)
                if not decision.retry:
                    return decision
                if decision.delay is not None:
                    delays.append(decision.delay)
            return RetryDecision(bool(policies), max(delays) if delays else None)

        return policy
