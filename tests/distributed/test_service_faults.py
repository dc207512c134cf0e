"""Scale-out on a bad day, on real Redis and SeaweedFS: a broker that refuses or restarts
empty, services that freeze, permanent S3 errors and garbage on the queue lose no work, hang
no stop and stop no worker. Workers run in-process here (the ``Worker`` that ``sandmem
worker`` runs); ``test_workers.py`` kills real worker processes."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from services import FreezableProxy, RedisServer, S3Server, start_redis

from sandmem import Filesystem, Memory, RunConfig, Runner, SandboxAgent, SandboxRunConfig, Shell
from sandmem.distributed import MemoryStoreError, RedisQueue, RedisScheduler, S3MemoryStore, Worker
from sandmem.distributed._jobs import JobMessage
from sandmem.memory import EXTRACTIVE, MemoryGenerateConfig, MemoryLayoutConfig
from sandmem.memory.generation import _job as job_module
from sandmem.memory.store._sync import read_current
from sandmem.models import ModelRequest
from sandmem.sandboxes import Manifest, UnixLocalSandboxClient
from sandmem.testing import FunctionModel, text, tool_call

#: how long a call that must not hang may take before the test fails (a guard, not a bound)
HANG_GUARD_S = 120.0
#: a client timeout no test waits for
SLOW_S = 10 * HANG_GUARD_S

EXTRACT = MemoryGenerateConfig(phase_one_model=EXTRACTIVE, phase_two_model=EXTRACTIVE)


class OwnRedis:
    """This module's Redis, which the tests stop and restart (empty) on the same port."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.server: RedisServer = start_redis(workdir)

    @property
    def url(self) -> str:
        return self.server.url

    def down(self) -> None:
        self.server.stop()

    def up(self) -> None:
        self.server = start_redis(self.workdir, port=self.server.port)


@pytest.fixture(scope="module")
def own_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OwnRedis]:
    made = OwnRedis(tmp_path_factory.mktemp("own-redis"))
    try:
        yield made
    finally:
        made.server.stop()


def _names() -> tuple[str, str]:
    return f"bad-{uuid.uuid4().hex[:8]}", f"q-{uuid.uuid4().hex[:8]}"


def _agent(store: S3MemoryStore, schedule: Any, rollout: str, edit: Path | None = None) -> Any:
    def respond(request: ModelRequest) -> list[dict[str, Any]]:
        if not any(item.get("type") == "function_call_output" for item in request.input):
            if edit is not None:  # a live edit of MEMORY.md during the run
                edit.write_text(edit.read_text() + "\n- LIVE: use make bundle\n")
            return [tool_call("exec_command", {"cmd": f"echo {rollout} > {rollout}.txt"})]
        return [text(f"Wrote {rollout}.txt for {rollout}.")]

    generate = EXTRACT.model_copy(update={"schedule": schedule})
    return SandboxAgent(
        name="bad-day",
        model=FunctionModel(respond),
        capabilities=[
            Memory(layout=MemoryLayoutConfig(store=store), generate=generate),
            Filesystem(),
            Shell(),
        ],
    )


async def _run(root: Path, store: S3MemoryStore, schedule: Any, rollout: str) -> Any:
    """Run one conversation and return its still running session (the caller stops it)."""
    session = await UnixLocalSandboxClient().create(manifest=Manifest(root=root))
    await session.start()
    await Runner.run(
        _agent(store, schedule, rollout),
        f"Record {rollout}.",
        run_config=RunConfig(sandbox=SandboxRunConfig(session=session)),
        conversation_id=rollout,
    )
    return session


async def _memory_citing(store: S3MemoryStore, rollout: str, within: float = 30.0) -> str:
    deadline = time.monotonic() + within
    memory = ""
    while time.monotonic() < deadline:
        _, files = await read_current(store, "memories", lambda p: p == "MEMORY.md")
        memory = files.get("MEMORY.md", b"").decode()
        if rollout in memory:
            return memory
        await asyncio.sleep(0.2)
    raise AssertionError(f"MEMORY.md never cited {rollout}:\n{memory}")


async def _queued(
    redis: RedisServer, queue: str, bucket: str, prefix: str, memories_dir: str = "memories"
) -> RedisQueue:
    """The queue with one job on it for the layout ``prefix``/``memories_dir``."""
    job = JobMessage.model_validate(
        {
            "store": {"bucket": bucket, "prefix": prefix},
            "memories_dir": memories_dir,
            "sessions_dir": "sessions",
        }
    )
    queued = RedisQueue(redis.url, queue)
    await queued.enqueue(job.layout_id, job.encode())
    return queued


