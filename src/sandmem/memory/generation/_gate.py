"""How many phase-one requests are in flight: pinned, or adapted to what the server takes.

``FixedGate(n)`` holds at most ``n`` requests at once (``phase_one_concurrency=n``).

``AdaptiveGate(ceiling)`` (the default) is additive-increase / multiplicative-decrease, as
TCP's congestion window: it starts at the ceiling (``phase_one_max_concurrency``), halves
when the server pushes back — HTTP 429, a connection error or timeout, or a request taking
more than ``LATENCY_FACTOR`` times the fastest seen — and grows by about one per round of
successes (``1 / limit`` per success), back to the ceiling. One burst of rejections halves it
once: a rejection of a request sent before the last cut is not counted again. After a
rejection at ``k`` requests in flight it grows no further than ``k - 1`` until
``PROBE_AFTER`` successes in a row, then tries one more, so a server with a fixed limit sees
one rejected probe now and then rather than a sawtooth of them.

A request the server rejected with 429 is sent again (after a short jittered wait, in a new
slot) within the same flush, up to ``MAX_RETRIES`` times: a 429 is the server saying "not so
many", never a failure of the rollout, and it never uses one of its attempts. A connection
error or timeout is sent again at most ``CONNECTION_RETRIES`` times before it fails the
rollout as an environment failure (no attempt used; a server that is down still costs one
request per flush, as before). The ``openai`` client's own retries (``max_retries`` of the
provider) run inside one slot first.
"""

from __future__ import annotations

import asyncio
import collections
import random
import time
from collections.abc import Awaitable, Callable
from typing import Literal, Protocol, TypeVar

from sandmem._errors import ModelRequestError

T = TypeVar("T")

#: a request this many times slower than the fastest seen counts as the server pushing back
LATENCY_FACTOR = 4.0
#: successes seen before the latency signal is trusted
LATENCY_SAMPLES = 8
#: successes in a row at the learned limit before one more request in flight is tried
PROBE_AFTER = 32
#: resends of a request rejected with HTTP 429
MAX_RETRIES = 20
#: resends of a request that met a connection error or timeout
CONNECTION_RETRIES = 2
#: first wait before a resend, doubled per resend of the same request (jittered, capped)
RETRY_WAIT_S = 0.05
RETRY_WAIT_MAX_S = 2.0

Pushback = Literal["rate_limit", "connection"]


class Gate(Protocol):
    """Runs a model request when a slot is free."""

    async def run(self, call: Callable[[], Awaitable[T]]) -> T: ...


class FixedGate:
    """At most ``limit`` requests at once."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._semaphore = asyncio.Semaphore(limit)

    async def run(self, call: Callable[[], Awaitable[T]]) -> T:
        async with self._semaphore:
            return await call()


def pushback(exc: BaseException) -> Pushback | None:
    """``rate_limit`` for HTTP 429, ``connection`` for a connection error or timeout (a
    retryable failure without a status), ``None`` for anything else."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, ModelRequestError):
            if current.status_code == 429:
                return "rate_limit"
            if current.status_code is None and current.retryable:
                return "connection"
            return None
        current = current.__cause__ or current.__context__
    return None


class AdaptiveGate:
    """See the module docstring. ``limit`` is the current window, ``rejections`` counts the
    pushbacks seen and ``resends`` the requests sent again."""

    def __init__(self, ceiling: int, *, rng: random.Random | None = None) -> None:
        self.ceiling = ceiling
        self.limit = float(ceiling)
        self.in_flight = 0
        self.rejections = 0
        self.resends = 0
        self._cap = ceiling
        self._streak = 0
        self._successes = 0
        self._fastest: float | None = None
        self._last_cut = float("-inf")
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        self._rng = rng or random.Random()

    # ------------------------------------------------------------ slots

    def _room(self) -> bool:
        return self.in_flight < max(1, int(self.limit))

    async def _acquire(self) -> None:
        if self._room() and not self._waiters:
            self.in_flight += 1
            return
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self._release()  # the slot was handed over as we were cancelled
            elif waiter in self._waiters:
                self._waiters.remove(waiter)
            raise

    def _release(self) -> None:
        self.in_flight -= 1
        self._wake()

    def _wake(self) -> None:
        while self._waiters and self._room():
            waiter = self._waiters.popleft()
            if not waiter.done():
                self.in_flight += 1
                waiter.set_result(None)

    # ------------------------------------------------------------ the window

    def _succeeded(self, sent: float, latency: float) -> None:
        self._successes += 1
        if self._fastest is None or latency < self._fastest:
            self._fastest = latency
        slow = (
            self._successes > LATENCY_SAMPLES
            and self._fastest > 0
            and latency > LATENCY_FACTOR * self._fastest
        )
        if slow:
            self._cut(sent, max(1, self.in_flight + 1))
            return
        self._streak += 1
        if self._streak >= PROBE_AFTER and self._cap < self.ceiling:
            self._cap += 1
            self._streak = 0
        self.limit = min(float(self._cap), self.limit + 1.0 / max(self.limit, 1.0))
        self._wake()

    def _cut(self, sent: float, level: int) -> None:
        """Halve the window, once per burst: a pushback of a request sent before the last
        cut was already answered."""
        if sent < self._last_cut:
            return
        self._last_cut = time.monotonic()
        self._cap = max(1, min(self._cap, level - 1))
        self.limit = max(1.0, min(self.limit / 2, float(self._cap)))
        self._streak = 0

    # ------------------------------------------------------------ requests

    async def run(self, call: Callable[[], Awaitable[T]]) -> T:
        resends = 0
        while True:
            await self._acquire()
            sent, level = time.monotonic(), self.in_flight
            try:
                result = await call()
            except Exception as exc:
                self._release()
                kind = pushback(exc)
                if kind is None:
                    raise
                self.rejections += 1
                self._cut(sent, level)
                resends += 1
                allowed = MAX_RETRIES if kind == "rate_limit" else CONNECTION_RETRIES
                if resends > allowed:
                    raise
                self.resends += 1
                wait = min(RETRY_WAIT_MAX_S, RETRY_WAIT_S * 2 ** (resends - 1))
                await asyncio.sleep(wait * (0.5 + self._rng.random() / 2))
                continue
            except BaseException:
                self._release()
                raise
            self._release()
            self._succeeded(sent, time.monotonic() - sent)
            return result
