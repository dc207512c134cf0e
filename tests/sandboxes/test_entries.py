"""Manifest entries in the reference's forms: File/Dir with permissions, nested Dir(children),
LocalFile, LocalDir (no symlink escapes), GitRepo (cloned offline from a repo made here), and the
manifest environment reaching commands."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest
from pydantic import ValidationError

from sandmem._errors import GitCloneError, LocalDirReadError, LocalFileReadError, SandboxError
from sandmem.sandboxes import (
    Dir,
    File,
    FileMode,
    GitRepo,
    LocalDir,
    LocalFile,
    Manifest,
    Permissions,
    UnixLocalSandboxClient,
)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


async def test_nested_dirs_files_and_permissions(client: UnixLocalSandboxClient) -> None:
    manifest = Manifest(
        entries={
            "data": Dir(
                children={
                    "leads.csv": File(content=b"a,b\n"),
                    "deep/er": Dir(children={"x.sh": File(content=b"echo x\n", permissions=0o755)}),
                },
            ),
            "locked": Dir(
                children={"inside.txt": File(content=b"ro")},
                permissions=Permissions(owner=FileMode.READ | FileMode.EXEC, group=5, other=5),
            ),
            "secret.txt": File(content=b"s", permissions=Permissions(owner=6)),
        }
    )
    assert manifest.entries["secret.txt"].permissions == Permissions(owner=6)
    session = await client.create(manifest=manifest)
    root = session.root
    assert (root / "data/leads.csv").read_bytes() == b"a,b\n"
    assert (root / "data/deep/er/x.sh").read_bytes() == b"echo x\n"
    assert _mode(root / "data/deep/er/x.sh") == 0o755
    assert _mode(root / "secret.txt") == 0o600
    assert _mode(root / "locked") == 0o555 and (root / "locked/inside.txt").read_bytes() == b"ro"
    async with session:
        assert (await session.exec("./data/deep/er/x.sh")).stdout == b"x\n"
    await client.delete(session)  # a read-only directory does not stop the cleanup
    assert not root.exists()


def test_nested_entries_round_trip_and_are_checked() -> None:
    manifest = Manifest(
        entries={"a": Dir(children={"b": Dir(children={"c.txt": File(content=b"\x00")})})},
        environment={"K": "v"},
    )
    again = Manifest.model_validate_json(manifest.model_dump_json())
    assert again == manifest and again.environment == {"K": "v"}
    with pytest.raises(ValidationError):
        Dir(children={"../escape": File()})
    with pytest.raises(ValidationError, match="not both"):
        File(content=b"", mode=0o600, permissions=0o644)


def test_reference_manifest_defaults() -> None:
    assert Manifest(root="/workspace").root is None  # the reference's default: a fresh dir
    assert Manifest(environment={"value": {"A": "1"}}).environment == {"A": "1"}
    assert Manifest(env={"A": "1"}).environment == {"A": "1"}  # sandmem's earlier name


async def test_manifest_environment_reaches_commands(client: UnixLocalSandboxClient) -> None:
    session = await client.create(manifest=Manifest(environment={"APP_STAGE": "ci"}))
    async with session:
        result = await session.exec("printenv", "APP_STAGE")
    await client.delete(session)
    assert result.stdout == b"ci\n"


async def test_local_file_is_copied_with_its_mode(
    client: UnixLocalSandboxClient, tmp_path: Path
) -> None:
    src = tmp_path / "host" / "tool.sh"
    src.parent.mkdir()
    src.write_bytes(b"#!/bin/sh\necho tool\n")
    src.chmod(0o750)
    session = await client.create(manifest=Manifest(entries={"bin/tool.sh": LocalFile(src=src)}))
    src.write_bytes(b"changed later")  # copied at creation, not linked
    assert (session.root / "bin/tool.sh").read_bytes() == b"#!/bin/sh\necho tool\n"
    assert _mode(session.root / "bin/tool.sh") == 0o750
    await client.delete(session)


async def test_local_file_source_must_be_a_regular_file(
    client: UnixLocalSandboxClient, tmp_path: Path
) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    for bad in (tmp_path / "missing", tmp_path, fifo):  # a fifo must not hang the create
        with pytest.raises(LocalFileReadError):
            await client.create(manifest=Manifest(entries={"x": LocalFile(src=bad)}))
    assert list((tmp_path / "tmp").iterdir()) == []  # no half-made workspace left


async def test_local_dir_copies_a_tree_without_leaving_it(
    client: UnixLocalSandboxClient, tmp_path: Path
) -> None:
    src = tmp_path / "project"
    (src / "pkg/sub").mkdir(parents=True)
    (src / "pkg/sub/mod.py").write_bytes(b"X = 1\n")
    (src / ".hidden").write_bytes(b"h")
    (src / "run.sh").write_bytes(b"echo run\n")
    (src / "run.sh").chmod(0o755)
    (src / "pkg/link_inside").symlink_to("sub/mod.py")
    secret = tmp_path / "secret.txt"
    secret.write_bytes(b"host secret")
    (src / "escape_abs").symlink_to(secret)
    (src / "escape_rel").symlink_to("../secret.txt")
    (src / "dir_out").symlink_to(tmp_path)
    (src / "pkg/up").symlink_to("..")  # inner: pkg/up is the copied tree itself
    (src / "chain").symlink_to("pkg/up/pkg/up/../../../..")  # inner by text, out via links
    os.mkfifo(src / "fifo")
    session = await client.create(manifest=Manifest(entries={"vendor/project": LocalDir(src=src)}))
    dest = session.root / "vendor/project"
    assert (dest / "pkg/sub/mod.py").read_bytes() == b"X = 1\n"
    assert (dest / ".hidden").read_bytes() == b"h"
    assert _mode(dest / "run.sh") == 0o755
    assert os.readlink(dest / "pkg/link_inside") == "sub/mod.py"
    assert os.readlink(dest / "pkg/up") == ".."
    for gone in ("escape_abs", "escape_rel", "dir_out", "fifo", "chain"):
        assert not (dest / gone).is_symlink() and not (dest / gone).exists()
    everything = b"".join(
        p.read_bytes() for p in dest.rglob("*") if p.is_file() and not p.is_symlink()
    )
    assert b"host secret" not in everything
    await client.delete(session)


async def test_local_dir_without_source_and_bad_sources(
    client: UnixLocalSandboxClient, tmp_path: Path
) -> None:
    session = await client.create(manifest=Manifest(entries={"empty": LocalDir()}))
    assert (session.root / "empty").is_dir()
    await client.delete(session)
    (tmp_path / "file.txt").write_bytes(b"")
    for bad in (tmp_path / "missing", tmp_path / "file.txt"):
        with pytest.raises(LocalDirReadError):
            await client.create(manifest=Manifest(entries={"d": LocalDir(src=bad)}))


def _git(*args: str, cwd: Path) -> str:
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(cwd),
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.invalid",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.invalid",
    }
    done = subprocess.run(
        ["git", *args], cwd=cwd, env=env, capture_output=True, text=True, check=True, timeout=60
    )
    return done.stdout.strip()


@pytest.fixture
def git_repo(tmp_path: Path) -> tuple[Path, str]:
    """A repository with two commits on ``main`` and a branch ``feature``; returns the path and
    the first commit."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    repo = tmp_path / "origin"
    (repo / "docs").mkdir(parents=True)
    _git("init", "-q", "-b", "main", cwd=repo)
    (repo / "README.md").write_text("v1\n")
    (repo / "docs/guide.md").write_text("guide\n")
    _git("add", "-A", cwd=repo)
    _git("commit", "-q", "-m", "one", cwd=repo)
    first = _git("rev-parse", "HEAD", cwd=repo)
    (repo / "README.md").write_text("v2\n")
    _git("commit", "-q", "-am", "two", cwd=repo)
    _git("branch", "feature", first, cwd=repo)
    return repo, first


