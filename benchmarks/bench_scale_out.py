"""Figure: scale-out — deferred memory generation on ``sandmem worker`` processes: one solo
worker (``--concurrency 1``), one process at ``--concurrency 16``, four such processes.

Real services on loopback (``tests/services.py``): a Redis server (broker and leases) and a
SeaweedFS S3 server (the memory store); the memory model is the fake OpenAI server answering
every request after ``delay_s`` (``bench_model.MemoryModel``). For each worker count a fresh
prefix gets ``layouts`` layouts of ``rollouts`` rollouts each (one pushed segment per rollout,
as a session's stop pushes them); the workers are started and wait idle; then one job per
layout is enqueued and the clock runs until every layout's current version holds a
consolidated memory (``phase_two_selection.json`` and every raw memory). The CPU time of each
process (workers, SeaweedFS, Redis, and this process, which runs the fake model server) is read
from ``/proc`` before and after, to say where the CPU goes. Session stop time is measured on
real sessions that ran an agent: inline generation (the stop runs both phases) vs deferred
(the stop pushes and enqueues).
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from bench_common import TESTS_DIR, Figure, fake_server, secs, table
from bench_model import MemoryModel

from sandmem import Filesystem, Memory, RunConfig, Runner, SandboxAgent, SandboxRunConfig, Shell
from sandmem.memory import MemoryGenerateConfig, MemoryLayoutConfig
from sandmem.models import OpenAIProvider
from sandmem.sandboxes import Manifest, UnixLocalSandboxClient
from sandmem.testing import FunctionModel, text

MODEL = "bench-memory"


def _services() -> Any:
    if str(TESTS_DIR) not in sys.path:
        sys.path.insert(0, str(TESTS_DIR))
    import services

    return services


def _segment(rollout_id: str, index: int) -> bytes:
    line = {
        "updated_at": f"2026-12-01T00:00:{index % 60:02d}.000Z",
        "rollout_id": rollout_id,
        "input": [{"role": "user", "content": f"Run the tests of module {index}."}],
        "generated_items": [{"role": "assistant", "content": f"The tests of module {index} pass."}],
        "final_output": f"The tests of module {index} pass.",
        "terminal_metadata": {
            "terminal_state": "completed",
            "exception_type": None,
            "exception_message": None,
            "has_final_output": True,
        },
    }
    return (json.dumps(line) + "\n").encode()


def _store(s3: Any, prefix: str) -> Any:
    from sandmem.distributed import S3MemoryStore

    return S3MemoryStore(s3.bucket, prefix, endpoint_url=s3.endpoint_url)


async def _seed(s3: Any, prefix: str, layouts: int, rollouts: int) -> None:
    root = _store(s3, prefix)
    await asyncio.gather(
        *(
            root.child(f"layout-{n:04d}").put_segment("sessions", f"r{r}", _segment(f"r{r}", r))
            for n in range(layouts)
            for r in range(rollouts)
        )
    )


def _cpu_s(pid: int, stat: str = "stat") -> float:
    """User + system CPU seconds of process ``pid`` (and its reaped children) so far; with
    ``stat="task/<pid>/stat"``, of its main thread alone."""
    fields = Path(f"/proc/{pid}/{stat}").read_text().rsplit(")", 1)[1].split()
    ticks = sum(int(v) for v in fields[11:15])  # utime, stime, cutime, cstime
    return ticks / os.sysconf("SC_CLK_TCK")


def _main_thread_s(pid: int) -> float:
    """CPU seconds of the main thread of ``pid``: a worker's event loop (the pipeline, the
    model client, Redis); the rest of a worker's CPU is its threads (S3 requests in botocore,
    lease renewals)."""
    return _cpu_s(pid, f"task/{pid}/stat")


def _machine_busy_s() -> float:
    """CPU seconds the whole machine spent busy so far (every process, ours or not)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    idle = fields[3] + fields[4]  # idle, iowait
    return (sum(fields) - idle) / os.sysconf("SC_CLK_TCK")


async def _enqueue(s3: Any, prefix: str, layouts: int, broker: str, queue: str) -> None:
    from sandmem.distributed import RedisScheduler
    from sandmem.memory.layout import MemoryPaths

    scheduler = RedisScheduler(broker, queue=queue)
    root = _store(s3, prefix)
    paths = MemoryPaths("memories", "sessions")
    for n in range(layouts):
        await scheduler.enqueue(root.child(f"layout-{n:04d}"), paths)


async def _done(s3: Any, prefix: str, layouts: int, rollouts: int) -> int:
    root = _store(s3, prefix)
    raws = {f"raw_memories/r{r}.md" for r in range(rollouts)}

    async def one(n: int) -> bool:
        current = await root.child(f"layout-{n:04d}").current("memories")
        return bool(
            current and "phase_two_selection.json" in current.files and raws <= set(current.files)
        )

    return sum(await asyncio.gather(*(one(n) for n in range(layouts))))


