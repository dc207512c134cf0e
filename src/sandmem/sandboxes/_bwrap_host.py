"""The host side of the bubblewrap backend: can bwrap run here, what is mounted read-only, and
the pids cgroups that cap process counts when the host user is root.

``probe_bwrap`` and ``pids_cgroup_base`` run once per process (their results are cached): each
costs a few subprocesses or cgroup writes, and the host does not change under a running program.
"""

from __future__ import annotations

import contextlib
import functools
import glob
import logging
import os
import platform
import shutil
import signal
import struct
import subprocess
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from sandmem._errors import UserError
from sandmem.sandboxes._local import DEFAULT_PATH

logger = logging.getLogger("sandmem.sandboxes")

#: where the workspace is mounted inside the sandbox (also ``HOME`` and the default cwd)
SANDBOX_ROOT = "/workspace"
#: host paths mounted read-only at the same place; ``*``/``?``/``[`` patterns are expanded and
#: missing paths skipped. Only system files: never the host's home, ``/root``, ``/tmp``, or
#: ``/etc`` files that hold secrets (``shadow``, ``ssh/``, ``ssl/private``, ...)
DEFAULT_READONLY_BINDS: tuple[str, ...] = (
    *("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"),
    # users and groups, name resolution, the dynamic linker, time, interpreters' settings
    *("/etc/alternatives", "/etc/passwd", "/etc/group", "/etc/nsswitch.conf", "/etc/hosts"),
    *("/etc/host.conf", "/etc/resolv.conf", "/etc/gai.conf", "/etc/services", "/etc/protocols"),
    *("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/localtime"),
    *("/etc/timezone", "/etc/mime.types", "/etc/os-release", "/etc/debian_version"),
    *("/etc/python3*", "/etc/perl"),
    # CA certificates (public); never /etc/ssl/private
    *("/etc/ca-certificates", "/etc/ca-certificates.conf", "/etc/ssl/certs"),
    *("/etc/ssl/openssl.cnf", "/etc/pki/ca-trust", "/etc/pki/tls/certs"),
)
#: mount points the sandbox defines itself: a read-only bind may not be (in) one of them, and
#: may not be ``/tmp`` itself (a path inside the private ``/tmp`` is fine)
_RESERVED = (SANDBOX_ROOT, "/proc", "/dev")
_PROBE_TIMEOUT = 10.0
#: after a command, how long to wait for its pids cgroup to empty before giving up on it
_CGROUP_REMOVE_SECONDS = 2.0

INSTALL_HINT = (
    "BubblewrapSandboxClient needs bubblewrap (`bwrap`), which was not found on PATH. Install "
    "it (Debian/Ubuntu: `apt-get install bubblewrap`; Fedora: `dnf install bubblewrap`; Arch: "
    "`pacman -S bubblewrap`), or use UnixLocalSandboxClient (not isolated)."
)
_USERNS_SYSCTLS = (
    ("kernel.unprivileged_userns_clone", "/proc/sys/kernel/unprivileged_userns_clone"),
    ("user.max_user_namespaces", "/proc/sys/user/max_user_namespaces"),
    (
        "kernel.apparmor_restrict_unprivileged_userns",
        "/proc/sys/kernel/apparmor_restrict_unprivileged_userns",
    ),
)


# -- probing the host ---------------------------------------------------------------------------


@dataclass(frozen=True)
class BwrapProbe:
    """Whether bubblewrap can build a sandbox on this host, and which options it supports."""

    path: str | None
    #: why bwrap cannot run here, with what to do about it; ``None`` when it works
    error: str | None = None
    disable_userns: bool = False
    tmpfs_size: bool = False


