"""``sandmem worker``: runs deferred memory generation jobs for layouts in an S3 store."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import sys
from typing import TYPE_CHECKING

import click

from sandmem._log_lines import OneLineWarnings, RedactLogRecords, one_line, redact
from sandmem.cli._models import client_options
from sandmem.memory import EXTRACTIVE, MemoryGenerateConfig

if TYPE_CHECKING:
    from sandmem.distributed._worker import Worker


@click.command("worker")
@click.option(
    "--broker",
    envvar="SANDMEM_BROKER_URL",
    required=True,
    help="Redis URL, e.g. redis://:PASSWORD@host:6379/0 or rediss:// for TLS "
    "[$SANDMEM_BROKER_URL, which keeps a password off the command line].",
)
@click.option("--store", "store_url", required=True, help="s3://bucket/prefix the jobs are in.")
@click.option(
    "--endpoint-url",
    default=lambda: os.environ.get("SANDMEM_S3_ENDPOINT_URL"),
    help="S3-compatible endpoint [$SANDMEM_S3_ENDPOINT_URL; AWS when unset].",
)
@click.option("--model", "-m", default=None, help="Model of both memory phases.")
@click.option("--phase-one-model", default=None, help="Phase-one model [--model].")
@click.option("--phase-two-model", default=None, help="Phase-two model [--model].")
@click.option("--engine", type=click.Choice([EXTRACTIVE]), default=None, help="Model-free.")
@click.option("--queue", default="sandmem-memory", show_default=True)
@click.option(
    "--concurrency", "-c", default=8, show_default=True, help="Jobs at once (one event loop)."
)
@click.option(
    "--lease-ttl", default=30.0, show_default=True, help="Seconds; renewed by the holder."
)
@click.option(
    "--visibility-timeout",
    default=30.0,
    show_default=True,
    help="Seconds without a heartbeat before a job is given to another worker.",
)
@click.option(
    "--sweep-interval",
    default=300.0,
    show_default=True,
    help="Seconds between sweeps of the store's pending marks (and their minimum age).",
)
@click.option("--max-attempts", default=8, show_default=True, help="Runs of a failing job.")
@click.option("--retry-cap", default=300.0, show_default=True, help="Longest retry delay (s).")
@click.option("--s3-connect-timeout", default=5.0, show_default=True, help="Seconds.")
@click.option("--s3-read-timeout", default=20.0, show_default=True, help="Seconds.")
@click.option(
    "--stop-grace",
    default=10.0,
    show_default=True,
    help="Seconds a stop lets running jobs finish; the rest go back on the queue.",
)
@click.option("--name", default=None, help="Worker name in its banner [sandmem@HOST-PID].")
@client_options
def worker_command(
    broker: str,
    store_url: str,
    endpoint_url: str | None,
    model: str | None,
    phase_one_model: str | None,
    phase_two_model: str | None,
    engine: str | None,
    queue: str,
    concurrency: int,
    lease_ttl: float,
    visibility_timeout: float,
    sweep_interval: float,
    max_attempts: int,
    retry_cap: float,
    s3_connect_timeout: float,
    s3_read_timeout: float,
    stop_grace: float,
    name: str | None,
) -> None:
    """Run a worker that executes deferred memory generation jobs.

    Sessions whose layout has an S3MemoryStore and MemoryGenerateConfig(schedule=
    RedisScheduler(...)) push their rollouts at stop and enqueue a job; this worker runs it
    with the same two-phase pipeline, retry state, redaction and verification as inline
    generation, up to --concurrency jobs at once. Run as many as you like, on any host: a
    lease per layout keeps one writer. SIGTERM or Ctrl-C lets running jobs finish for up to
    --stop-grace seconds, puts the rest back on the queue, then exits.
    """
    from sandmem.distributed._queue import RedisQueue, redact_url
    from sandmem.distributed._s3 import S3MemoryStore
    from sandmem.distributed._worker import Worker

    one = engine or phase_one_model or model
    two = engine or phase_two_model or model
    fields: dict[str, object] = {}
    if one:
        fields |= {"phase_one_model": one, "phase_one_model_settings": None}
    if two:
        fields |= {"phase_two_model": two, "phase_two_model_settings": None}
    config = MemoryGenerateConfig.model_validate(fields)
    root = S3MemoryStore.from_url(
        store_url,
        endpoint_url=endpoint_url,
        max_parallel=max(16, 4 * concurrency),
        connect_timeout_s=s3_connect_timeout,
        read_timeout_s=s3_read_timeout,
    )
    worker = Worker(
        RedisQueue(broker, queue, visibility_timeout_s=visibility_timeout),
        root,
        config,
        concurrency=concurrency,
        lease_ttl_s=lease_ttl,
        sweep_interval_s=sweep_interval,
        max_attempts=max_attempts,
        retry_cap_s=retry_cap,
        stop_grace_s=stop_grace,
    )
    _log_to_stderr(os.environ.get("SANDMEM_WORKER_LOGLEVEL", "WARNING").upper())
    node = name or f"sandmem@{socket.gethostname()}-{os.getpid()}"
    click.echo(
        f"sandmem worker {node}: jobs from {redact_url(broker)} (queue {queue}, concurrency "
        f"{concurrency}), memory in {root.describe()}; phase one {config.phase_one_model}, "
        f"phase two {config.phase_two_model}; Ctrl-C or SIGTERM lets running jobs finish "
        f"(up to {stop_grace:g} s, then they go back on the queue), then stops",
        err=True,
    )
    asyncio.run(_serve(worker, node))  # ends the process itself after a signal


def _log_to_stderr(level: str) -> None:
    """The worker's log: every record of ``level`` and above on stderr, sandmem's own
    included (the CLI's one-line warnings would keep sandmem's INFO lines from the root
    logger), redacted (a server's error text may echo a key)."""
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for handler in logging.getLogger().handlers:
        handler.addFilter(RedactLogRecords())
    ours = logging.getLogger("sandmem")
    for handler in list(ours.handlers):
        if isinstance(handler, OneLineWarnings):  # the root's handler says it, with a time
            ours.removeHandler(handler)
    ours.propagate = True


async def _serve(worker: Worker, node: str) -> None:
    """Run until SIGTERM or SIGINT, then end the process: exit status 0 after SIGTERM, 130
    (128 + SIGINT, as every command) after Ctrl-C."""
    stop = asyncio.Event()
    got: list[signal.Signals] = []
    loop = asyncio.get_running_loop()

    def stopping(sig: signal.Signals) -> None:
        if not got:
            running = len(worker.running)
            click.echo(
                f"sandmem worker {node}: stopping; {running} running job(s) finish first (up "
                f"to {worker.stop_grace_s:g} s, then they go back on the queue)",
                err=True,
            )
        got.append(sig)
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stopping, sig)
    try:
        await worker.warm()
    except Exception as exc:  # the broker or the store is not there: one line, not a traceback
        raise click.ClickException(
            f"the worker could not start: {redact(one_line(f'{type(exc).__name__}: {exc}'))}; "
            "check --broker and --store (and that the services run)"
        ) from None
    click.echo(f"sandmem worker {node} ready.", err=True)
    await worker.run(stop)
    if got:
        back = f", {worker.put_back} put back on the queue" if worker.put_back else ""
        click.echo(
            f"sandmem worker {node} stopped ({got[0].name}): {worker.done} job(s) done{back}, "
            "each saved to the store as it finished; none left half-done",
            err=True,
        )
        # every job has settled or gone back to the queue; what may still run is a chore's
        # abandoned store or broker call in a thread (a sweep waiting out its S3 timeouts):
        # do not wait for it
        sys.stdout.flush()
        sys.stderr.flush()
        logging.shutdown()
        os._exit(130 if got[0] == signal.SIGINT else 0)
