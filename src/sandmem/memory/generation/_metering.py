"""Counting every model request memory generation makes, whatever the outcome.

A run that fails (a turn limit, a tool error, a cancelled flush) raises before it can return
its usage; wrapping the model counts each request as it happens instead.
"""

from __future__ import annotations

from sandmem._usage import Usage
from sandmem.models._base import Model, ModelRequest, ModelResponse


class MeteredModel(Model):
    """``inner`` with every request added to ``usage`` (a failed request counts as one
    request with the tokens unknown)."""

    def __init__(self, inner: Model, usage: Usage) -> None:
        self.inner = inner
        self.usage = usage
        self.name = inner.name

    async def get_response(self, request: ModelRequest) -> ModelResponse:
        try:
            response = await self.inner.get_response(request)
        except BaseException:
            self.usage.requests += 1
            raise
        spent = response.usage
        self.usage.add(Usage(max(spent.requests, 1), spent.input_tokens, spent.output_tokens))
        return response