def _userns_message(path: str, stderr: str) -> str:
    current = []
    for name, file in _USERNS_SYSCTLS:
        with contextlib.suppress(OSError):
            current.append(f"{name}={Path(file).read_text().strip()}")
    return (
        f"bubblewrap ({path}) is installed but cannot create a sandbox: "
        f"{stderr.strip() or 'no error message'}. Usually user namespaces are disabled"
        f"{' (now: ' + ', '.join(current) + ')' if current else ''}. Enable them as root with "
        "`sysctl -w kernel.unprivileged_userns_clone=1` (Debian/Ubuntu kernels) and "
        "`sysctl -w user.max_user_namespaces=15000`; on Ubuntu 23.10+ also "
        "`sysctl -w kernel.apparmor_restrict_unprivileged_userns=0` (or give bwrap an AppArmor "
        "profile). In a container, allow user namespaces (e.g. docker run --security-opt "
        "seccomp=unconfined --security-opt apparmor=unconfined), or use UnixLocalSandboxClient."
    )


def namespace_args(*, network: bool, disable_userns: bool) -> list[str]:
    args = ["--unshare-all", "--unshare-user"]
    if network:
        args.append("--share-net")
    if disable_userns:
        args.append("--disable-userns")
    return [
        *args,
        *("--cap-drop", "ALL", "--die-with-parent", "--new-session"),
        *("--hostname", "sandmem"),
    ]


def run_probe(path: str | None) -> BwrapProbe:
    """Try ``bwrap ... true`` with the sandbox's namespaces (uncached; see ``probe_bwrap``)."""
    if path is None:
        return BwrapProbe(None, INSTALL_HINT)
    run = functools.partial(
        subprocess.run,
        capture_output=True,
        text=True,
        errors="replace",
        timeout=_PROBE_TIMEOUT,
        env={"PATH": DEFAULT_PATH, "LANG": "C.UTF-8"},
        stdin=subprocess.DEVNULL,
    )
    try:
        usage = run([path, "--help"])
        options = usage.stdout + usage.stderr
        disable_userns = "--disable-userns" in options
        argv = [
            path,
            *namespace_args(network=False, disable_userns=disable_userns),
            *bind_args(DEFAULT_READONLY_BINDS),
            *("--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--remount-ro", "/"),
            *("--", "true"),
        ]
        done = run(argv)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return BwrapProbe(
            None,
            f"bubblewrap ({path}) could not be run: {exc}. Reinstall it (Debian/Ubuntu: "
            "`apt-get install --reinstall bubblewrap`) or use UnixLocalSandboxClient.",
        )
    if done.returncode != 0:
        return BwrapProbe(None, _userns_message(path, done.stderr))
    return BwrapProbe(path, None, disable_userns, "--size" in options)


@functools.cache
def probe_bwrap() -> BwrapProbe:
    """``run_probe`` for the ``bwrap`` on PATH, once per process."""
    return run_probe(shutil.which("bwrap"))


# -- seccomp: no setuid or setgid bits ------------------------------------------------------

_S_ISID = 0o6000
_RET_ALLOW = 0x7FFF0000
_RET_EPERM = 0x00050000 | 1  # SECCOMP_RET_ERRNO | EPERM
_RET_ENOSYS = 0x00050000 | 38  # SECCOMP_RET_ERRNO | ENOSYS
#: per architecture: (AUDIT_ARCH value, [(syscall, index of its mode argument)], syscalls
#: refused with ENOSYS because their mode cannot be inspected: openat2, io_uring_setup)
_SETID_RULES: dict[str, tuple[int, list[tuple[int, int]], list[int]]] = {
    "x86_64": (
        0xC000003E,
        # chmod fchmod fchmodat fchmodat2 open openat creat mkdir mkdirat mknod mknodat
        [
            *((90, 1), (91, 1), (268, 2), (452, 2), (2, 2), (257, 3), (85, 1)),
            *((83, 1), (258, 2), (133, 1), (259, 2)),
        ],
        [437, 425],
    ),
    "aarch64": (
        0xC00000B7,
        # fchmod fchmodat fchmodat2 openat mkdirat mknodat
        [(52, 1), (53, 2), (452, 2), (56, 3), (34, 2), (33, 2)],
        [437, 425],
    ),
}


def _insn(code: int, jt: int, jf: int, k: int) -> bytes:
    return struct.pack("<HBBI", code, jt, jf, k)