def _queue_idle(url: str, queue: str) -> bool:
    """No job waiting, running or due for a retry on ``queue``."""
    import redis

    from sandmem.distributed import RedisQueue

    keys = RedisQueue(url, queue).keys
    with redis.Redis.from_url(url) as client:
        pipe = client.pipeline()
        pipe.llen(keys["ready"]).zcard(keys["running"]).zcard(keys["delayed"])
        return not any(pipe.execute())


def _workers(
    count: int,
    concurrency: int,
    broker: str,
    s3: Any,
    prefix: str,
    queue: str,
    base_url: str,
    log: Path,
) -> list[subprocess.Popen[bytes]]:
    env = {
        **os.environ,
        "OPENAI_BASE_URL": base_url,
        "OPENAI_API_KEY": "bench",
        "SANDMEM_OPENAI_API": "chat_completions",
        "SANDMEM_WORKER_LOGLEVEL": "INFO",
    }
    procs = []
    for index in range(count):
        stream = (log.parent / f"{log.name}.{index}").open("wb")
        procs.append(
            subprocess.Popen(
                [
                    str(Path(sys.executable).with_name("sandmem")),
                    "worker",
                    "--broker",
                    broker,
                    "--store",
                    f"s3://{s3.bucket}/{prefix}",
                    "--endpoint-url",
                    s3.endpoint_url,
                    "--model",
                    MODEL,
                    "--queue",
                    queue,
                    "--concurrency",
                    str(concurrency),
                    "--name",
                    f"bench{index}@{queue}",
                ],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=stream,
            )
        )
        stream.close()
    deadline = time.monotonic() + 120
    while True:
        ready = sum(
            " ready." in (log.parent / f"{log.name}.{i}").read_text(errors="replace")
            for i in range(count)
        )
        if ready == count:
            return procs
        if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
            for proc in procs:
                proc.kill()
            raise RuntimeError(f"workers did not start; see {log}.*")
        time.sleep(0.1)


def _throughput(
    shape: tuple[int, int],
    layouts: int,
    rollouts: int,
    redis: Any,
    s3: Any,
    server: Any,
    tmp: Path,
) -> tuple[float, int, dict[str, float], int]:
    """Seconds until every layout was done, layouts done, CPU seconds by process group (and
    the machine's), and the model requests the jobs made."""
    count, concurrency = shape
    prefix = f"scale-{count}x{concurrency}-{uuid.uuid4().hex[:6]}"
    queue = f"bench-{uuid.uuid4().hex[:6]}"
    asyncio.run(_seed(s3, prefix, layouts, rollouts))
    log = tmp / f"w{count}x{concurrency}.log"
    procs = _workers(count, concurrency, redis.url, s3, prefix, queue, server.base_url, log)
    pids = {
        "workers": [p.pid for p in procs],
        "SeaweedFS": [s3.proc.pid],
        "Redis": [redis.proc.pid],
        "bench + fake model server": [os.getpid()],
    }
    try:
        cpu_before = {k: sum(_cpu_s(p) for p in v) for k, v in pids.items()}
        cpu_before[_LOOP] = sum(_main_thread_s(p) for p in pids["workers"])
        machine_before = _machine_busy_s()
        requests_before = len(server.requests)
        started = time.perf_counter()
        asyncio.run(_enqueue(s3, prefix, layouts, redis.url, queue))
        done, elapsed = 0, 0.0
        cpu: dict[str, float] = {}
        while done < layouts and time.perf_counter() - started < 3600:
            time.sleep(0.1)
            if not _queue_idle(redis.url, queue):
                continue  # cheap: three Redis commands, not one S3 request per layout
            elapsed = time.perf_counter() - started
            cpu = {k: sum(_cpu_s(p) for p in v) - cpu_before[k] for k, v in pids.items()}
            cpu[_LOOP] = sum(_main_thread_s(p) for p in pids["workers"]) - cpu_before[_LOOP]
            cpu[_MACHINE] = _machine_busy_s() - machine_before
            done = asyncio.run(_done(s3, prefix, layouts, rollouts))
        return elapsed, done, cpu, len(server.requests) - requests_before
    finally:
        for proc in procs:
            proc.kill()
            proc.wait(timeout=30)