async def test_git_repo_from_a_local_path_and_a_file_url(
    client: UnixLocalSandboxClient, git_repo: tuple[Path, str]
) -> None:
    repo, first = git_repo
    manifest = Manifest(
        entries={
            "by_path": GitRepo(repo=str(repo)),
            "by_url": GitRepo(repo=repo.as_uri(), ref="feature"),
            "at_commit": GitRepo(repo=str(repo), ref=first[:12]),
            "docs_only": GitRepo(repo=repo.as_uri(), ref="main", subpath="docs"),
        }
    )
    session = await client.create(manifest=manifest)
    root = session.root
    assert (root / "by_path/README.md").read_text() == "v2\n"
    assert (root / "by_path/.git").is_dir()  # a real checkout: git works in the sandbox
    assert (root / "by_url/README.md").read_text() == "v1\n"
    assert (root / "at_commit/README.md").read_text() == "v1\n"
    assert sorted(p.name for p in (root / "docs_only").iterdir()) == ["guide.md"]
    async with session:
        log = await session.exec("git", "-C", "by_path", "log", "--format=%s")
    assert log.stdout.decode().split() == ["two", "one"]
    await client.delete(session)


async def test_git_repo_failures_are_clear(
    client: UnixLocalSandboxClient, git_repo: tuple[Path, str], tmp_path: Path
) -> None:
    repo, _ = git_repo
    with pytest.raises(GitCloneError, match="no-such-branch") as info:
        await client.create(
            manifest=Manifest(entries={"r": GitRepo(repo=str(repo), ref="no-such-branch")})
        )
    assert isinstance(info.value, SandboxError) and info.value.stderr
    with pytest.raises(GitCloneError):
        await client.create(manifest=Manifest(entries={"r": GitRepo(repo=str(tmp_path / "none"))}))
    assert GitRepo(repo="openai/openai-agents-python").url == (
        "https://github.com/openai/openai-agents-python.git"
    )
    with pytest.raises(ValidationError):
        GitRepo(repo="x/y", ref="--upload-pack=evil")
    with pytest.raises(ValidationError):
        GitRepo(repo="x/y", subpath="../up")