async def _dead_letter(queue: RedisQueue, within: float = 30.0) -> None:
    """Wait until the dead-letter list has an entry."""
    for _ in range(int(within * 10)):
        if await queue.dead():
            return
        await asyncio.sleep(0.1)


@contextlib.asynccontextmanager
async def _worker(
    url: str, s3: S3Server, prefix: str, queue: str, **options: Any
) -> AsyncIterator[Worker]:
    worker = Worker(
        RedisQueue(url, queue, visibility_timeout_s=options.pop("visibility_timeout_s", 5)),
        S3MemoryStore(s3.bucket, prefix, endpoint_url=s3.endpoint_url),
        options.pop("config", EXTRACT),
        sweep_interval_s=options.pop("sweep_interval_s", 0.5),
        **options,
    )
    stop = asyncio.Event()
    task = asyncio.create_task(worker.run(stop))
    try:
        yield worker
    finally:
        stop.set()
        await asyncio.wait_for(task, timeout=30)
        await worker.queue.aclose()


async def test_a_stop_while_redis_refuses_runs_its_job_once_redis_is_back(
    own_redis: OwnRedis, s3_server: S3Server, tmp_path: Path
) -> None:
    prefix, queue = _names()
    store = S3MemoryStore(s3_server.bucket, prefix, endpoint_url=s3_server.endpoint_url)
    scheduler = RedisScheduler(own_redis.url, queue=queue, stop_timeout_s=5)
    session = await _run(tmp_path / "ws", store, scheduler, "refused-r1")
    own_redis.down()
    try:
        await session.stop()  # the enqueue is refused: logged, the stop goes on
        assert (tmp_path / "ws/memories/.store/pending").exists()
        assert await store.pending_marks("memories")
    finally:
        own_redis.up()  # back, and empty
    async with _worker(own_redis.url, s3_server, prefix, queue):
        memory = await _memory_citing(store, "refused-r1")  # no later stop: the sweeper did it
    assert "refused-r1" in memory
    assert await store.pending_marks("memories") == []  # the job cleared what it handled


async def test_a_redis_restarted_empty_loses_no_job(
    own_redis: OwnRedis, s3_server: S3Server, tmp_path: Path
) -> None:
    prefix, queue = _names()
    store = S3MemoryStore(s3_server.bucket, prefix, endpoint_url=s3_server.endpoint_url)
    session = await _run(tmp_path / "ws", store, RedisScheduler(own_redis.url, queue=queue), "r1")
    await session.stop()
    assert not (tmp_path / "ws/memories/.store/pending").exists()  # handed over
    redis = RedisQueue(own_redis.url, queue)
    assert await redis.client().llen(redis.keys["ready"]) == 1
    await redis.aclose()
    own_redis.down()
    own_redis.up()  # without persistence: the queued job is gone
    async with _worker(own_redis.url, s3_server, prefix, queue) as worker:
        await _memory_citing(store, "r1")
    assert worker.done == 1


async def test_frozen_redis_and_s3_bound_the_stop_and_the_work_completes_later(
    redis_server: RedisServer, s3_server: S3Server, tmp_path: Path
) -> None:
    prefix, queue = _names()
    s3_port = int(s3_server.endpoint_url.rsplit(":", 1)[1])
    redis_proxy, s3_proxy = FreezableProxy(redis_server.port), FreezableProxy(s3_port)
    try:
        store = S3MemoryStore(
            s3_server.bucket,
            prefix,
            endpoint_url=f"http://127.0.0.1:{s3_proxy.port}",
            # the clients' own timeouts far past the guard: only the stop's bound can end it
            connect_timeout_s=SLOW_S,
            read_timeout_s=SLOW_S,
            max_attempts=2,
        )
        scheduler = RedisScheduler(
            f"redis://127.0.0.1:{redis_proxy.port}/0",
            queue=queue,
            stop_timeout_s=2,
            connect_timeout_s=SLOW_S,
            socket_timeout_s=SLOW_S,
        )
        session = await _run(tmp_path / "ws", store, scheduler, "frozen-r1")
        redis_proxy.freeze()
        s3_proxy.freeze()
        # both services answer nothing, ever, and the clients' timeouts are far past the guard:
        # a stop that returns within it was ended by its own bound (``stop_timeout_s``); the
        # guard only turns a hang into a failure (no speed is asserted)
        await asyncio.wait_for(session.stop(), timeout=HANG_GUARD_S)
        # it gave up on the hand-over: the workspace keeps the pending record
        assert (tmp_path / "ws/memories/.store/pending").exists()
        redis_proxy.thaw()
        s3_proxy.thaw()
        # the next run comes from a new process: clients of its own, with short timeouts (the
        # frozen ones' connections may still hold requests the proxies replay on thaw)
        store = S3MemoryStore(
            s3_server.bucket,
            prefix,
            endpoint_url=f"http://127.0.0.1:{s3_proxy.port}",
            connect_timeout_s=1,
            read_timeout_s=1,
            max_attempts=2,
        )
        scheduler = RedisScheduler(
            f"redis://127.0.0.1:{redis_proxy.port}/0",
            queue=queue,
            stop_timeout_s=10,
            socket_timeout_s=1,
        )
        async with _worker(redis_server.url, s3_server, prefix, queue):
            # the next run start in this workspace hands the work over; no stop is needed
            later = await _run(tmp_path / "ws", store, scheduler, "frozen-r2")
            await _memory_citing(store, "frozen-r1")
            assert not (tmp_path / "ws/memories/.store/pending").exists()
            await later.stop()
    finally:
        redis_proxy.close()
        s3_proxy.close()