def setid_seccomp_program(machine: str | None = None) -> bytes | None:
    """A classic-BPF seccomp filter (for ``bwrap --seccomp FD``) that makes every call which
    could set a setuid or setgid bit fail with EPERM: chmod and its variants, and the calls
    that create files or directories with a mode. Calls of another ABI (32-bit, x32) fail as
    well, so the filter cannot be bypassed through them. ``None`` on an architecture without
    rules (then the bits are stripped after each command instead)."""
    rules = _SETID_RULES.get(machine or platform.machine())
    if rules is None:
        return None
    arch, checks, unsupported = rules
    ld, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06
    prog = [_insn(ld, 0, 0, 4), _insn(jeq, 1, 0, arch), _insn(ret, 0, 0, _RET_EPERM)]
    prog.append(_insn(ld, 0, 0, 0))
    if arch == 0xC000003E:  # x32 system calls share the x86_64 arch value: refuse them
        prog += [_insn(jge, 0, 1, 0x40000000), _insn(ret, 0, 0, _RET_EPERM)]
    for nr in unsupported:
        prog += [_insn(jeq, 0, 1, nr), _insn(ret, 0, 0, _RET_ENOSYS)]
    for nr, arg in checks:
        prog += [
            _insn(jeq, 0, 4, nr),
            _insn(ld, 0, 0, 16 + 8 * arg),  # the low 32 bits of the argument
            _insn(jset, 0, 1, _S_ISID),
            _insn(ret, 0, 0, _RET_EPERM),
            _insn(ret, 0, 0, _RET_ALLOW),
        ]
    prog.append(_insn(ret, 0, 0, _RET_ALLOW))
    return b"".join(prog)


#: the descriptor given to bwrap's ``--seccomp`` (opened by the wrapper shell)
SECCOMP_FD = 9
#: wraps bwrap: opens the program (``$0``) at ``SECCOMP_FD`` for it
SECCOMP_WRAPPER = f'exec "$@" {SECCOMP_FD}<"$0"'


@functools.cache
def _seccomp_memfd() -> int | None:
    program = setid_seccomp_program()
    if program is None or not hasattr(os, "memfd_create"):
        return None
    try:
        fd = os.memfd_create("sandmem-seccomp", os.MFD_CLOEXEC)
        os.write(fd, program)
    except OSError:
        return None
    return fd


def seccomp_source() -> str | None:
    """A path that opens to the seccomp program: a memfd of this process, reopened by path so
    every command reads it from its start; ``None`` when unavailable."""
    fd = _seccomp_memfd()
    return None if fd is None else f"/proc/{os.getpid()}/fd/{fd}"


