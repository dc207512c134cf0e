"""Memory history: one immutable, attributed version of a layout's memory files per change.

The history lives in the layout, under ``<memories_dir>/.history/`` (hidden, so it is never
read as memory, staged by a consolidation, or pushed to a store as a memory file):

```text
.history/
├── objects/<sha256>                 file contents, stored once each (plain bytes)
├── versions/<seq>-<epoch>-<tag>.json  one record per version: the files (name → sha256),
│                                    the conversations state (the selection's sha256) and the
│                                    attribution: kind, engine, model, rollouts, run, client
└── proposals/<id>.json              review mode: changes waiting for approve or dismiss
```

Plain content-addressed files, not git: every byte goes through the sandbox session (so
every backend, the in-memory one included, gets history for free); ``redact_history``
rewrites a blob and the records naming it, then deletes the old blob — there is no pack, no
reflog and no loose copy for a secret to survive in; and a version costs one small JSON record
plus the files that changed.

Making a version (``make_version``, called only by ``memory.journal`` under the layout lock)
writes the new blobs first and the record last, atomically: the record is the commit point.
A process killed before it leaves the previous version intact and, at most, unreferenced
blobs, which the next prune removes. Versions are numbered ``1, 2, ...`` per layout.

A record's name is its number, the second it was made and a **tag**: the first hex digits of
the SHA-256 of the record as first written (``00000012-1800000000-3f9c2a7d01be.json``). Two
clones of a project that each make version 12 in the same second (two branches, two hosts of
one store) so name their records apart, and a git merge adds both instead of reporting a
conflict; byte-identical records share a name, which git merges as one file. A record keeps
its name when it is rewritten (``redact-history``). Records named ``<seq>-<epoch>.json``, as
earlier releases wrote them, are read alike; records are ordered by number, then second,
then name.

Retention (``Retention``): the newest ``keep_versions`` (default 1,000) versions younger than
``keep_days`` (default 365) days are kept; the newest version is always kept. Pruning runs
when a version is made, in batches: once the count passes ``keep_versions`` by 5% (at least 1)
or the oldest version is a day past ``keep_days``, so a version costs no scan of the others.
"""

from __future__ import annotations

import difflib
import hashlib
import hmac
import json
import logging
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from typing import Annotated, Any, Literal, get_args

from pydantic import ConfigDict, Field, TypeAdapter
from pydantic.dataclasses import dataclass as record

from sandmem._errors import SandboxError, SandmemError, UserError
from sandmem.memory import _files
from sandmem.memory._records import Digest, MemoryName, Problem, is_digest, parse_record, report
from sandmem.memory.layout import HISTORY_DIR as HISTORY_DIR
from sandmem.memory.layout import MemoryPaths
from sandmem.sandboxes._session import SandboxSession
from sandmem.sandboxes._types import EntryKind

logger = logging.getLogger("sandmem.memory")

FORMAT = 1

ChangeKind = Literal[
    "consolidation", "live_edit", "hand_edit", "forget", "ingest", "mcp_write", "restore"
]
CHANGE_KINDS: tuple[str, ...] = get_args(ChangeKind)


_RECORD = ConfigDict(extra="ignore")
_Seq = Annotated[int, Field(ge=1)]

#: the attribution's free-text fields (``redacted`` applies a redaction to them)
TEXT_FIELDS = ("engine", "model", "run", "client", "note", "proposal")


