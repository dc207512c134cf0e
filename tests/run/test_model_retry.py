"""Runner-managed retries of model requests: ``ModelRetrySettings(max_retries, backoff,
policy)`` and the ``retry_policies`` building blocks."""

from __future__ import annotations

from typing import Any

import pytest
from fake_openai import FakeOpenAIServer
from openai import AsyncOpenAI

from sandmem import (
    Agent,
    ModelRetrySettings,
    ModelSettings,
    OpenAIResponsesModel,
    RetryDecision,
    RetryPolicyContext,
    Runner,
    retry_policies,
)
from sandmem._errors import ModelRequestError
from sandmem._retry import decide
from sandmem.models._base import ModelRequest
from sandmem.testing import FunctionModel

NO_WAIT = {"initial_delay": 0, "jitter": False}


def flaky(failures: list[Exception]) -> FunctionModel:
    """Raises each of ``failures`` in turn, then answers "ok"."""

    def fn(request: ModelRequest) -> str:
        if failures:
            raise failures.pop(0)
        return "ok"

    return FunctionModel(fn)


def busy() -> ModelRequestError:
    return ModelRequestError("HTTP 503", status_code=503, retryable=True)


@pytest.mark.parametrize("streamed", [False, True])
async def test_a_policy_retries_failed_requests_within_the_budget(streamed: bool) -> None:
    seen: list[tuple[int, int | None]] = []

    def policy(context: RetryPolicyContext) -> bool:
        seen.append((context.attempt, context.normalized.status_code))
        return context.normalized.status_code == 503

    retry = ModelRetrySettings(max_retries=2, backoff=NO_WAIT, policy=policy)
    model = flaky([busy(), busy()])
    agent = Agent(name="a", model=model, model_settings=ModelSettings(retry=retry))
    if streamed:
        result: Any = Runner.run_streamed(agent, "hi")
        async for _ in result.stream_events():
            pass
    else:
        result = await Runner.run(agent, "hi")
    assert result.final_output == "ok"
    assert seen == [(1, 503), (2, 503)] and len(model.requests) == 3


async def test_a_refusing_policy_or_a_spent_budget_raises_the_error() -> None:
    refuse = ModelRetrySettings(max_retries=5, policy=retry_policies.never())
    model = flaky([busy()])
    agent = Agent(name="a", model=model, model_settings=ModelSettings(retry=refuse))
    with pytest.raises(ModelRequestError):
        await Runner.run(agent, "hi")
    assert len(model.requests) == 1
    spent = ModelRetrySettings(
        max_retries=1, backoff=NO_WAIT, policy=retry_policies.provider_suggested()
    )
    model = flaky([busy(), busy()])
    agent = Agent(name="a", model=model, model_settings=ModelSettings(retry=spent))
    with pytest.raises(ModelRequestError):
        await Runner.run(agent, "hi")
    assert len(model.requests) == 2


async def test_policies_combine_and_read_the_servers_retry_after(
    fake_openai: FakeOpenAIServer,
) -> None:
    # the server answers 429 twice with retry-after-ms: 10; the runner retries (the client's
    # own retries are off under a policy, so exactly three requests reach the server)
    fake_openai.inject(status=429, times=2, retry_after_s=0.01)
    decisions: list[RetryDecision] = []
    combined = retry_policies.any(retry_policies.network_error(), retry_policies.http_status([429]))

    async def policy(context: RetryPolicyContext) -> RetryDecision:
        after = await decide(retry_policies.retry_after(), context)
        decision = RetryDecision((await decide(combined, context)).retry, after.delay)
        decisions.append(decision)
        return decision

    async with AsyncOpenAI(api_key="k", base_url=fake_openai.base_url, max_retries=5) as client:
        retry = ModelRetrySettings(max_retries=3, policy=policy)
        agent = Agent(
            name="a",
            model=OpenAIResponsesModel("m", client),
            model_settings=ModelSettings(retry=retry),
        )
        result = await Runner.run(agent, "hi")
    assert result.final_output == "echo: hi"
    assert len(fake_openai.requests) == 3
    assert decisions == [RetryDecision(True, 0.01), RetryDecision(True, 0.01)]


def test_backoff_schedule_and_settings_shapes() -> None:
    retry = ModelRetrySettings(
        max_retries=3,
        backoff={"initial_delay": 1, "multiplier": 3, "max_delay": 5, "jitter": False},
    )
    assert retry.backoff is not None
    assert [retry.backoff.delay(k) for k in (1, 2, 3)] == [1, 3, 5]
    assert not retry.runner_managed  # no policy: the client's own retries, with this count
    assert ModelSettings(retry={"max_retries": 0}).to_json_dict() == {"retry": {"max_retries": 0}}