@functools.cache
def seccomp_works(bwrap: str, disable_userns: bool) -> bool:
    """Whether ``bwrap --seccomp`` with the program runs ``true`` here (once per process)."""
    source = seccomp_source()
    if source is None:
        return False
    argv = [
        "/bin/sh",
        *("-c", SECCOMP_WRAPPER, source, bwrap),
        *namespace_args(network=False, disable_userns=disable_userns),
        *("--seccomp", str(SECCOMP_FD)),
        *bind_args(DEFAULT_READONLY_BINDS),
        *("--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--remount-ro", "/"),
        *("--", "true"),
    ]
    try:
        done = subprocess.run(
            argv,
            capture_output=True,
            timeout=_PROBE_TIMEOUT,
            env={"PATH": DEFAULT_PATH, "LANG": "C.UTF-8"},
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    if done.returncode != 0:
        logger.warning(
            "bwrap --seccomp does not work here (%s); setuid/setgid bits are stripped after "
            "each command instead",
            done.stderr.decode("utf-8", "replace").strip(),
        )
    return done.returncode == 0


# -- read-only binds ----------------------------------------------------------------------------


def within(path: str, parent: str) -> bool:
    return path == parent or path.startswith(parent.rstrip("/") + "/")


def _reserved(path: str) -> bool:
    return path == "/tmp" or any(within(path, reserved) for reserved in _RESERVED)


def check_binds(binds: Sequence[str]) -> tuple[str, ...]:
    if isinstance(binds, str | bytes):
        raise UserError("readonly_binds must be a sequence of absolute paths, not one string")
    checked: list[str] = []
    for raw in binds:
        if not isinstance(raw, str) or "\x00" in raw or not raw.startswith("/"):
            raise UserError(f"readonly_binds: {raw!r} must be an absolute path (like '/opt/x')")
        path = os.path.normpath(raw)
        if ".." in path.split("/") or path in ("/", "//"):
            raise UserError(f"readonly_binds: {raw!r} must name one directory or file, not '/'")
        if _reserved(path):
            raise UserError(
                f"readonly_binds: {raw!r} is /tmp or inside {', '.join(_RESERVED)}, which the "
                "sandbox mounts itself (the workspace, a private /tmp, /proc, /dev)"
            )
        checked.append(path)
    return tuple(checked)


def bind_args(patterns: Sequence[str]) -> list[str]:
    """bwrap arguments mounting ``patterns`` read-only at the same paths (as they are now).

    A symlink whose target lies in another bound directory is recreated as a symlink (so
    ``/bin -> usr/bin`` stays one), any other path is bind-mounted (a symlink's target then
    appears at the link's path); missing paths are skipped.
    """
    paths: list[str] = []
    for pattern in patterns:
        matches = sorted(glob.glob(pattern)) if any(c in pattern for c in "*?[") else [pattern]
        for path in matches:
            if path not in paths and os.path.lexists(path):
                if not _reserved(path):
                    paths.append(path)
    real_dirs = [os.path.realpath(p) for p in paths if not os.path.islink(p)]
    args: list[str] = []
    for path in paths:
        if os.path.islink(path) and any(within(os.path.realpath(path), d) for d in real_dirs):
            args += ["--symlink", os.readlink(path), path]
        else:
            args += ["--ro-bind-try", path, path]
    return args


# -- pids cgroup (process limit for root hosts) -------------------------------------------------


def create_cgroup(base: Path, max_pids: int) -> Path:
    path = base / f"sandmem-{uuid.uuid4().hex[:16]}"
    path.mkdir(mode=0o755)
    try:
        (path / "pids.max").write_text(f"{max_pids}\n")
    except BaseException:
        path.rmdir()
        raise
    return path


def remove_cgroup(path: Path) -> None:
    """Kill what is left in the cgroup (the sandbox's processes may still be dying), then
    remove it; a cgroup that does not empty in time is left behind with a warning."""
    deadline = time.monotonic() + _CGROUP_REMOVE_SECONDS
    delay = 0.001
    while True:
        try:
            pids = (path / "cgroup.procs").read_text().split()
        except FileNotFoundError:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid), signal.SIGKILL)
        try:
            path.rmdir()
            return
        except OSError as exc:
            if time.monotonic() > deadline:
                logger.warning("could not remove the pids cgroup %s: %s", path, exc.strerror)
                return
        time.sleep(delay)
        delay = min(delay * 2, 0.02)


def _cgroup_v2_has_pids(mount: Path) -> bool:
    try:
        if "pids" not in (mount / "cgroup.controllers").read_text().split():
            return False
        control = mount / "cgroup.subtree_control"
        if "pids" not in control.read_text().split():
            control.write_text("+pids\n")
    except OSError:
        return False
    return True


@functools.cache
def pids_cgroup_base() -> tuple[Path | None, str]:
    """A writable cgroup directory with the pids controller, once per process, or ``None``
    and the reason."""
    try:
        mounts = Path("/proc/self/mounts").read_text().splitlines()
    except OSError as exc:
        return None, f"cannot read /proc/self/mounts ({exc.strerror})"
    reason = "no cgroup hierarchy with the pids controller is mounted"
    for line in mounts:
        fields = line.split()
        if len(fields) < 4:
            continue
        mount, fstype, options = Path(fields[1]), fields[2], fields[3].split(",")
        if (fstype == "cgroup" and "pids" in options) or (
            fstype == "cgroup2" and _cgroup_v2_has_pids(mount)
        ):
            try:
                remove_cgroup(create_cgroup(mount, 1))
            except OSError as exc:
                reason = f"cannot create a pids cgroup under {mount} ({exc.strerror})"
                continue
            return mount, ""
    return None, reason
