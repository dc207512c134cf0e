"""``sandmem worker``: a Celery worker that generates memory for layouts in an S3 store."""

from __future__ import annotations

import os
import socket

import click

from sandmem.memory import EXTRACTIVE, MemoryGenerateConfig


@click.command("worker")
@click.option("--broker", required=True, help="Celery broker URL, e.g. redis://host:6379/0.")
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
    "--lease-ttl", default=30.0, show_default=True, help="Seconds; renewed by the holder."
)
@click.option(
    "--visibility-timeout",
    default=3600.0,
    show_default=True,
    help="Seconds before an unacknowledged job is redelivered (a killed worker's job).",
)
@click.option("--name", default=None, help="Worker node name [sandmem@HOST-PID].")
def worker_command(
    broker: str,
    store_url: str,
    endpoint_url: str | None,
    model: str | None,
    phase_one_model: str | None,
    phase_two_model: str | None,
    engine: str | None,
    queue: str,
    lease_ttl: float,
    visibility_timeout: float,
    name: str | None,
) -> None:
    """Run a worker that executes deferred memory generation jobs.

    Sessions whose layout has an S3MemoryStore and MemoryGenerateConfig(schedule=
    CeleryScheduler(...)) push their rollouts at stop and enqueue a job; this worker runs it
    with the same two-phase pipeline, retry state, redaction and verification as inline
    generation. Run as many as you like, on any host: a lease per layout keeps one writer.
    """
    from sandmem.distributed._celery import worker_app
    from sandmem.distributed._s3 import S3MemoryStore

    one = engine or phase_one_model or model
    two = engine or phase_two_model or model
    fields: dict[str, object] = {}
    if one:
        fields |= {"phase_one_model": one, "phase_one_model_settings": None}
    if two:
        fields |= {"phase_two_model": two, "phase_two_model_settings": None}
    config = MemoryGenerateConfig.model_validate(fields)
    root = S3MemoryStore.from_url(store_url, endpoint_url=endpoint_url)
    app = worker_app(
        broker,
        root,
        config,
        queue=queue,
        lease_ttl_s=lease_ttl,
        visibility_timeout_s=visibility_timeout,
    )
    node = name or f"sandmem@{socket.gethostname()}-{os.getpid()}"
    click.echo(
        f"sandmem worker {node}: jobs from {broker} (queue {queue}), memory in "
        f"{root.describe()}; phase one {config.phase_one_model}, phase two "
        f"{config.phase_two_model}",
        err=True,
    )
    app.worker_main(
        [
            "worker",
            "-P",
            "solo",
            "-Q",
            queue,
            "-n",
            node,
            "--loglevel",
            os.environ.get("SANDMEM_WORKER_LOGLEVEL", "WARNING"),
        ]
    )
