"""``RedisQueue``: the job queue, a few Redis keys and atomic scripts (no Celery).

Keys, for a queue ``Q`` (all under ``sandmem:q:Q:``)::

    ready     list    message ids waiting; enqueue pushes left, a claim pops right
    body      hash    message id -> the job's JSON
    queued    hash    layout id -> the id of its waiting message (one waiting job a layout)
    running   zset    message id -> deadline; a worker pushes the deadline on while it works
    delayed   zset    message id -> when a retry is due
    dead      list    poison messages and jobs that failed for good, newest first (1,000 kept)
    sweep     string  held by the worker that sweeps the store this interval

A **claim** moves a message from ``ready`` to ``running`` in one script, so a worker killed at
any instant leaves it either waiting or running, never lost. A running message whose deadline
passed (its worker died or froze: no heartbeat for ``visibility_timeout_s``) goes back to the
front of ``ready`` at the next **tick**, which every worker runs every
``min(1 s, visibility_timeout_s / 4)``: redelivery comes within the visibility timeout plus
that period. All times are the Redis server's (``TIME``), so host clocks do not matter.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from sandmem._extras import require

DEFAULT_QUEUE = "sandmem-memory"
_DEAD_KEPT = 1000

_NOW = "local t = redis.call('time'); local now = t[1] * 1000 + math.floor(t[2] / 1000)\n"

_ENQUEUE = """
local waiting = redis.call('hget', KEYS[3], ARGV[1])
if waiting and redis.call('hexists', KEYS[2], waiting) == 1 then return 0 end
if ARGV[4] == '1' then
  local prefix = ARGV[1] .. ':'
  for _, key in ipairs({KEYS[4], KEYS[5]}) do
    for _, id in ipairs(redis.call('zrange', key, 0, -1)) do
      if string.sub(id, 1, #prefix) == prefix then return 0 end
    end
  end
end
redis.call('hset', KEYS[3], ARGV[1], ARGV[2])
redis.call('hset', KEYS[2], ARGV[2], ARGV[3])
redis.call('lpush', KEYS[1], ARGV[2])
return 1
"""

_CLAIM = (
    _NOW
    + """
local id = redis.call('rpop', KEYS[1])
if not id then return false end
redis.call('zadd', KEYS[4], now + tonumber(ARGV[1]), id)
local layout = string.sub(id, 1, 16)
if redis.call('hget', KEYS[3], layout) == id then redis.call('hdel', KEYS[3], layout) end
return {id, redis.call('hget', KEYS[2], id) or ''}
"""
)

_HEARTBEAT = (
    _NOW
    + """
for i = 2, #ARGV do redis.call('zadd', KEYS[1], 'XX', now + tonumber(ARGV[1]), ARGV[i]) end
return #ARGV - 1
"""
)

_LATER = (
    _NOW
    + """
redis.call('zrem', KEYS[1], ARGV[1])
redis.call('hset', KEYS[3], ARGV[1], ARGV[3])
redis.call('zadd', KEYS[2], now + tonumber(ARGV[2]), ARGV[1])
return 1
"""
)

_TICK = (
    _NOW
    + """
local moved = 0
for _, key in ipairs({KEYS[1], KEYS[2]}) do
  for _, id in ipairs(redis.call('zrangebyscore', key, '-inf', now, 'LIMIT', 0, 100)) do
    redis.call('zrem', key, id)
    redis.call('rpush', KEYS[3], id)
    moved = moved + 1
  end
end
return moved
"""
)


def redact_url(url: str) -> str:
    """``url`` with any password (and a user name that may be a token) replaced by ``***``:
    what banners, logs and ``repr`` show of a broker URL."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparsable URL>"
    if parts.password is None and not parts.username:
        return url
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    user = "***" if parts.password is None else f"{parts.username or ''}:***"
    return urlunsplit((parts.scheme, f"{user}@{host}", parts.path, parts.query, parts.fragment))


class RedisQueue:
    """The queue ``name`` on the Redis at ``url`` (``redis://``, ``rediss://`` for TLS;
    ``redis://user:password@host:port/db`` with authentication). Every command is bounded by
    ``connect_timeout_s`` and ``socket_timeout_s``."""

    def __init__(
        self,
        url: str,
        name: str = DEFAULT_QUEUE,
        *,
        visibility_timeout_s: float = 30.0,
        connect_timeout_s: float = 3.0,
        socket_timeout_s: float = 5.0,
    ) -> None:
        if visibility_timeout_s < 1:
            raise ValueError("visibility_timeout_s must be at least 1 second")
        self.url = url
        self.name = name
        self.visibility_timeout_s = visibility_timeout_s
        self.connect_timeout_s = connect_timeout_s
        self.socket_timeout_s = socket_timeout_s
        base = f"sandmem:q:{name}:"
        self.keys = {k: base + k for k in ("ready", "body", "queued", "running", "delayed")}
        self.dead_key = base + "dead"
        self.sweep_key = base + "sweep"
        self._redis: Any = None

    def __repr__(self) -> str:
        return f"RedisQueue({redact_url(self.url)!r}, {self.name!r})"

    @property
    def tick_interval_s(self) -> float:
        return min(1.0, self.visibility_timeout_s / 4)

    def client(self) -> Any:
        if self._redis is None:
            redis = require("redis.asyncio")
            self._redis = redis.Redis.from_url(
                self.url,
                socket_timeout=self.socket_timeout_s,
                socket_connect_timeout=self.connect_timeout_s,
            )
        return self._redis

    async def aclose(self) -> None:
        if self._redis is not None:
            redis, self._redis = self._redis, None
            await redis.aclose()

    async def _eval(self, script: str, keys: list[str], *args: Any) -> Any:
        return await self.client().eval(script, len(keys), *keys, *args)

    def _vt_ms(self) -> int:
        return int(self.visibility_timeout_s * 1000)

    async def enqueue(self, layout_id: str, body: bytes, *, unless_busy: bool = False) -> bool:
        """Queue ``body`` for the layout unless a job of it is already waiting (that one will
        see everything pushed before it is claimed); with ``unless_busy`` (the sweeper) also
        unless one is running or due for a retry (that one clears the marks it saw, and a
        later sweep finds any others). True when a message was added."""
        message_id = f"{layout_id}:{time.time_ns():x}{os.urandom(4).hex()}"
        k = self.keys
        added = await self._eval(
            _ENQUEUE,
            [k["ready"], k["body"], k["queued"], k["running"], k["delayed"]],
            layout_id,
            message_id,
            body,
            "1" if unless_busy else "0",
        )
        return bool(added)

    async def claim(self) -> tuple[str, bytes] | None:
        """Take the next message (its deadline set to now + the visibility timeout)."""
        k = self.keys
        got = await self._eval(
            _CLAIM, [k["ready"], k["body"], k["queued"], k["running"]], self._vt_ms()
        )
        if not got:
            return None
        message_id, body = got
        return message_id.decode(errors="replace"), bytes(body)

    async def heartbeat(self, message_ids: list[str]) -> None:
        if message_ids:
            await self._eval(_HEARTBEAT, [self.keys["running"]], self._vt_ms(), *message_ids)

    async def ack(self, message_id: str) -> None:
        k = self.keys
        async with self.client().pipeline(transaction=True) as pipe:
            pipe.zrem(k["running"], message_id)
            pipe.zrem(k["delayed"], message_id)
            pipe.hdel(k["body"], message_id)
            await pipe.execute()

    async def retry_later(self, message_id: str, delay_s: float, body: bytes) -> None:
        k = self.keys
        await self._eval(
            _LATER, [k["running"], k["delayed"], k["body"]], message_id, int(delay_s * 1000), body
        )

    async def dead_letter(self, message_id: str, body: bytes, reason: str) -> None:
        record = {
            "id": message_id,
            "body": body.decode(errors="replace")[:10_000],
            "reason": reason,
            "at": time.time(),
        }
        async with self.client().pipeline(transaction=True) as pipe:
            pipe.lpush(self.dead_key, json.dumps(record))
            pipe.ltrim(self.dead_key, 0, _DEAD_KEPT - 1)
            await pipe.execute()
        await self.ack(message_id)

    async def tick(self) -> int:
        """Move expired running messages and due retries to the front of ``ready``."""
        k = self.keys
        return int(await self._eval(_TICK, [k["running"], k["delayed"], k["ready"]]))

    async def take_sweep(self, interval_s: float) -> bool:
        """True for the one worker that sweeps the store this interval."""
        ms = max(100, int(interval_s * 900))
        return bool(await self.client().set(self.sweep_key, os.getpid(), nx=True, px=ms))

    async def dead(self) -> list[dict[str, Any]]:
        return [json.loads(raw) for raw in await self.client().lrange(self.dead_key, 0, -1)]
