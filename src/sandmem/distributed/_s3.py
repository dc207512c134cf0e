"""``S3MemoryStore``: a layout's rollouts and memory versions in S3-compatible storage.

Built on botocore (``boto3``'s core, the ``distributed`` extra): it is the reference S3
client, speaks to AWS and to every S3-compatible server (MinIO, SeaweedFS, Ceph, R2), and sends
the conditional writes (``IfMatch`` / ``IfNoneMatch`` on ``put_object``) that the version switch
relies on. Its calls block, so each runs in a worker thread; the client skips per-request
work the store never uses (``_botocore.lean_client``). Every request is bounded: a connect
timeout, a read timeout and a number of attempts (botocore's ``standard`` retry mode, which
backs off with jitter on network errors, 5xx and throttling), all settings of the store.

Requests are what a generation job spends most of its CPU on (about 1 ms of botocore each, as
much again in the server), so a commit is one **pack** of the files that changed plus the
``CURRENT`` switch, and reading a version is one download per pack (``commit``).

Errors are translated at one boundary (``_request``, with ``_botocore.translated``) into the
store's exception tree (drawn in ``distributed/_botocore.py``). A conditional write refused
because its key already holds exactly its bytes counts as written (``_put``): a retry or a late
delivery of the same request made it, not a rival.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import threading
import time
from typing import Any
from urllib.parse import urlparse

from sandmem._errors import UserError
from sandmem.distributed._botocore import lean_client, read_object, translated
from sandmem.memory._store_seam import (
    MalformedStoreObject,
    MemoryStore,
    MemoryStoreConflict,
    MemoryStoreError,
    MemoryVersion,
    new_sequence,
    sha256,
)

logger = logging.getLogger("sandmem.distributed")

_PENDING_DIR = "pending"
#: the name ending of a version's pack: ``versions/<id>.pack`` holds the files it uploaded
_PACK = ".pack"
#: a version never spreads its files over more packs than this (see ``commit``)
_PACKS_MAX = 8


@dataclasses.dataclass
class _Listing:
    """Keys listed under ``root`` at one moment, and the prefixes already answered from them."""

    root: str
    keys: list[str]
    taken: set[str] = dataclasses.field(default_factory=set)


class S3MemoryStore(MemoryStore):
    """Memory in ``s3://bucket/prefix``. ``endpoint_url`` selects an S3-compatible server;
    credentials and region come from the arguments or boto3's usual sources (environment,
    config files, instance roles)."""

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        endpoint_url: str | None = None,
        *,
        region_name: str | None = None,
        aws_access_key_id: str | None = None,
        aws_secret_access_key: str | None = None,
        max_parallel: int = 16,
        connect_timeout_s: float = 5.0,
        read_timeout_s: float = 20.0,
        max_attempts: int = 3,
    ) -> None:
        if not bucket or "/" in bucket:
            raise UserError(f"S3MemoryStore needs a bucket name, got {bucket!r}")
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.endpoint_url = endpoint_url
        self._client_args = {
            "endpoint_url": endpoint_url,
            "region_name": region_name,
            "aws_access_key_id": aws_access_key_id,
            "aws_secret_access_key": aws_secret_access_key,
        }
        self._max_parallel = max_parallel
        #: bounds of every request: botocore's connect and read timeouts and total attempts
        self.connect_timeout_s = connect_timeout_s
        self.read_timeout_s = read_timeout_s
        self.max_attempts = max_attempts
        #: one boto3 client shared by this store and its children (boto3 clients are
        #: thread-safe); created in a worker thread on first use, never on the event loop
        self._shared: dict[str, Any] = {}
        self._client_lock = threading.Lock()
        self._gate = asyncio.Semaphore(max_parallel)
        #: a listing made ahead for a job (``prefetch``)
        self._prefetched: _Listing | None = None

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> S3MemoryStore:
        """``s3://bucket/prefix`` → a store."""
        parsed = urlparse(url)
        if parsed.scheme != "s3" or not parsed.netloc:
            raise UserError(f"a store URL looks like s3://bucket/prefix, got {url!r}")
        return cls(parsed.netloc, parsed.path, **kwargs)

    def describe(self) -> str:
        where = f" at {self.endpoint_url}" if self.endpoint_url else ""
        return f"s3://{self.bucket}/{self.prefix}{where}"

    def child(self, prefix: str) -> S3MemoryStore:
        """The same bucket and credentials under ``prefix`` (relative to this store's)."""
        other = S3MemoryStore.__new__(S3MemoryStore)
        other.__dict__.update(self.__dict__)
        other.prefix = "/".join(p for p in (self.prefix, prefix.strip("/")) if p)
        other._gate = asyncio.Semaphore(self._max_parallel)
        other._prefetched = None
        return other

    def spec(self) -> dict[str, Any]:
        """What a worker needs to open this store (no secrets: workers bring their own)."""
        return {"bucket": self.bucket, "prefix": self.prefix, "endpoint_url": self.endpoint_url}

    # -- plumbing -------------------------------------------------------------------------

    def _make_client(self) -> Any:
        with self._client_lock:
            if "client" not in self._shared:
                self._shared["client"] = lean_client(
                    max_pool_connections=self._max_parallel,
                    connect_timeout=self.connect_timeout_s,
                    read_timeout=self.read_timeout_s,
                    retries={"mode": "standard", "total_max_attempts": self.max_attempts},
                    **{k: v for k, v in self._client_args.items() if v is not None},
                )
            return self._shared["client"]

    def _key(self, *parts: str) -> str:
        return "/".join(p.strip("/") for p in (self.prefix, *parts) if p.strip("/"))

    async def _call(self, method: str, **kwargs: Any) -> Any:
        return await self._request(method, kwargs)

    async def _get(self, key: str) -> tuple[bytes, str]:
        body, etag = await self._request("get_object", {"Key": key}, read=True)
        return body, etag

    async def _request(self, method: str, kwargs: dict[str, Any], read: bool = False) -> Any:
        """One request, in a worker thread; with ``read`` the body is read in that thread too
        and returned as ``(body, etag)``. Every error of the request or its body is translated
        here (see the module docstring)."""
        if "client" not in self._shared:
            await asyncio.to_thread(self._make_client)
        async with self._gate:
            try:
                fn = getattr(self._shared["client"], method)
                if read:
                    return await asyncio.to_thread(read_object, fn, Bucket=self.bucket, **kwargs)
                return await asyncio.to_thread(fn, Bucket=self.bucket, **kwargs)
            except Exception as exc:
                error = translated(exc, self.describe(), str(kwargs.get("Key", "")))
                if error is None:
                    raise
                raise error from exc

    async def _get_many(self, keys: list[str]) -> list[bytes | None]:
        """The bytes of each key; ``None`` for one too large (skipped and logged: one bad
        object never blocks the layout)."""

        async def one(key: str) -> bytes | None:
            try:
                return (await self._get(key))[0]
            except MalformedStoreObject as exc:
                logger.warning("skipped a store object: %s", exc)
                return None

        return list(await asyncio.gather(*(one(key) for key in keys)))

    async def _put(self, key: str, data: bytes, **conditions: str) -> str:
        """Write ``key``; its tag. A conditional write refused because ``key`` already holds
        exactly ``data`` succeeded: an earlier attempt of this same request made it (botocore
        retried after the answer was lost, or a connection's held request was delivered late),
        so the refusal is not a rival's version. Any other refusal is ``MemoryStoreConflict``."""
        try:
            response = await self._call("put_object", Key=key, Body=data, **conditions)
        except MemoryStoreConflict:
            etag = await self._holding(key, data)
            if etag is None:
                raise
            return etag
        return str(response.get("ETag", ""))

    async def _holding(self, key: str, data: bytes) -> str | None:
        """The tag of ``key`` when it holds exactly ``data`` now, else ``None``."""
        try:
            body, etag = await self._get(key)
        except (FileNotFoundError, MalformedStoreObject):
            return None
        return etag if body == data else None

    async def _list(self, prefix: str) -> list[str]:
        keys: list[str] = []
        token: str | None = None
        while True:
            extra = {"ContinuationToken": token} if token else {}
            page = await self._call("list_objects_v2", Prefix=prefix + "/", **extra)
            keys += [str(item["Key"]) for item in page.get("Contents", [])]
            if not page.get("IsTruncated"):
                return sorted(keys)
            token = page.get("NextContinuationToken")

    async def _list_once(self, prefix: str) -> list[str]:
        """The keys under ``prefix``: from the listing ``prefetch`` made when it covers
        ``prefix`` and no earlier call took that part of it, else from a new listing."""
        held = self._prefetched
        if held is not None and prefix.startswith(held.root + "/") and prefix not in held.taken:
            held.taken.add(prefix)
            return [key for key in held.keys if key.startswith(prefix + "/")]
        return await self._list(prefix)

    async def _delete(self, keys: list[str]) -> None:
        for start in range(0, len(keys), 1000):
            batch = [{"Key": key} for key in keys[start : start + 1000]]
            await self._call("delete_objects", Delete={"Objects": batch})

    async def warm(self) -> None:
        """Make the client and open a connection now (a worker does this before its first
        job)."""
        await self._call("head_bucket")

    async def ensure_bucket(self) -> None:
        """Create the bucket when it does not exist (for tests and first use)."""
        try:
            await self._call("head_bucket")
        except (FileNotFoundError, MemoryStoreError):
            await self._call("create_bucket")

    # -- the store seam --------------------------------------------------------------------

    async def put_segment(
        self, sessions_dir: str, rollout_id: str, data: bytes, *, sequence: str | None = None
    ) -> str:
        key = self._key(sessions_dir, rollout_id, f"{sequence or new_sequence()}.jsonl")
        await self._put(key, data, IfNoneMatch="*")
        return key

    async def segments(self, sessions_dir: str) -> dict[str, list[bytes]]:
        base = self._key(sessions_dir)
        keys = [k for k in await self._list(base) if k.endswith(".jsonl")]
        bodies = await self._get_many(keys)
        out: dict[str, list[bytes]] = {}
        for key, body in zip(keys, bodies, strict=True):
            if body is not None:
                rollout_id = key[len(base) + 1 :].split("/", 1)[0]
                out.setdefault(rollout_id, []).append(body)
        return out

    async def current(self, memories_dir: str) -> MemoryVersion | None:
        try:
            raw, etag = await self._get(self._key(memories_dir, "CURRENT"))
        except FileNotFoundError:
            return None
        return MemoryVersion.from_json(raw, etag)

    def _pack_key(self, memories_dir: str, vid: str) -> str:
        return self._key(memories_dir, "versions", f"{vid}{_PACK}")

    def _file_key(self, memories_dir: str, version: MemoryVersion, path: str) -> str:
        """The object holding ``path``'s bytes: its home's pack, or (a version written before
        packs) an object of its own."""
        if path in version.spans:
            return self._pack_key(memories_dir, version.home(path))
        return self._key(memories_dir, "versions", version.home(path), path)

    async def read_files(
        self, memories_dir: str, version: MemoryVersion, paths: list[str]
    ) -> dict[str, bytes]:
        """One request per object (a pack serves all its files). A file whose object is too
        large, or whose bytes do not match its digest, is skipped (logged): one bad object
        never blocks the layout, and its bytes are never used."""
        keys = {p: self._file_key(memories_dir, version, p) for p in paths}
        unique = sorted(set(keys.values()))
        bodies = dict(zip(unique, await self._get_many(unique), strict=True))
        out: dict[str, bytes] = {}
        for path, key in keys.items():
            data = bodies[key]
            if data is None:
                continue
            if path in version.spans:
                offset, length = version.spans[path]
                data = data[offset : offset + length]
            if sha256(data) != version.files[path]:
                logger.warning(
                    "skipped %s of memory version %s in %s: it does not match its digest",
                    path,
                    version.version,
                    self.describe(),
                )
                continue
            out[path] = data
        return out

    async def commit(
        self,
        memories_dir: str,
        base: MemoryVersion | None,
        files: dict[str, bytes],
        *,
        fence: int = 0,
        fresh: bool = False,
    ) -> MemoryVersion:
        """Upload the files that changed since ``base`` (all of them when ``fresh``) as one
        pack under a new version id (an unchanged file keeps the pack it is in, named in
        ``homes``), then switch ``CURRENT``. A version whose files would lie in more than
        ``_PACKS_MAX`` packs is written as one new pack of them all, so a reader never needs
        more requests than that."""
        if base is not None and fence and base.fence > fence:
            raise MemoryStoreConflict(
                f"{self.describe()}: a writer with a newer lease (fence {base.fence}) committed"
            )
        vid = new_sequence()
        digests = {p: sha256(d) for p, d in files.items()}
        # a file keeps its place when its bytes are unchanged and already in a pack
        same = base.files if base is not None else {}
        kept = base.spans if base is not None and not fresh else {}
        reused = {p for p, digest in digests.items() if p in kept and same.get(p) == digest}
        homes = {p: base.home(p) for p in reused} if base is not None else {}
        if len(set(homes.values())) >= _PACKS_MAX:  # spread too thin: one new pack of all
            reused, homes = set(), {}
        spans = {p: kept[p] for p in reused}
        pack: list[bytes] = []
        offset = 0
        for path, data in files.items():
            if path not in reused:
                spans[path] = (offset, len(data))
                pack.append(data)
                offset += len(data)
        key = self._pack_key(memories_dir, vid)
        if pack:
            await self._put(key, b"".join(pack))
        version = MemoryVersion(
            vid, digests, fence=fence, updated_at=time.time(), homes=homes, spans=spans
        )
        condition = {"IfMatch": base.etag} if base is not None else {"IfNoneMatch": "*"}
        try:
            etag = await self._put(
                self._key(memories_dir, "CURRENT"), version.to_json(), **condition
            )
        except MemoryStoreConflict:
            if pack:
                await self._delete([key])
            raise
        committed = dataclasses.replace(version, etag=etag)
        if base is not None:
            await self._prune(memories_dir, committed, base)
        return committed

    # -- the history mirror: <memories_dir>/history/<name> -------------------------------

    async def put_history(self, memories_dir: str, files: dict[str, bytes]) -> None:
        await asyncio.gather(
            *(self._put(self._key(memories_dir, "history", n), d) for n, d in files.items())
        )

    async def history_names(self, memories_dir: str) -> list[str]:
        root = self._key(memories_dir, "history")
        return [key[len(root) + 1 :] for key in await self._list_once(root)]

    async def read_history(self, memories_dir: str, names: list[str]) -> dict[str, bytes]:
        async def one(name: str) -> tuple[str, bytes | None]:
            try:
                return name, (await self._get(self._key(memories_dir, "history", name)))[0]
            except (FileNotFoundError, MalformedStoreObject):
                return name, None

        found = await asyncio.gather(*(one(n) for n in names))
        return {name: data for name, data in found if data is not None}

    async def delete_history(self, memories_dir: str, names: list[str]) -> None:
        await self._delete([self._key(memories_dir, "history", n) for n in names])

    async def _prune(self, memories_dir: str, new: MemoryVersion, base: MemoryVersion) -> None:
        """Remove uploads older than the version just replaced that neither it nor the new
        one uses: a reader may still be on the replaced one, and a newer id may be another
        writer's upload in progress."""
        root = self._key(memories_dir, "versions")
        used = {self._file_key(memories_dir, v, p) for v in (new, base) for p in v.files}
        stale = []
        for key in await self._list_once(root):
            home = key[len(root) + 1 :].split("/", 1)[0].removesuffix(_PACK)
            if home < base.version and key not in used:
                stale.append(key)
        if stale:
            await self._delete(stale)

    # -- pending marks (the sweeper's index of layouts with work no job has seen) ----------

    async def mark_pending(self, memories_dir: str, sessions_dir: str) -> None:
        body = {"prefix": self.prefix, "memories_dir": memories_dir, "sessions_dir": sessions_dir}
        key = self._key(memories_dir, _PENDING_DIR, f"{new_sequence()}.json")
        await self._put(key, json.dumps(body).encode(), IfNoneMatch="*")

    async def pending_marks(self, memories_dir: str) -> list[str]:
        return await self._list_once(self._key(memories_dir, _PENDING_DIR))

    async def prefetch(self, memories_dir: str) -> None:
        """One listing of the memories dir for the three a job makes next (its pending marks,
        the history mirror, the uploads its first commit prunes): each is answered once from
        it. A listing only misses what was written after it, which the next job sees."""
        root = self._key(memories_dir)
        self._prefetched = _Listing(root, await self._list(root))

    async def clear_marks(self, memories_dir: str, marks: list[str]) -> None:
        root = self._key(memories_dir, _PENDING_DIR) + "/"
        mine = [key for key in marks if key.startswith(root)]
        if mine:
            await self._delete(mine)

    async def find_pending(self) -> list[tuple[str, float, bytes]]:
        """Every pending mark under this store's prefix: its key, its age in seconds (from the
        sequence in its name) and its body. One listing of the whole prefix (1,000 keys a
        request): the sweeper calls it at a worker's start and every sweep interval."""
        now = time.time_ns()
        marks: list[tuple[str, float]] = []
        for key in await self._list(self.prefix) if self.prefix else await self._list_all():
            parts = key.rsplit("/", 2)
            if len(parts) == 3 and parts[1] == _PENDING_DIR and parts[2].endswith(".json"):
                stamp = parts[2].split("-", 1)[0]
                age = (now - int(stamp)) / 1e9 if stamp.isdigit() else 0.0
                marks.append((key, age))
        out = []
        for key, age in marks:
            try:
                body, _ = await self._get(key)
            except FileNotFoundError:
                continue  # a job cleared it meanwhile
            except MalformedStoreObject as exc:
                logger.warning("skipped a pending mark: %s", exc)
                continue
            out.append((key, age, body))
        return out

    async def _list_all(self) -> list[str]:
        keys: list[str] = []
        token: str | None = None
        while True:
            extra = {"ContinuationToken": token} if token else {}
            page = await self._call("list_objects_v2", **extra)
            keys += [str(item["Key"]) for item in page.get("Contents", [])]
            if not page.get("IsTruncated"):
                return sorted(keys)
            token = page.get("NextContinuationToken")
