"""``S3SnapshotSpec``: a stopped session's workspace archived to S3-compatible storage, so
``client.resume(state)`` restores it on any host (the reference calls this a remote snapshot).

The archive is the local snapshot format, written to a local cache first (``base_path``) and
then uploaded to ``s3://bucket/prefix/<session_id>.tar``; a resume downloads it (the bucket is
the truth: a cached copy from an earlier stop on this host is replaced), then restores it with
all the local snapshot's checks. ``boto3`` (the ``distributed`` extra) is imported only when
an archive moves.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from sandmem._errors import SandboxError, SandboxStateError
from sandmem._extras import require
from sandmem.sandboxes._snapshot import LocalSnapshotSpec


def _default_cache() -> Path:
    return Path(tempfile.gettempdir()) / "sandmem-s3-snapshots"


class S3SnapshotSpec(LocalSnapshotSpec):
    """Snapshot to ``s3://bucket/prefix/<session_id>.tar`` when the session stops."""

    type: Literal["s3"] = "s3"  # type: ignore[assignment]
    bucket: str
    prefix: str = ""
    endpoint_url: str | None = None
    region_name: str | None = None
    base_path: Path = Field(default_factory=_default_cache)

    def __init__(
        self,
        bucket: str | None = None,
        prefix: str = "",
        endpoint_url: str | None = None,
        **data: Any,
    ) -> None:
        if bucket is not None:
            data["bucket"] = bucket
        data.setdefault("prefix", prefix)
        data.setdefault("endpoint_url", endpoint_url)
        super().__init__(**data)

    def _key(self, session_id: str) -> str:
        return "/".join(p for p in (self.prefix.strip("/"), f"{session_id}.tar") if p)

    def _client(self) -> Any:
        boto3 = require("boto3")
        args = {"endpoint_url": self.endpoint_url, "region_name": self.region_name}
        return boto3.session.Session().client(
            "s3", **{k: v for k, v in args.items() if v is not None}
        )

    def _where(self, session_id: str) -> str:
        return f"s3://{self.bucket}/{self._key(session_id)}"

    def upload(self, session_id: str) -> None:
        client = self._client()
        try:
            client.upload_file(str(self.path_for(session_id)), self.bucket, self._key(session_id))
        except Exception as exc:
            raise SandboxError(
                f"cannot upload the snapshot to {self._where(session_id)}: {exc}",
                operation="snapshot",
                path=self._where(session_id),
            ) from exc
        finally:
            client.close()

    def download(self, session_id: str) -> None:
        self.base_path.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.base_path, prefix=f".{session_id}.", suffix=".dl")
        os.close(fd)
        client = self._client()
        try:
            client.download_file(self.bucket, self._key(session_id), tmp)
            os.replace(tmp, self.path_for(session_id))
        except Exception as exc:
            raise SandboxStateError(
                f"cannot download the snapshot {self._where(session_id)}: {exc}; was the session "
                "stopped after it was created?",
                operation="resume",
                path=self._where(session_id),
            ) from exc
        finally:
            client.close()
            Path(tmp).unlink(missing_ok=True)

    def delete_remote(self, session_id: str) -> None:
        client = self._client()
        try:
            client.delete_object(Bucket=self.bucket, Key=self._key(session_id))
        finally:
            client.close()