async def test_a_permanent_s3_error_fails_the_job_once(
    redis_server: RedisServer, s3_server: S3Server
) -> None:
    prefix, queue = _names()
    # a key over S3's 1,024 bytes: KeyTooLongError (400) on every request of this layout (the
    # layout itself is valid: 1,004 characters, the longest a layout directory may have)
    redis = await _queued(
        redis_server, queue, s3_server.bucket, prefix, memories_dir="/".join(["m" * 200] * 5)
    )
    async with _worker(redis_server.url, s3_server, prefix, queue, retry_base_s=0.1) as worker:
        await _dead_letter(redis)
        await asyncio.sleep(1.0)  # a retry would have come by now (base 0.1 s)
    dead = await redis.dead()
    await redis.aclose()
    assert len(dead) == 1 and "KeyTooLong" in dead[0]["reason"], dead
    assert worker.done == 1  # one run, no retry loop


async def test_a_permanent_error_is_written_to_the_layouts_log_once(
    redis_server: RedisServer,
    s3_server: S3Server,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    prefix, queue = _names()
    store = S3MemoryStore(s3_server.bucket, prefix, endpoint_url=s3_server.endpoint_url)
    session = await _run(
        tmp_path / "ws", store, RedisScheduler(redis_server.url, queue=queue), "p1"
    )
    await session.stop()
    stages: list[str] = []

    async def refused(*args: Any) -> Any:  # as S3 answers a request it will never allow
        stages.append("stage")
        raise MemoryStoreError(f"{store.describe()}: AccessDenied", retryable=False)

    monkeypatch.setattr(job_module, "_stage", refused)
    redis = RedisQueue(redis_server.url, queue)
    async with _worker(redis_server.url, s3_server, prefix, queue, retry_base_s=0.1) as worker:
        await _dead_letter(redis)
        await asyncio.sleep(1.0)  # a retry would have come by now (base 0.1 s)
    dead = await redis.dead()
    await redis.aclose()
    assert stages == ["stage"] and worker.done == 1  # the sweeper did not run it again
    assert len(dead) == 1 and "AccessDenied" in dead[0]["reason"]
    assert await store.pending_marks("memories") == []  # the marks it saw were cleared
    _, files = await read_current(store, "memories", lambda p: p == "generation_log.jsonl")
    failed = [json.loads(line) for line in files["generation_log.jsonl"].decode().splitlines()]
    failed = [r for r in failed if r.get("phase") == "job"]
    assert len(failed) == 1 and failed[0]["status"] == "failed"
    assert "AccessDenied" in failed[0]["error"] and failed[0]["retryable"] is False


async def test_a_retryable_error_backs_off_then_fails_after_max_attempts(
    redis_server: RedisServer, s3_server: S3Server
) -> None:
    prefix, queue = _names()
    redis = await _queued(redis_server, queue, s3_server.bucket, prefix)
    with socket.socket() as closed:  # a port nothing listens on: S3 unreachable
        closed.bind(("127.0.0.1", 0))
        unreachable = f"http://127.0.0.1:{closed.getsockname()[1]}"
    worker = Worker(
        RedisQueue(redis_server.url, queue, visibility_timeout_s=5),
        S3MemoryStore(s3_server.bucket, prefix, endpoint_url=unreachable, max_attempts=1),
        EXTRACT,
        max_attempts=3,
        retry_base_s=0.05,
        sweep_interval_s=60,
    )
    stop = asyncio.Event()
    task = asyncio.create_task(worker.run(stop))
    try:
        await _dead_letter(redis)
    finally:
        stop.set()
        await asyncio.wait_for(task, timeout=30)
        await worker.queue.aclose()
    dead = await redis.dead()
    await redis.aclose()
    assert worker.done == 3  # three runs, then failed for good
    assert len(dead) == 1 and "after 3 attempts" in dead[0]["reason"]
    assert "unreachable" in dead[0]["reason"]


async def test_garbage_on_the_queue_is_set_aside_and_the_worker_goes_on(
    redis_server: RedisServer, s3_server: S3Server, tmp_path: Path
) -> None:
    prefix, queue = _names()
    store = S3MemoryStore(s3_server.bucket, prefix, endpoint_url=s3_server.endpoint_url)
    redis = RedisQueue(redis_server.url, queue)
    client, keys = redis.client(), redis.keys
    await client.lpush(keys["ready"], "no-such-message")
    await client.hset(keys["body"], "0123456789abcdef:x", "{not json")
    await client.lpush(keys["ready"], "0123456789abcdef:x")
    await client.hset(keys["body"], "0123456789abcdef:y", '{"store": {"bucket": 1}}')
    await client.lpush(keys["ready"], "0123456789abcdef:y")
    session = await _run(
        tmp_path / "ws", store, RedisScheduler(redis_server.url, queue=queue), "g1"
    )
    await session.stop()  # a real job, behind the garbage
    async with _worker(redis_server.url, s3_server, prefix, queue):
        await _memory_citing(store, "g1")
    dead = await redis.dead()
    await redis.aclose()
    assert sorted(d["id"] for d in dead) == [
        "0123456789abcdef:x",
        "0123456789abcdef:y",
        "no-such-message",
    ]
    assert all("not a memory job" in d["reason"] for d in dead)


async def test_a_job_outside_the_workers_store_is_refused_once(
    redis_server: RedisServer, s3_server: S3Server
) -> None:
    prefix, queue = _names()
    redis = await _queued(redis_server, queue, s3_server.bucket, "elsewhere")
    async with _worker(redis_server.url, s3_server, prefix, queue) as worker:
        await _dead_letter(redis)
    dead = await redis.dead()
    await redis.aclose()
    assert len(dead) == 1 and "outside" in dead[0]["reason"]
    assert worker.done == 1


# ---------------------------------------------------------------- the frozen proxy itself


class SilentService:
    """A TCP service that accepts and reads but answers only when told (``answer``)."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.listener.getsockname()[1])
        self.conns: list[socket.socket] = []
        self.listener.settimeout(HANG_GUARD_S)

    def take(self) -> socket.socket:
        conn, _ = self.listener.accept()
        self.conns.append(conn)
        return conn

    def close(self) -> None:
        for sock in [*self.conns, self.listener]:
            sock.close()


@pytest.mark.parametrize("case", ["held while frozen", "sent, never answered", "idle", "late"])
def test_closing_the_proxy_ends_a_connection_whose_client_waits_for_an_answer(
    case: str,
) -> None:
    """A client waiting on a connection through the proxy sees it end at ``close()``, however
    the connection stands; an answer the service gives after that never reaches it (the
    frozen-store test's teardown hung on a client whose held request was answered late)."""
    service = SilentService()
    proxy = FreezableProxy(service.port)
    client = socket.create_connection(("127.0.0.1", proxy.port), timeout=HANG_GUARD_S)
    try:
        upstream = service.take()  # the proxy connects upstream as it accepts
        if case == "held while frozen":
            proxy.freeze()
            client.sendall(b"PUT /pending HTTP/1.1\r\n\r\n")
        elif case in ("sent, never answered", "late"):
            client.sendall(b"PUT /pending HTTP/1.1\r\n\r\n")
            assert upstream.recv(100).startswith(b"PUT /pending")  # it got through
        proxy.close()
        if case == "late":
            with contextlib.suppress(OSError):  # the proxy's end is gone: refused or not
                upstream.sendall(b"HTTP/1.1 200 OK\r\n\r\n")
        # the guard is the client's timeout: without the fix this raises TimeoutError
        try:
            got = client.recv(100)
        except ConnectionResetError:
            got = b""
        assert got == b""  # the end of the connection, no answer
        with pytest.raises(OSError):  # and nothing is accepted any more
            socket.create_connection(("127.0.0.1", proxy.port), timeout=HANG_GUARD_S)
    finally:
        client.close()
        proxy.close()
        service.close()