async def _stop_times(
    s3: Any, broker: str, base_url: str, samples: int, tmp: Path
) -> dict[str, float]:
    from sandmem.distributed import CeleryScheduler

    provider = OpenAIProvider(api_key="bench", base_url=base_url, api="chat_completions")
    out: dict[str, float] = {}
    try:
        for mode in ("inline", "deferred"):
            durations = []
            for index in range(samples):
                schedule: Any = (
                    "inline"
                    if mode == "inline"
                    else CeleryScheduler(broker, queue=f"unconsumed-{uuid.uuid4().hex[:6]}")
                )
                generate = MemoryGenerateConfig(
                    phase_one_model=MODEL,
                    phase_one_model_settings=None,
                    phase_two_model=MODEL,
                    phase_two_model_settings=None,
                    model_provider=provider,
                    schedule=schedule,
                )
                store = _store(s3, f"stops-{mode}-{uuid.uuid4().hex[:6]}")
                agent = SandboxAgent(
                    name="bench",
                    model=FunctionModel(lambda _request: [text("done")]),
                    capabilities=[
                        Memory(layout=MemoryLayoutConfig(store=store), generate=generate),
                        Filesystem(),
                        Shell(),
                    ],
                )
                client = UnixLocalSandboxClient()
                session = await client.create(manifest=Manifest(root=tmp / f"{mode}-{index}"))
                await session.start()
                await Runner.run(
                    agent,
                    "Run the tests.",
                    run_config=RunConfig(sandbox=SandboxRunConfig(session=session)),
                    conversation_id=f"stop-{index}",
                )
                started = time.perf_counter()
                await session.stop()
                durations.append(time.perf_counter() - started)
                await client.delete(session)
            out[mode] = statistics.median(durations)
    finally:
        await provider.aclose()
    return out


