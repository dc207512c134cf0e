"""Token and request accounting."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class RequestUsage:
    """The tokens of one model request (``Usage.request_usage_entries``)."""

    input_tokens: int = 0
    output_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens


@dataclass
class Usage:
    """Requests and tokens spent; ``add`` sums another ``Usage`` into this one."""

    requests: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    #: one entry per model request, in order (the reference's field of the same name)
    request_usage_entries: list[RequestUsage] = field(default_factory=list, compare=False)

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def add(self, other: Usage) -> None:
        self.requests += other.requests
        self.input_tokens += other.input_tokens
        self.output_tokens += other.output_tokens
        self.request_usage_entries.extend(other.request_usage_entries)
