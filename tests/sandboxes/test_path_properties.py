"""Property-based tests of path resolution under the workspace (issue 25): random paths made
of plain names, ``..``, ``.``, empty components, absolute prefixes, NUL, backslashes and
unicode, through a workspace holding links that lead inside and outside, never let a write
land outside the workspace or a read return bytes from outside it: the host-filesystem layer
either acts inside the root or refuses with ``SandboxError``."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sandmem._errors import SandboxError
from sandmem.sandboxes import _hostfs
from sandmem.sandboxes._paths import no_symlinks

SECRET = b"outside-the-workspace"
COMPONENTS = st.sampled_from(
    ["a", "b", "sub", "in_link", "out_link", "file_out", "..", ".", "", "é", "日本", "a\\b", "x\0y"]
)


def _setup() -> tuple[Path, Path]:
    base = Path(tempfile.mkdtemp(prefix="sandmem-prop-")).resolve()
    atexit.register(shutil.rmtree, base, True)
    root, outside = base / "ws", base / "outside"
    (root / "sub").mkdir(parents=True)
    outside.mkdir()
    (outside / "a").write_bytes(SECRET)
    (outside / "b").mkdir()
    (root / "sub" / "a").write_bytes(b"inside")
    os.symlink("sub", root / "in_link")
    os.symlink(outside, root / "out_link")
    os.symlink(outside / "a", root / "file_out")
    os.symlink("../../outside", root / "sub" / "out_link")
    return root, outside


def _snapshot(outside: Path) -> dict[str, bytes | None]:
    return {
        str(p.relative_to(outside)): (p.read_bytes() if p.is_file() else None)
        for p in sorted(outside.rglob("*"))
    }


ROOT, OUTSIDE = _setup()
BEFORE = _snapshot(OUTSIDE)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    parts=st.lists(COMPONENTS, min_size=1, max_size=6),
    prefix=st.sampled_from(["", "/", str(ROOT) + "/", str(OUTSIDE) + "/", "//", "./"]),
    strict=st.booleans(),
)
def test_a_random_path_never_reaches_outside(parts: list[str], prefix: str, strict: bool) -> None:
    path = prefix + "/".join(parts)
    guard = no_symlinks() if strict else _nothing()
    with guard:
        try:
            data = _hostfs.read(ROOT, path)
        except SandboxError:
            data = None
        assert data != SECRET, path
        for write in (_hostfs.write_atomic, _hostfs.append):
            try:
                write(ROOT, path, b"written")
            except SandboxError:
                pass
        try:
            _hostfs.mkdir(ROOT, path, True)
        except SandboxError:
            pass
    assert _snapshot(OUTSIDE) == BEFORE, path
    _reset_links()


def _reset_links() -> None:
    """Put the planted links back (a write under ``no_symlinks()`` replaces a link itself)."""
    for link, target in (
        (ROOT / "in_link", "sub"),
        (ROOT / "out_link", str(OUTSIDE)),
        (ROOT / "file_out", str(OUTSIDE / "a")),
        (ROOT / "sub" / "out_link", "../../outside"),
    ):
        if link.is_symlink() or link.is_file():
            link.unlink()
        elif link.is_dir():
            shutil.rmtree(link)
        os.symlink(target, link)


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None