@record(frozen=True, config=_RECORD)
class Attribution:
    """Who and what made a change. ``kind`` is one of ``CHANGE_KINDS``; ``engine`` is
    ``"model"`` or ``"extractive"`` for a consolidation; ``run`` is the conversation (rollout
    id) of the run that made it; ``client`` names a person or program (``"cli"``, an MCP
    client); ``proposal`` is the review proposal an approval applied. A pydantic dataclass:
    built from a record on disk, it is validated like one built in code."""

    kind: ChangeKind
    engine: str | None = None
    model: str | None = None
    rollouts_added: tuple[str, ...] = ()
    rollouts_removed: tuple[str, ...] = ()
    run: str | None = None
    client: str | None = None
    note: str | None = None
    proposal: str | None = None
    restored_from: _Seq | None = None

    def redacted(self, redact: Callable[[str], str]) -> Attribution:
        """This attribution with ``redact`` applied to every text it holds (a client names
        itself: its name is as untrusted as any text)."""
        changes: dict[str, Any] = {
            name: redact(value)
            for name in TEXT_FIELDS
            if isinstance(value := getattr(self, name), str) and redact(value) != value
        }
        for name in ("rollouts_added", "rollouts_removed"):
            ids = tuple(redact(r) for r in getattr(self, name))
            if ids != getattr(self, name):
                changes[name] = ids
        return replace(self, **changes) if changes else self

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["rollouts_added"] = list(self.rollouts_added)
        data["rollouts_removed"] = list(self.rollouts_removed)
        return {k: v for k, v in data.items() if v not in (None, [])}

    @classmethod
    def from_json(cls, data: Any) -> Attribution:
        """An attribution as read back; raises ``ValueError`` for one of the wrong shape."""
        return _ATTRIBUTION.validate_python(data)


@dataclass(frozen=True)
class Retention:
    """How much history a layout keeps (see the module docstring)."""

    keep_versions: int = 1000
    keep_days: float = 365.0


DEFAULT_RETENTION = Retention()


@record(frozen=True, config=_RECORD)
class Version:
    """One stored version: ``files`` maps names (relative to ``memories_dir``) to SHA-256.
    Every name is a memory file inside the layout and every digest a SHA-256 hex digest
    (``memory._records``), so a version can never name a path outside ``objects/`` or the
    layout, however it was made."""

    seq: _Seq
    attribution: Attribution
    files: dict[MemoryName, Digest]
    time: str = ""
    selection: Digest | None = None
    parent: _Seq | None = None
    epoch: Annotated[int, Field(ge=0)] = 0
    redacted: bool = False
    #: an HMAC of the other fields under the host's key (``sandboxes/_ownership.py``), set
    #: when sandmem writes the record: review mode takes a version made during a run for
    #: approved state only when it carries a valid one (a run's shell can write a record, not
    #: sign it without the key)
    proof: str | None = None

    def to_json(self) -> dict[str, Any]:
        data = {
            "format": FORMAT,
            "seq": self.seq,
            "time": self.time,
            "epoch": self.epoch,
            "parent": self.parent,
            "attribution": self.attribution.to_json(),
            "files": dict(sorted(self.files.items())),
            "selection": self.selection,
            "redacted": self.redacted,
        }
        return data if self.proof is None else {**data, "proof": self.proof}

    def signed(self) -> Version:
        """This version with the proof of its fields (unsigned when the host's key cannot be
        read: it then never counts as proven)."""
        return replace(self, proof=_sign(self.to_json()))

    def proven(self) -> bool:
        """Whether the record carries the proof of its fields under this host's key."""
        expected = _sign(self.to_json())
        return (
            self.proof is not None
            and expected is not None
            and hmac.compare_digest(self.proof, expected)
        )

    @classmethod
    def from_json(cls, data: Any) -> Version:
        """A record as read back (from the workspace or a store: untrusted); raises
        ``ValueError`` for one that does not parse."""
        return _VERSION.validate_python(data)


_ATTRIBUTION = TypeAdapter(Attribution)
_VERSION = TypeAdapter(Version)


def _sign(record: dict[str, Any]) -> str | None:
    from sandmem.sandboxes._ownership import sign

    fields = {k: v for k, v in record.items() if k != "proof"}
    try:
        return sign({"purpose": "sandmem memory version", **fields})
    except (SandmemError, OSError) as exc:
        logger.debug("memory version left unsigned: %s", exc)
        return None