# -- issue 25, class 2: a repository's committed links are never followed out of it ----------


@pytest.mark.parametrize(
    ("link", "subpath"),
    [
        ("docs", "docs"),  # the subpath itself is a committed link to a host directory
        ("docs", "docs/inner"),  # a link on the way to the subpath
        ("pkg/docs", "pkg/docs"),  # deeper
    ],
)
async def test_a_subpath_through_a_committed_symlink_is_refused(
    client: UnixLocalSandboxClient, tmp_path: Path, link: str, subpath: str
) -> None:
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    secret_dir = tmp_path / "host"
    (secret_dir / "inner").mkdir(parents=True)
    (secret_dir / "inner" / "id_rsa").write_text("private")
    (secret_dir / "id_rsa").write_text("private")
    repo = tmp_path / "evil"
    (repo / link).parent.mkdir(parents=True, exist_ok=True)
    _git("init", "-q", "-b", "main", cwd=repo)
    (repo / link).symlink_to(secret_dir)
    (repo / "README.md").write_text("x\n")
    _git("add", "-A", cwd=repo)
    _git("commit", "-q", "-m", "link", cwd=repo)
    with pytest.raises(SandboxError, match="never followed"):
        await client.create(
            manifest=Manifest(entries={"r": GitRepo(repo=str(repo), subpath=subpath)})
        )


