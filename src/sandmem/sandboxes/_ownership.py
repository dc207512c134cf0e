"""Proof that a session state was written by sandmem: the one check between a state that came
back from outside the process (a database, a queue, a file) and anything destructive.

A state carries ``proof``: an HMAC-SHA256, under a key held by the client's host, of every
other field (session id, backend, the manifest with its root, the snapshot spec, the
ownership flag, the backend settings). ``SandboxSession.state`` signs; every ``resume``
verifies before it restores into, re-attaches to or mounts the state's root, so an edited
state (another ``root``, ``workspace_owned`` flipped, another snapshot directory) is refused
with ``SandboxStateError`` whatever it says, and ``delete`` only removes what a verified state
or ``create`` handed over.

The key: ``SANDMEM_STATE_KEY`` when set (share it between hosts that resume each other's
states), else 32 random bytes kept in ``$XDG_STATE_HOME/sandmem/state-key`` (default
``~/.local/state``), created ``0600`` on first use. Whoever can read that file can forge
states; whoever can only edit a state cannot.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import json
import os
import secrets
import stat
from pathlib import Path
from typing import Any

from sandmem._errors import SandboxStateError

KEY_ENV = "SANDMEM_STATE_KEY"
_KEY_BYTES = 32


def key_path() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local/state")
    return Path(base) / "sandmem" / "state-key"


def _key() -> bytes:
    given = os.environ.get(KEY_ENV)
    if given:
        return hashlib.sha256(given.encode("utf-8")).digest()
    return _file_key(str(key_path()))


@functools.cache
def _file_key(path: str) -> bytes:
    """The key in ``path``, created (``0600``, in a ``0700`` directory) when missing. A key
    file that is a symlink, not a regular file, or readable by others is refused."""
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    if not os.path.lexists(path):
        _create_key(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as exc:
        raise _key_error(path, exc.strerror or str(exc)) from exc
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_mode & 0o077 or st.st_uid != os.getuid():
            raise _key_error(path, "it must be a regular file of yours with mode 0600")
        key = fh.read()
    if len(key) < _KEY_BYTES:
        raise _key_error(path, "it is too short (a partial write?); remove it")
    return key


def _create_key(path: str) -> None:
    """Write a new key under a name of its own, then link it to ``path`` in one step: a
    process starting at the same moment sees no key file or a whole one, never a partial
    one, and the first link wins (the loser's key is thrown away)."""
    spare = f"{path}.{os.getpid()}.{secrets.token_hex(4)}.new"
    fd = os.open(spare, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(secrets.token_bytes(_KEY_BYTES))
            fh.flush()
            os.fsync(fh.fileno())
        os.link(spare, path)
    except FileExistsError:
        pass
    finally:
        os.unlink(spare)


def _key_error(path: str, why: str) -> SandboxStateError:
    return SandboxStateError(
        f"cannot use the session-state key {path}: {why}; or set {KEY_ENV}",
        operation="state",
        path=path,
    )


def _payload(data: dict[str, Any]) -> bytes:
    fields = {k: v for k, v in data.items() if k != "proof"}
    return json.dumps(fields, sort_keys=True, separators=(",", ":"), default=str).encode()


def sign(data: dict[str, Any]) -> str:
    """The proof of a state given as its JSON-mode dump (``model_dump(mode="json")``)."""
    return hmac.new(_key(), _payload(data), hashlib.sha256).hexdigest()


def verify(data: dict[str, Any], operation: str) -> None:
    """Raise ``SandboxStateError`` unless ``data['proof']`` is the proof of the other fields."""
    proof = data.get("proof")
    if not isinstance(proof, str) or not hmac.compare_digest(proof, sign(data)):
        why = "it carries no proof" if not proof else "it was changed after sandmem wrote it"
        raise SandboxStateError(
            f"the session state cannot be trusted: {why} (its root, ownership or snapshot may "
            "name something sandmem did not create); resume only the unmodified JSON of "
            f"session.state, written on a host with the same key ({KEY_ENV})",
            operation=operation,
        )