def parse_version(path: str, name: str, data: bytes | None) -> Version | Problem:
    """The version record ``name`` (its bytes ``data``, read from ``path``), or the problem
    that makes it unusable: not JSON, the wrong shape, or a number that is not its name's."""
    found = parse_record(path, data, Version.from_json)
    if isinstance(found, Version) and found.seq != (_version_name(name) or (0, 0))[0]:
        return Problem(path, f"skipped (it says version {found.seq})")
    return found


@dataclass
class Store:
    """The history directory of one layout, read and written through the session."""

    session: SandboxSession
    paths: MemoryPaths
    #: the caller holds the layout lock for this store's life: no other writer adds or drops
    #: a record meanwhile, so the versions directory is listed once and kept current by this
    #: store's own writes (a version lists it once, not once for its head, its number and the
    #: retention check each)
    locked: bool = False
    _known_blobs: set[str] = field(default_factory=set)
    _listed: list[str] | None = field(default=None, repr=False)
    _head: tuple[Version | None] | None = field(default=None, repr=False)

    @property
    def root(self) -> str:
        return f"{self.paths.memories_dir}/{HISTORY_DIR}"

    def object_path(self, digest: str) -> str:
        if not is_digest(digest):  # a record's digests are checked on load; this is the floor
            raise ValueError(f"{digest[:80]!r} is not a history object's digest")
        return f"{self.root}/objects/{digest}"

    async def _names(self, sub: str) -> list[str]:
        """The regular files of ``sub`` (a link, FIFO or directory there is no record), by
        the directory entries' types: a layout of 1,000 versions lists them several times a
        version, and an ``lstat`` of each made the history's work 4x."""
        try:
            found = await _files.kinds_dir(self.session, f"{self.root}/{sub}")
        except SandboxError:
            return []  # missing, a link, or not a directory
        return sorted(name for name, kind in found if kind == EntryKind.FILE)

    async def version_names(self) -> list[str]:
        """Version record names, oldest first (temp files of a killed write left out)."""
        if self._listed is not None:
            return list(self._listed)
        names = ordered_names(await self._names("versions"))
        if self.locked:
            self._listed = names
            return list(names)
        return names

    def forget_listing(self) -> None:
        """List the versions directory again next time (after records were removed)."""
        self._listed = None
        self._head = None

    async def read_version(self, name: str) -> Version | None:
        """The version record ``name``; ``None`` (reported in one line) when it does not
        parse."""
        found = await self.read_versions([name])
        return found[0] if found else None

    async def read_versions(self, names: list[str]) -> list[Version]:
        """The records ``names`` that parse, in order; each one that does not is skipped and
        reported in one line (a truncated or crafted record never stops a command)."""
        return [version for _name, version in await self.read_named(names)]

    async def read_named(self, names: list[str]) -> list[tuple[str, Version]]:
        """``read_versions`` with each record's name."""
        paths = [f"{self.root}/versions/{name}" for name in names]
        data = await _files.read_many(self.session, paths)
        found: list[tuple[str, Version]] = []
        problems: list[Problem] = []
        for name, path in zip(names, paths, strict=True):
            parsed = parse_version(path, name, data[path])
            if isinstance(parsed, Problem):
                problems.append(parsed)
            else:
                found.append((name, parsed))
        report(problems)
        return found

    async def write_version(self, version: Version, name: str | None = None) -> str:
        """Write ``version``'s record (signed) and return its name: ``name`` when it is a
        rewrite of that record, else a new name with the record's tag (the module docstring)."""
        data = json.dumps(version.signed().to_json(), indent=1) + "\n"
        if name is None:
            name = record_name(version.seq, version.epoch, data.encode("utf-8"))
        elif _version_name(name) is None:
            raise ValueError(f"{name[:80]!r} is not a version record's name")
        await _files.write(self.session, f"{self.root}/versions/{name}", data)
        if self._listed is not None and name not in self._listed:
            self._listed = ordered_names([*self._listed, name])
        # the newest record is the head (a locked store's own write: no other writer's)
        newest = self._listed is not None and self._listed[-1] == name
        self._head = (version,) if self.locked and newest else None
        return name

    async def head(self) -> Version | None:
        """The newest version whose record parses."""
        if self._head is not None:
            return self._head[0]
        found = None
        for name in reversed(await self.version_names()):
            found = await self.read_version(name)
            if found is not None:
                break
        if self.locked:
            self._head = (found,)
        return found

    async def next_seq(self) -> int:
        """The number the next version gets: past every record's name, a bad one's too."""
        names = await self.version_names()
        return (_version_name(names[-1]) or (0, 0))[0] + 1 if names else 1

    async def put_blob(self, data: bytes) -> str:
        digest = hashlib.sha256(data).hexdigest()
        if digest in self._known_blobs:
            return digest
        path = self.object_path(digest)
        if not await _files.exists(self.session, path):
            await _files.write(self.session, path, data)
        self._known_blobs.add(digest)
        return digest

    async def blobs(self, digests: list[str]) -> dict[str, bytes]:
        found = await _files.read_many(self.session, [self.object_path(d) for d in digests])
        out: dict[str, bytes] = {}
        for digest in digests:
            data = found.get(self.object_path(digest))
            if data is None:
                raise UserError(f"history object {digest[:12]} is missing from {self.root}/")
            out[digest] = data
        return out


