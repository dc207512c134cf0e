"""Token and request accounting."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Usage:
    """Requests and tokens spent; ``add`` sums another ``Usage`` into this one."""

    requests: int = 0
    input_tokens: int = 0
    output_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def add(self, other: Usage) -> None:
        self.requests += other.requests
        self.input_tokens += other.input_tokens
        self.output_tokens += other.output_tokens
