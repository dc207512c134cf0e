"""Distributed memory: owns scale-out only (layouts in S3-compatible storage, generation on a
pool of workers) and imports ``memory``, ``sandboxes`` and the floors below; nothing in the
core imports it.

    from sandmem.distributed import RedisScheduler, S3MemoryStore

    store = S3MemoryStore("agent-memory", "team-a", endpoint_url="http://127.0.0.1:8333")
    Memory(
        layout=MemoryLayoutConfig(store=store),
        generate=MemoryGenerateConfig(schedule=RedisScheduler("redis://127.0.0.1:6379/0")),
    )

and on each worker host ``sandmem worker --broker redis://... --store s3://agent-memory/team-a``.
Needs the ``distributed`` extra (``pip install 'sandmem[distributed]'``: boto3, redis); the
names below import their libraries only when used. ``docs/scale-out.md`` has the
architecture and the guarantees.

The S3 memory store, the Redis job queue, scheduler and worker, Redis leases
(``sandmem.distributed.S3SnapshotSpec`` is defined in ``sandboxes``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sandmem.distributed._lease import LeaseBusy, LeaseLost, RedisLease
    from sandmem.distributed._queue import RedisQueue
    from sandmem.distributed._s3 import S3MemoryStore
    from sandmem.distributed._scheduler import CeleryScheduler, RedisScheduler
    from sandmem.distributed._worker import Worker
    from sandmem.memory._store_seam import MemoryStoreConflict, MemoryStoreError
    from sandmem.sandboxes._s3_snapshot import S3SnapshotSpec

__all__ = [
    "CeleryScheduler",
    "LeaseBusy",
    "LeaseLost",
    "MemoryStoreConflict",
    "MemoryStoreError",
    "RedisLease",
    "RedisQueue",
    "RedisScheduler",
    "S3MemoryStore",
    "S3SnapshotSpec",
    "Worker",
]

_WHERE = {
    "CeleryScheduler": "sandmem.distributed._scheduler",
    "LeaseBusy": "sandmem.distributed._lease",
    "LeaseLost": "sandmem.distributed._lease",
    "MemoryStoreConflict": "sandmem.memory._store_seam",
    "MemoryStoreError": "sandmem.memory._store_seam",
    "RedisLease": "sandmem.distributed._lease",
    "RedisQueue": "sandmem.distributed._queue",
    "RedisScheduler": "sandmem.distributed._scheduler",
    "S3MemoryStore": "sandmem.distributed._s3",
    "S3SnapshotSpec": "sandmem.sandboxes._s3_snapshot",
    "Worker": "sandmem.distributed._worker",
}


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'sandmem.distributed' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(_WHERE[name]), name)