#: how many hex digits of the record's SHA-256 its name carries (48 bits: two clones' records
#: of one number and second share a name by chance about once in 10^14 pairs)
TAG_CHARS = 12


def record_name(seq: int, epoch: int, data: bytes) -> str:
    """The name of a new version record: ``<seq:08d>-<epoch>-<tag>.json``."""
    return f"{seq:08d}-{epoch}-{hashlib.sha256(data).hexdigest()[:TAG_CHARS]}.json"


#: a record's name: ``<seq>-<epoch>-<tag>.json``, or ``<seq>-<epoch>.json``
_RECORD_NAME = re.compile(r"([0-9]+)-([0-9]+)(?:-[0-9a-f]{8,64})?\.json", re.ASCII)


#: the names ``record_name`` gives while a number has 8 digits and a second 10 (until 2286),
#: each followed by "/" (no file name holds one): names of these widths sort as their
#: numbers and seconds do
_FIXED_NAMES = re.compile(rf"(?:[0-9]{{8}}-[0-9]{{10}}-[0-9a-f]{{{TAG_CHARS}}}\.json/)*", re.ASCII)


def ordered_names(names: list[str]) -> list[str]:
    """The record names among ``names``, ordered by number, then second, then name. A layout
    of 1,000 versions lists them several times a version: when every name has
    ``record_name``'s fixed widths, one match tells so and their order is the names' own;
    any other name has them parsed one by one."""
    if _FIXED_NAMES.fullmatch("".join(f"{name}/" for name in names)):
        return sorted(names)
    found = [(order, n) for n in names if (order := _version_name(n))]
    return [name for _order, name in sorted(found)]


def _version_name(name: str) -> tuple[int, int] | None:
    """The number and second a record's name gives: ``<seq>-<epoch>-<tag>.json``, or
    ``<seq>-<epoch>.json`` as earlier releases named records; ``None`` for another name."""
    found = _RECORD_NAME.fullmatch(name)
    return None if found is None else (int(found[1]), int(found[2]))


def name_order(name: str) -> tuple[int, int, str]:
    """How records are ordered: by number, then second, then name."""
    seq, epoch = _version_name(name) or (0, 0)
    return seq, epoch, name


def _now() -> tuple[str, int]:
    now = datetime.now(UTC)
    return now.isoformat(timespec="milliseconds").replace("+00:00", "Z"), int(now.timestamp())