def _host_and_repo(tmp_path: Path, folder: str) -> tuple[Path, Path]:
    """A host directory holding a private key, and an empty repository with ``folder``."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    host = tmp_path / "host"
    host.mkdir()
    (host / "id_rsa").write_text("private")
    repo = tmp_path / "repo"
    (repo / folder).mkdir(parents=True)
    _git("init", "-q", "-b", "main", cwd=repo)
    return host, repo


async def test_links_inside_a_cloned_subpath_that_lead_out_are_not_copied(
    client: UnixLocalSandboxClient, tmp_path: Path
) -> None:
    host, repo = _host_and_repo(tmp_path, "docs")
    (repo / "docs" / "guide.md").write_text("guide\n")
    (repo / "docs" / "key").symlink_to(host / "id_rsa")
    (repo / "docs" / "abs").symlink_to(host)
    (repo / "docs" / "up").symlink_to("../../host")
    _git("add", "-A", cwd=repo)
    _git("commit", "-q", "-m", "links", cwd=repo)
    session = await client.create(
        manifest=Manifest(entries={"r": GitRepo(repo=str(repo), subpath="docs")})
    )
    copied = {p.name: p for p in (session.root / "r").iterdir()}
    assert (copied["guide.md"]).read_text() == "guide\n"
    for name in ("key", "abs", "up"):
        assert name not in copied or not copied[name].resolve().is_relative_to(host)
    assert "private" not in "".join(
        p.read_text(errors="replace") for p in session.root.rglob("*") if p.is_file()
    )
    await client.delete(session)


async def test_links_a_whole_cloned_repository_commits_never_lead_out(
    client: UnixLocalSandboxClient, tmp_path: Path
) -> None:
    """Round 4: the whole-repository copy too (not only a subpath): absolute links, links
    climbing out, a link to a sibling outside the subpath, a chain that is inner by its text
    but leads out through another link; links that stay inside are kept."""
    host, repo = _host_and_repo(tmp_path, "sub")
    (repo / "sub" / "ok.txt").write_text("ok\n")
    (repo / "sub" / "inner").symlink_to("ok.txt")
    (repo / "sub" / "self").symlink_to(".")
    (repo / "sub" / "chain").symlink_to("self/self/../../..")
    (repo / "sub" / "sibling").symlink_to("../top.txt")
    (repo / "top.txt").write_text("top\n")
    (repo / "abs").symlink_to(host)
    (repo / "up").symlink_to("../host/id_rsa")
    _git("add", "-A", cwd=repo)
    _git("commit", "-q", "-m", "links", cwd=repo)
    session = await client.create(
        manifest=Manifest(
            entries={
                "whole": GitRepo(repo=str(repo)),
                "part": GitRepo(repo=str(repo), subpath="sub"),
            }
        )
    )
    for path in session.root.rglob("*"):
        if path.is_symlink():
            assert path.resolve().is_relative_to(session.root), path
    assert (session.root / "whole/sub/inner").read_text() == "ok\n"
    assert (session.root / "whole/sub/sibling").read_text() == "top\n"  # inside the copy
    assert not (session.root / "part/sibling").exists()  # outside the subpath it copied
    assert not (session.root / "whole/abs").is_symlink()
    assert "private" not in "".join(
        p.read_text(errors="replace") for p in session.root.rglob("*") if p.is_file()
    )
    await client.delete(session)


async def test_local_dir_sockets_are_skipped_and_a_hard_link_gets_its_own_copy(
    client: UnixLocalSandboxClient, tmp_path: Path
) -> None:
    """A hard link in a source directory is a file of that directory: its bytes are copied
    into a file of the workspace's own, so a write in the workspace never reaches the source
    (or whatever else shares its inode)."""
    import socket

    src = tmp_path / "src"
    src.mkdir()
    shared = tmp_path / "shared.txt"
    shared.write_text("shared")
    os.link(shared, src / "linked.txt")
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(src / "sock"))
    session = await client.create(manifest=Manifest(entries={"d": LocalDir(src=src)}))
    copy = session.root / "d" / "linked.txt"
    assert copy.read_text() == "shared" and copy.stat().st_nlink == 1
    assert not (session.root / "d" / "sock").exists()
    async with session:
        await session.exec("echo changed > d/linked.txt")
    assert shared.read_text() == "shared"
    await client.delete(session)


async def test_kinds_dir_names_each_kind_as_stat_dir_does(
    client: UnixLocalSandboxClient, tmp_path: Path
) -> None:
    """``kinds_dir`` takes each entry's kind from the directory entry (no ``lstat``); it
    reports what ``stat_dir`` does: a link (to a file, a directory, nowhere) as a link, never
    followed, a FIFO and a socket as other. The base class's version (built on ``stat_dir``)
    agrees too."""
    import socket

    from sandmem.sandboxes._session import SandboxSession

    root = tmp_path / "ws"
    session = await client.create(manifest=Manifest(root=str(root)))
    async with session:
        d = root / "d"
        d.mkdir()
        (d / "file.json").write_text("{}")
        (d / "sub").mkdir()
        (d / "to-file").symlink_to(d / "file.json")
        (d / "to-dir").symlink_to(d / "sub")
        (d / "dangling").symlink_to(tmp_path / "nowhere")
        os.mkfifo(d / "fifo")
        with socket.socket(socket.AF_UNIX) as sock:
            sock.bind(str(d / "sock"))
            kinds = await session.kinds_dir("d")
            stats = await session.stat_dir("d")
            base = await SandboxSession.kinds_dir(session, "d")
        assert kinds == [(name, kind) for name, kind, _size, _mtime in stats] == base
        by_name = {name: kind.value for name, kind in kinds}
        assert by_name == {
            "dangling": "symlink",
            "fifo": "other",
            "file.json": "file",
            "sock": "other",
            "sub": "directory",
            "to-dir": "symlink",
            "to-file": "symlink",
        }
        from sandmem.memory import _files

        assert await _files.kinds_dir(session, "d") == kinds
        with pytest.raises(SandboxError):
            await _files.kinds_dir(session, "d/to-dir")  # the file layer lists through no link
