"""RedisLease on a real Redis: one holder at a time, growing fencing tokens, loss on expiry."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from services import RedisServer

from sandmem.distributed import LeaseBusy, LeaseLost, RedisLease
from sandmem.distributed._lease import lease_client


async def test_one_holder_at_a_time_and_tokens_grow(redis_server: RedisServer) -> None:
    name = uuid.uuid4().hex
    async with RedisLease(redis_server.url, name, ttl_s=5) as first:
        await first.check()
        rival = RedisLease(redis_server.url, name, ttl_s=5, wait_s=0.3)
        with pytest.raises(LeaseBusy):
            await rival.acquire()
        await rival.release()
    async with RedisLease(redis_server.url, name, ttl_s=5) as second:
        assert second.token > first.token


async def test_the_holder_renews_past_its_ttl(redis_server: RedisServer) -> None:
    async with RedisLease(redis_server.url, uuid.uuid4().hex, ttl_s=0.6) as lease:
        await asyncio.sleep(1.5)
        await lease.check()


async def test_a_stalled_holder_loses_the_lease_to_a_new_one(redis_server: RedisServer) -> None:
    name = uuid.uuid4().hex
    stalled = RedisLease(redis_server.url, name, ttl_s=0.5)
    await stalled.acquire()
    stalled._stop.set()  # a process that stopped renewing (frozen or dead)
    async with RedisLease(redis_server.url, name, ttl_s=5, wait_s=5) as successor:
        assert successor.token > stalled.token
        with pytest.raises(LeaseLost):
            await stalled.check()
    await stalled.release()


async def test_leases_of_a_worker_share_one_client_and_leave_it_open(
    redis_server: RedisServer,
) -> None:
    client = lease_client(redis_server.url)
    name = uuid.uuid4().hex
    try:
        tokens = []
        for _ in range(3):
            async with RedisLease(redis_server.url, name, ttl_s=5, client=client) as lease:
                await lease.check()
                tokens.append(lease.token)
            assert client.get(lease.key) is None  # released
        assert tokens == sorted(tokens) and len(set(tokens)) == 3
        assert client.ping()  # still open for the next job
    finally:
        client.close()