async def make_version(
    session: SandboxSession,
    paths: MemoryPaths,
    files: dict[str, bytes],
    selection: bytes | None,
    attribution: Attribution,
    redact: Callable[[str], str] | None = None,
    *,
    store: Store | None = None,
) -> Version | None:
    """Record ``files`` (names relative to ``memories_dir``; already redacted) and the
    conversations state as a new version, unless they equal the newest version; ``redact``
    is applied to the attribution's texts. Call under the layout lock (``memory.journal``
    does, with one ``locked`` store for the version and its prune)."""
    store = store or Store(session, paths)
    head = await store.head()
    hashes = {name: hashlib.sha256(data).hexdigest() for name, data in files.items()}
    selection_hash = None if selection is None else hashlib.sha256(selection).hexdigest()
    if selection is None and head is not None:
        # no conversations state here (a host's workspace of a store-backed layout): unchanged
        selection_hash = head.selection
    if head is not None and head.files == hashes and head.selection == selection_hash:
        return None
    if head is None and selection is None and not any(d.strip() for d in files.values()):
        return None  # the empty files of a new layout are not a change
    for data in files.values():
        await store.put_blob(data)
    if selection is not None:
        await store.put_blob(selection)
    stamp, epoch = _now()
    version = Version(
        seq=await store.next_seq(),
        time=stamp,
        epoch=epoch,
        attribution=attribution.redacted(redact) if redact is not None else attribution,
        files=hashes,
        selection=selection_hash,
        parent=head.seq if head is not None else None,
    )
    await store.write_version(version)  # the commit point
    return version


async def versions(session: SandboxSession, paths: MemoryPaths) -> list[Version]:
    """Every stored version whose record parses, newest first (each one that does not is
    reported in one line)."""
    store = Store(session, paths)
    return list(reversed(await store.read_versions(await store.version_names())))


def resolve(spec: str | int, found: list[Version]) -> Version:
    """The version named by ``spec``: its number (``12``, ``v12``), ``head`` or ``head~N``."""
    if not found:
        raise UserError("this layout has no memory history yet")
    text = str(spec).strip().lower()
    if text in ("head", "latest"):
        return found[0]
    if text.startswith("head~") and text[5:].isdigit():
        back = int(text[5:])
        if back >= len(found):
            raise UserError(f"{spec!r}: only {len(found)} versions are stored")
        return found[back]
    number = text[1:] if text.startswith("v") else text
    if not number.isdigit():
        raise UserError(f"{spec!r} is not a version: give its number (see `sandmem memory log`)")
    for version in found:
        if version.seq == int(number):
            return version
    raise UserError(f"no version {number} (pruned or never made); `sandmem memory log` lists them")


async def version_files(
    session: SandboxSession, paths: MemoryPaths, version: Version
) -> dict[str, bytes]:
    store = Store(session, paths)
    blobs = await store.blobs(sorted(set(version.files.values())))
    return {name: blobs[digest] for name, digest in version.files.items()}


async def version_selection(
    session: SandboxSession, paths: MemoryPaths, version: Version
) -> bytes | None:
    if version.selection is None:
        return None
    return (await Store(session, paths).blobs([version.selection]))[version.selection]


def redact_bytes(data: bytes, redact: Any) -> bytes:
    """``redact`` (``str -> str``) applied to bytes, losslessly for bytes that are not UTF-8."""
    text = data.decode("utf-8", "surrogateescape")
    return str(redact(text)).encode("utf-8", "surrogateescape")


def unified(old: dict[str, bytes], new: dict[str, bytes | None]) -> tuple[list[str], str]:
    """The files that differ and their unified diff (``a/NAME`` → ``b/NAME``)."""
    out: list[str] = []
    changed: list[str] = []
    for name in sorted(set(old) | set(new)):
        before, after = old.get(name), new.get(name)
        if before == after:
            continue
        changed.append(name)
        a = (before or b"").decode("utf-8", "replace").splitlines(keepends=True)
        b = (after or b"").decode("utf-8", "replace").splitlines(keepends=True)
        lines = difflib.unified_diff(
            a,
            b,
            f"a/{name}" if before is not None else "/dev/null",
            f"b/{name}" if after is not None else "/dev/null",
        )
        out.extend(line if line.endswith("\n") else line + "\n" for line in lines)
    return changed, "".join(out)
