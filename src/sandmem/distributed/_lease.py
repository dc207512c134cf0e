"""``RedisLease``: one writer per memory layout across hosts.

A lease is a Redis key set with ``NX`` and a TTL, holding a **fencing token** drawn from a
counter that only grows (``INCR``). The holder renews it every third of the TTL; a holder that
dies (or stalls past the TTL) loses it and the next one gets a larger token. Before it commits,
a writer checks that the key still holds its token, and the token is written into the memory
version it commits; a version committed under a larger token refuses commits from a smaller
one (``S3MemoryStore.commit``), so a zombie writer can never overwrite its successor.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from types import TracebackType
from typing import Any

from sandmem._errors import SandmemError
from sandmem._extras import require

_RENEW = """
if redis.call('get', KEYS[1]) == ARGV[1] then
  return redis.call('pexpire', KEYS[1], ARGV[2])
end
return 0
"""
_RELEASE = """
if redis.call('get', KEYS[1]) == ARGV[1] then
  return redis.call('del', KEYS[1])
end
return 0
"""


def lease_client(redis_url: str) -> Any:
    """A synchronous Redis client for leases (5 s bounds on every command)."""
    redis = require("redis")
    return redis.Redis.from_url(redis_url, socket_timeout=5, socket_connect_timeout=5)


class LeaseLost(SandmemError):
    """The lease expired or was taken over; whatever the holder was about to write is dropped
    (the job runs again)."""


class LeaseBusy(SandmemError):
    """Another holder has the lease; try again later."""


class RedisLease:
    """``async with RedisLease(url, name, ttl_s=30):`` holds the lease ``name``.

    Renewal runs in a thread of its own, so a busy or blocked event loop in the holder cannot
    make it lose the lease; only a dead or frozen process does. ``client`` is a (thread-safe,
    pooled) synchronous Redis client to use instead of one of its own: a worker shares one
    across its leases, so a job does not open a connection to take its lease."""

    def __init__(
        self,
        redis_url: str,
        name: str,
        *,
        ttl_s: float = 30.0,
        wait_s: float = 10.0,
        client: Any = None,
    ) -> None:
        if ttl_s <= 0.3:
            raise ValueError("ttl_s must be over 0.3 seconds")
        self.redis_url = redis_url
        self.key = f"sandmem:lease:{name}"
        self.ttl_ms = int(ttl_s * 1000)
        self.wait_s = wait_s
        self.token = 0
        self._redis: Any = client
        self._own_client = client is None
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None
        self._lost = False

    def _client(self) -> Any:
        if self._redis is None:
            self._redis = lease_client(self.redis_url)
        return self._redis

    def _try_acquire(self) -> bool:
        client = self._client()
        token = int(client.incr(f"{self.key}:fence"))
        if client.set(self.key, str(token), nx=True, px=self.ttl_ms):
            self.token = token
            return True
        return False

    async def acquire(self) -> int:
        deadline = time.monotonic() + self.wait_s
        while not await asyncio.to_thread(self._try_acquire):
            if time.monotonic() >= deadline:
                raise LeaseBusy(f"lease {self.key} is held by another writer")
            await asyncio.sleep(0.1)
        self._lost = False
        self._stop.clear()
        self._renewer = threading.Thread(target=self._renew, name="sandmem-lease", daemon=True)
        self._renewer.start()
        return self.token

    def _renew(self) -> None:
        client = self._client()
        while not self._stop.wait(self.ttl_ms / 3000):
            try:
                ok = client.eval(_RENEW, 1, self.key, str(self.token), str(self.ttl_ms))
            except Exception:  # a blip: the next round tries again before the TTL runs out
                continue
            if not ok:
                self._lost = True
                return

    def _holds(self) -> bool:
        value = self._client().get(self.key)
        return not self._lost and value is not None and int(value) == self.token

    async def check(self) -> None:
        """Raise ``LeaseLost`` unless the lease still holds this holder's token."""
        if not await asyncio.to_thread(self._holds):
            raise LeaseLost(f"lease {self.key} (token {self.token}) was lost")

    def _release(self) -> None:
        self._stop.set()
        if self._renewer is not None:
            self._renewer.join(timeout=10)
            self._renewer = None
        if self._redis is not None:
            with contextlib.suppress(Exception):
                self._redis.eval(_RELEASE, 1, self.key, str(self.token))
            if self._own_client:
                self._redis.close()
                self._redis = None

    async def release(self) -> None:
        await asyncio.to_thread(self._release)

    async def __aenter__(self) -> RedisLease:
        await self.acquire()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.release()
