"""Path safety: unit tests of resolve_path and escape attempts through the session API."""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from sandmem._errors import SandboxPathError, UserError
from sandmem.sandboxes import SandboxSession
from sandmem.sandboxes._paths import resolve_path


@pytest.fixture
def root(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    (ws / "a" / "b").mkdir(parents=True)
    return ws.resolve()


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("", "."),
        (".", "."),
        ("x.txt", "x.txt"),
        ("a/b/new.txt", "a/b/new.txt"),
        ("a/../x", "x"),
        ("./a//b/", "a/b"),
        ("missing/deeper/file", "missing/deeper/file"),
    ],
)
def test_relative_paths_resolve_inside(root: Path, path: str, expected: str) -> None:
    assert resolve_path(root, path, operation="read") == (root / expected).resolve()


def test_absolute_path_inside_root_is_accepted(root: Path) -> None:
    assert resolve_path(root, str(root / "a" / "x"), operation="read") == root / "a" / "x"


@pytest.mark.parametrize("path", ["..", "../x", "a/../../x", "a/b/../../../etc/passwd"])
def test_dotdot_escape_is_refused(root: Path, path: str) -> None:
    with pytest.raises(SandboxPathError, match="workspace-relative") as info:
        resolve_path(root, path, operation="write")
    assert info.value.operation == "write"
    assert info.value.path == path
    assert isinstance(info.value, UserError)


@pytest.mark.parametrize("path", ["/etc/passwd", "/", "/tmp"])
def test_absolute_path_outside_is_refused(root: Path, path: str) -> None:
    with pytest.raises(SandboxPathError, match="outside the workspace"):
        resolve_path(root, path, operation="read")


def test_absolute_path_dotdot_out_of_root_is_refused(root: Path) -> None:
    with pytest.raises(SandboxPathError):
        resolve_path(root, f"{root}/a/../../x", operation="read")


def test_nul_byte_is_refused(root: Path) -> None:
    with pytest.raises(SandboxPathError, match="NUL"):
        resolve_path(root, "a\x00b", operation="read")


def test_symlink_leading_outside_is_refused(root: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (root / "to_root").symlink_to("/")
    (root / "to_outside").symlink_to(outside)
    (root / "dangling_out").symlink_to(outside / "nope")
    for path in ["to_root", "to_root/etc/passwd", "to_outside/new", "dangling_out", "a/../to_root"]:
        with pytest.raises(SandboxPathError, match="symlink"):
            resolve_path(root, path, operation="write")


def test_inner_symlink_resolves_to_its_target(root: Path) -> None:
    (root / "link").symlink_to("a/b")
    assert resolve_path(root, "link/f", operation="write") == root / "a" / "b" / "f"


def test_without_following_the_link_itself_is_returned(root: Path) -> None:
    (root / "out").symlink_to("/etc")
    assert resolve_path(root, "out", operation="remove", follow_symlinks=False) == root / "out"
    with pytest.raises(SandboxPathError):
        resolve_path(root, "out/passwd", operation="remove", follow_symlinks=False)


def _missing(path: Path) -> bool:
    return not path.exists()


def _snapshot_dir(path: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in path.iterdir()}


async def test_escapes_through_the_session_change_nothing_outside(
    session: SandboxSession, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "canary.txt").write_bytes(b"untouched")
    before = _snapshot_dir(outside)
    parent_before = sorted(os.listdir(session.root.parent))
    os.symlink("/", session.root / "rootlink")
    os.symlink(outside, session.root / "outlink")
    os.symlink(outside / "canary.txt", session.root / "canarylink")
    canary_via_root = "rootlink" + str(outside / "canary.txt")

    attempts: list[Callable[[], Awaitable[object]]] = [
        lambda: session.write("../x", b"pwned"),
        lambda: session.write(str(outside / "new.txt"), b"pwned"),
        lambda: session.write("/etc/sandmem-must-not-exist", b"pwned"),
        lambda: session.write("outlink/new.txt", b"pwned"),
        lambda: session.write(canary_via_root, b"pwned"),
        lambda: session.write("canarylink", b"pwned"),
        lambda: session.append("canarylink", b"pwned"),
        lambda: session.mkdir("outlink/sub"),
        lambda: session.remove(canary_via_root),
        lambda: session.remove("..", recursive=True),
        lambda: session.rename("canarylink", "../moved"),
        lambda: session.read("/etc/passwd"),
        lambda: session.read("canarylink"),
        lambda: session.ls("outlink"),
        lambda: session.exists("/etc/passwd"),
        lambda: session.is_dir("outlink"),
        lambda: session.exec("true", workdir="outlink"),
        lambda: session.exec("true", workdir="/"),
    ]
    for attempt in attempts:
        with pytest.raises(SandboxPathError):
            await attempt()
    async with session.lock("x.lock"):
        pass
    with pytest.raises(SandboxPathError):
        async with session.lock("outlink/x.lock"):
            pass

    assert _snapshot_dir(outside) == before
    assert sorted(os.listdir(session.root.parent)) == parent_before
    assert _missing(Path("/etc/sandmem-must-not-exist"))
    # removing a symlink that points outside removes the link, never its target
    await session.remove("outlink")
    await session.remove("canarylink")
    assert _snapshot_dir(outside) == before
