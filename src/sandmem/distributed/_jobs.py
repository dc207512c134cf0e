"""A generation job as it travels: parsed once, where it enters a worker, into a typed value.

A job names one layout of a store: ``{"store": {"bucket", "prefix", "endpoint_url"},
"memories_dir", "sessions_dir", "enqueued_at", "attempt"}``. It comes from the queue (put
there by a session's stop or by a sweeper) or from a pending mark in the store; both are
untrusted bytes, so ``parse_job`` is the one place they are checked. Anything it refuses is a
poison message: the worker moves it to the dead-letter list and goes on.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from sandmem._errors import UserError
from sandmem.memory._store_seam import safe_name


class StoreSpec(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    bucket: str
    prefix: str = ""
    endpoint_url: str | None = None

    @field_validator("prefix")
    @classmethod
    def _plain_prefix(cls, value: str) -> str:
        """Plain components only: no empty, ``.`` or ``..`` one (a server may normalize it
        away and so leave the worker's ``--store`` prefix), no backslash, NUL or other
        control character, at most 1,024 characters (``safe_name``'s rule)."""
        if value.strip("/") and not safe_name(value.strip("/")):
            raise ValueError(f"invalid store prefix {value!r}")
        return value


class JobMessage(BaseModel):
    """One job: which layout to generate memory for."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    store: StoreSpec
    memories_dir: str = Field(min_length=1)
    sessions_dir: str = Field(min_length=1)
    enqueued_at: float = Field(default=0.0, ge=0.0, allow_inf_nan=False)
    #: how many times this job has run and failed with a retryable error
    attempt: int = Field(default=0, ge=0, le=1000)

    @model_validator(mode="after")
    def _valid_layout(self) -> JobMessage:
        """The layout a valid ``MemoryLayoutConfig`` accepts: relative, normalized, no
        ``..``, two separate directories (issue 25: a job names only valid layouts)."""
        from sandmem.memory.config import MemoryLayoutConfig

        MemoryLayoutConfig(memories_dir=self.memories_dir, sessions_dir=self.sessions_dir)
        return self

    @property
    def layout(self) -> str:
        """The layout's name (also the lease's)."""
        prefix = self.store.prefix.strip("/")
        return "/".join(p for p in (self.store.bucket, prefix, self.memories_dir) if p)

    @property
    def layout_id(self) -> str:
        """A short fixed-length id of the layout (one queued job per layout)."""
        key = json.dumps([self.store.bucket, self.store.prefix, self.memories_dir])
        return hashlib.sha256(key.encode()).hexdigest()[:16]

    def encode(self) -> bytes:
        return self.model_dump_json().encode()


class PoisonMessage(UserError):
    """A queue entry or pending mark that is not a job."""


def parse_job(raw: bytes | str | None) -> JobMessage:
    """The job in ``raw``, or ``PoisonMessage`` saying why it is not one."""
    if raw is None:
        raise PoisonMessage("the queue entry has no body")
    try:
        return JobMessage.model_validate_json(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or "message"
        raise PoisonMessage(f"not a memory job ({where}: {first.get('msg')})") from None


def mark_job(store: StoreSpec, raw: bytes) -> JobMessage:
    """The job a pending mark (``{"prefix", "memories_dir", "sessions_dir"}``) stands for."""
    try:
        data: Any = json.loads(raw)
    except ValueError:
        raise PoisonMessage("a pending mark is not JSON") from None
    if not isinstance(data, dict):
        raise PoisonMessage("a pending mark is not an object")
    spec = {
        "bucket": store.bucket,
        "prefix": data.get("prefix"),
        "endpoint_url": store.endpoint_url,
    }
    return parse_job(json.dumps({**data, "store": spec}))