def run(
    layouts: int = 200,
    rollouts: int = 4,
    shapes: tuple[tuple[int, int], ...] = ((1, 1), (1, 16), (4, 16)),
    delay_s: float = 0.3,
    stop_samples: int = 5,
) -> Figure:
    services = _services()
    with tempfile.TemporaryDirectory(prefix="sandmem-scale-") as tmp_name:
        tmp = Path(tmp_name)
        (tmp / "redis").mkdir()
        (tmp / "weed").mkdir()
        redis = services.start_redis(tmp / "redis")
        s3 = services.start_s3(tmp / "weed")
        server = fake_server(MemoryModel(delay_s=delay_s)).start()
        saved = {k: os.environ.get(k) for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}
        os.environ.update(AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench")
        os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
        try:
            stops = asyncio.run(_stop_times(s3, redis.url, server.base_url, stop_samples, tmp))
            results = {
                shape: _throughput(shape, layouts, rollouts, redis, s3, server, tmp)
                for shape in shapes
            }
        finally:
            server.stop()
            s3.stop()
            redis.stop()
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
    return _figure(layouts, rollouts, delay_s, stop_samples, stops, results)


#: the key of the whole machine's busy CPU seconds in a result's CPU split
_MACHINE = "machine"
#: the key of the workers' main threads (their event loops) in a result's CPU split
_LOOP = "worker event loops"


def _bound(
    results: dict[tuple[int, int], tuple[float, int, dict[str, float], int]],
    shape: tuple[int, int],
    solo_per_minute: float,
) -> str:
    """What held the run of ``shape`` back from ``concurrency`` x the solo rate."""
    if shape not in results:
        return ""
    elapsed, _, cpu, _ = results[shape]
    count, concurrency = shape
    core = cpu.get("workers", 0.0) / elapsed / count
    return (
        f"{concurrency} jobs in flight at a solo job's latency would make "
        f"{concurrency * solo_per_minute:.0f} a minute; the worker process kept "
        f"{core:.0%} of a core busy (one event loop, and Python runs one thread at a time), so "
        "what is left between the two is the worker's CPU and the latency it adds to each job."
    )


def _where(
    results: dict[tuple[int, int], tuple[float, int, dict[str, float], int]],
    shape: tuple[int, int],
) -> str:
    """Where a job's CPU went in the run of ``shape``, in a sentence."""
    if shape not in results:
        return ""
    _, done, cpu, _ = results[shape]
    jobs = max(done, 1) / 1000
    worker, loop = cpu.get("workers", 0.0), cpu.get(_LOOP, 0.0)
    return (
        f"Where its CPU went, a job: {worker / jobs:.0f} ms in the worker ({loop / jobs:.0f} ms on "
        f"its event loop, {(worker - loop) / jobs:.0f} ms in its threads, which make the S3 "
        f"requests), {cpu.get('SeaweedFS', 0.0) / jobs:.0f} ms in SeaweedFS, "
        f"{cpu.get('bench + fake model server', 0.0) / jobs:.0f} ms in the fake model server and "
        f"this script, {cpu.get('Redis', 0.0) / jobs:.0f} ms in Redis; the whole machine, other "
        f"work included, was busy {cpu.get(_MACHINE, 0.0) / jobs:.0f} ms a job."
    )


def _label(shape: tuple[int, int]) -> str:
    count, concurrency = shape
    return f"{count} process{'es' if count > 1 else ''} x concurrency {concurrency}"


def _figure(
    layouts: int,
    rollouts: int,
    delay_s: float,
    stop_samples: int,
    stops: dict[str, float],
    results: dict[tuple[int, int], tuple[float, int, dict[str, float], int]],
) -> Figure:
    per_minute = {k: done / elapsed * 60 for k, (elapsed, done, _, _) in results.items()}
    base = min(results)
    cores = os.cpu_count() or 1
    rows = []
    for shape, (elapsed, done, cpu_all, _) in results.items():
        cpu = {k: v for k, v in cpu_all.items() if k not in (_MACHINE, _LOOP)}
        total = sum(cpu.values())
        ms = 1000 / max(done, 1)  # seconds of CPU -> milliseconds a job
        worker, loop = cpu.get("workers", 0.0), cpu_all.get(_LOOP, 0.0)
        rows.append(
            [
                _label(shape),
                secs(elapsed),
                f"{done}/{layouts}",
                round(per_minute[shape], 1),
                f"{per_minute[shape] / per_minute[base]:.2f}x",
                f"{total / elapsed / cores:.0%}",
                f"{cpu_all.get(_MACHINE, 0.0) / elapsed / cores:.0%}",
                f"{worker * ms:.0f} ms (event loop {loop * ms:.0f}, threads "
                f"{(worker - loop) * ms:.0f})",
                ", ".join(f"{name} {v / total:.0%}" for name, v in cpu.items() if total),
            ]
        )
    requests = sum(r[3] for r in results.values()) / max(sum(r[1] for r in results.values()), 1)
    body = (
        f"{layouts} layouts x {rollouts} rollouts, each layout new (its first job), the fake "
        f"model server at {delay_s * 1000:.0f} ms per request ({requests:.1f} model requests a "
        f"job: {rollouts} extractions at once, then the consolidation), Redis and SeaweedFS on "
        "loopback, one job per layout enqueued after the workers were ready (warm: imports, "
        'model and S3 clients and connections made before the first job). "CPU used" is the '
        f"share of this machine's {cores} cores that these processes used during the run, "
        '"machine busy" the share every process on the machine used (other work included); '
        '"worker CPU a job" is the workers\' CPU time over the jobs done, split into their '
        "main threads (the event loop: the memory pipeline, the OpenAI client, Redis) and their "
        "other threads (S3 requests in botocore, lease renewals).\n\n"
        + table(
            [
                "workers",
                "all jobs done in",
                "layouts done",
                "jobs per minute",
                "vs solo",
                "CPU used",
                "machine busy",
                "worker CPU a job",
                "where the CPU went",
            ],
            rows,
        )
        + "\n\n"
        + table(
            ["session stop (median of " + str(stop_samples) + ")", "time"],
            [
                ["inline: the stop pushes, then runs both phases", secs(stops["inline"])],
                ["deferred: the stop pushes and enqueues", secs(stops["deferred"])],
            ],
        )
    )
    one = (1, 16)
    ratio = per_minute.get(one, 0.0) / per_minute[base]
    top = max(results)
    top_cpu = results[top][2].get(_MACHINE, 0.0) / results[top][0] / cores
    meaning = (
        f"One worker process at concurrency 16 ran {per_minute.get(one, 0.0):.1f} jobs per minute "
        f"against {per_minute[base]:.1f} for a solo worker ({ratio:.2f}x): its jobs wait on the "
        f"model together on one event loop. {_bound(results, one, per_minute[base])} "
        f"{_where(results, one)} "
        f"{_label(top)} ran {per_minute[top]:.1f} jobs per minute with the machine's CPU "
        f"{top_cpu:.0%} busy: "
        + (
            "CPU-bound, not latency-bound, on this machine."
            if top_cpu >= 0.8
            else "not CPU-bound on this machine."
        )
        + f" A deferred stop took {secs(stops['deferred'])} against {secs(stops['inline'])} for "
        f"an inline one ({stops['inline'] / stops['deferred']:.1f}x shorter): it pushes the "
        "segments and enqueues a job, and waits for no model."
    )
    status = None
    if base == (1, 1) and one in results and layouts >= 200:
        verdict = "met" if ratio >= 8 else "**MISSED**"
        status = (
            f"one process at concurrency 16 = {ratio:.2f}x a solo worker (target >= 8x): {verdict}."
        )
    return Figure(
        key="scale-out",
        number=9,
        title="scale-out: deferred generation on a worker pool",
        body=body,
        meaning=meaning,
        status=status,
        data={
            "stops": stops,
            "results": {_label(k): v for k, v in results.items()},
            "ratio": ratio,
        },
    )
