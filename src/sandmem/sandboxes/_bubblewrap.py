"""BubblewrapSandboxClient: the workspace is a host directory, commands run under ``bwrap``.

File primitives, path rules, locks, snapshots and the lifecycle are the local backend's
(inherited); only ``exec`` changes. Every command is wrapped like this::

    bwrap --unshare-all --unshare-user [--share-net] [--disable-userns] --cap-drop ALL
          --die-with-parent --new-session --hostname sandmem
          --proc /proc --dev /dev [--size N --tmpfs /dev/shm] [--size N] --tmpfs /tmp
          --ro-bind-try /usr /usr --symlink usr/bin /bin ...   (readonly_binds)
          --bind <workspace> /workspace --remount-ro / --chdir /workspace/<workdir>
          -- [prlimit --as=... --nproc=... --] <command>

so a command sees the workspace at ``/workspace`` (the only writable host path), a private
``/tmp``, the system directories read-only, no host network, no host processes, no host
environment, and no capabilities. When the host user is root, ``max_processes`` is enforced
with a pids cgroup (the kernel never applies ``RLIMIT_NPROC`` to uid 0, not even inside a user
namespace); otherwise with ``RLIMIT_NPROC`` inside the sandbox's user namespace. Probing the
host, the read-only binds and the cgroups live in ``_bwrap_host.py``. See ``docs/sandboxes.md``.
"""

from __future__ import annotations

import asyncio
import contextvars
import os
import shutil
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from sandmem._errors import SandboxError, UserError
from sandmem.sandboxes import _hostfs
from sandmem.sandboxes._bwrap_host import (
    DEFAULT_READONLY_BINDS,
    INSTALL_HINT,
    SANDBOX_ROOT,
    SECCOMP_FD,
    SECCOMP_WRAPPER,
    bind_args,
    check_binds,
    create_cgroup,
    namespace_args,
    pids_cgroup_base,
    probe_bwrap,
    remove_cgroup,
    seccomp_source,
    seccomp_works,
    within,
)
from sandmem.sandboxes._environment import HostEnvironmentPolicy
from sandmem.sandboxes._local import (
    DEFAULT_EXEC_TIMEOUT,
    DEFAULT_MAX_OUTPUT_BYTES,
    DEFAULT_PATH,
    UnixLocalSandboxClient,
    UnixLocalSandboxSession,
)
from sandmem.sandboxes._session import (
    DEFAULT_PRE_STOP_HOOK_TIMEOUT,
    ExecResult,
    SandboxSessionState,
)

__all__ = [
    "DEFAULT_READONLY_BINDS",
    "SANDBOX_ROOT",
    "BubblewrapSandboxClient",
    "BubblewrapSandboxSession",
    "SandboxPolicy",
    "bwrap_argv",
]

#: moves the wrapper into the cgroup (``$0`` is its ``cgroup.procs``), then becomes bwrap
_ENTER_CGROUP = 'echo $$ > "$0" && exec "$@"'
#: the pids cgroup of the exec running in this task (root hosts with ``max_processes``)
_EXEC_CGROUP: contextvars.ContextVar[Path | None] = contextvars.ContextVar(
    "sandmem_exec_cgroup", default=None
)


# -- session and client -------------------------------------------------------------------------


@dataclass(frozen=True)
class SandboxPolicy:
    """What the client decided about every command's sandbox (see ``BubblewrapSandboxClient``)."""

    bwrap: str
    network: bool
    readonly_binds: tuple[str, ...]
    memory_limit_mb: int | None = None
    max_processes: int | None = None
    disable_userns: bool = False
    tmpfs_size: bool = False
    #: prlimit inside the sandbox, when an rlimit (address space, process count) is set
    prlimit: str | None = None
    #: where per-command pids cgroups are made (root hosts with ``max_processes``)
    pids_cgroup: Path | None = None
    #: a path opening to the seccomp filter refusing setuid/setgid bits; ``None``: the bits
    #: are stripped from the workspace after each command instead
    seccomp: str | None = None


def bwrap_argv(
    policy: SandboxPolicy, binds: Sequence[str], workspace: Path, cwd: str, argv: Sequence[str]
) -> list[str]:
    """The full argv running ``argv`` in ``cwd`` (a path inside the sandbox)."""
    tmpfs = ["--tmpfs", "/tmp"]
    if policy.memory_limit_mb is not None and policy.tmpfs_size:
        size = ["--size", str(policy.memory_limit_mb * 1024 * 1024)]
        tmpfs = [*size, "--tmpfs", "/dev/shm", *size, "--tmpfs", "/tmp"]
    rlimits: list[str] = []
    if policy.memory_limit_mb is not None:
        rlimits.append(f"--as={policy.memory_limit_mb * 1024 * 1024}")
    if policy.max_processes is not None and policy.pids_cgroup is None:
        rlimits.append(f"--nproc={policy.max_processes + 1}")  # + bwrap's init (pid 1)
    command = [policy.prlimit or "prlimit", *rlimits, "--", *argv] if rlimits else list(argv)
    wrapper = ["/bin/sh", "-c", SECCOMP_WRAPPER, policy.seccomp] if policy.seccomp else []
    seccomp = ["--seccomp", str(SECCOMP_FD)] if policy.seccomp else []
    return [
        *wrapper,
        policy.bwrap,
        *namespace_args(network=policy.network, disable_userns=policy.disable_userns),
        *seccomp,
        *("--proc", "/proc", "--dev", "/dev"),
        *tmpfs,
        *binds,
        *("--bind", str(workspace), SANDBOX_ROOT),
        *("--remount-ro", "/", "--chdir", cwd, "--"),
        *command,
    ]


def _workspace_relative(path: str) -> str:
    """``/workspace/a`` (a path as commands see it) → ``a``; other paths unchanged."""
    if isinstance(path, str) and within(path, SANDBOX_ROOT):
        return path[len(SANDBOX_ROOT) :].lstrip("/") or "."
    return path


class BubblewrapSandboxSession(UnixLocalSandboxSession):
    """A local-workspace session whose commands run in a bubblewrap sandbox.

    File primitives also accept paths as commands see them (``/workspace/a``).
    """

    def __init__(
        self,
        state: SandboxSessionState,
        *,
        policy: SandboxPolicy,
        env: Mapping[str, str] | None = None,
        host_environment: HostEnvironmentPolicy | None = None,
        exec_timeout: float = DEFAULT_EXEC_TIMEOUT,
        max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
        pre_stop_hook_timeout: float = DEFAULT_PRE_STOP_HOOK_TIMEOUT,
    ) -> None:
        super().__init__(
            state,
            env=env,
            host_environment=host_environment or HostEnvironmentPolicy(inherit=False),
            exec_timeout=exec_timeout,
            max_output_bytes=max_output_bytes,
            pre_stop_hook_timeout=pre_stop_hook_timeout,
        )
        self._policy = policy
        self._binds = bind_args(policy.readonly_binds)

    @property
    def display_root(self) -> str:
        """The workspace root as commands (and so the model) see it."""
        return SANDBOX_ROOT

    def _command_argv(self, argv: list[str], workdir: Path) -> list[str]:
        # bwrap inherits the (already minimal) environment: no --setenv, so values such as
        # API keys never appear in bwrap's command line, which every host user can read
        inside = SANDBOX_ROOT
        if workdir != self.root:
            inside += "/" + workdir.relative_to(self.root).as_posix()
        full = bwrap_argv(self._policy, self._binds, self.root, inside, argv)
        cgroup = _EXEC_CGROUP.get()
        if cgroup is not None:
            full = ["/bin/sh", "-c", _ENTER_CGROUP, str(cgroup / "cgroup.procs"), *full]
        return full

    def _local(self, path: str | os.PathLike[str]) -> str:
        return _workspace_relative(os.fspath(path))

    async def _exec_argv(
        self,
        argv: list[str],
        *,
        timeout: float | None,  # noqa: ASYNC109 - the timeout kills the sandbox
        workdir: str | None,
        env: dict[str, str] | None,
    ) -> ExecResult:
        """Run ``argv`` in the sandbox (see ``UnixLocalSandboxSession._exec_argv``); without
        the seccomp filter, setuid/setgid bits are stripped from the workspace afterwards."""
        try:
            return await self._exec_limited(argv, timeout, workdir, env)
        finally:
            if self._policy.seccomp is None:  # the command's processes are all gone now
                await asyncio.to_thread(_hostfs.strip_setid_bits, self.root)

    async def _exec_limited(
        self,
        argv: list[str],
        timeout: float | None,  # noqa: ASYNC109 - the timeout kills the sandbox
        workdir: str | None,
        env: dict[str, str] | None,
    ) -> ExecResult:
        """``argv`` in a pids cgroup of its own when ``max_processes`` is enforced that way."""
        base, limit = self._policy.pids_cgroup, self._policy.max_processes
        if base is None or limit is None:
            return await super()._exec_argv(argv, timeout=timeout, workdir=workdir, env=env)
        self._check_not_deleted("exec")
        try:
            cgroup = await asyncio.to_thread(create_cgroup, base, limit + 2)  # + bwrap's two
        except OSError as exc:
            raise SandboxError(
                f"exec: cannot create the pids cgroup that enforces max_processes under {base}: "
                f"{exc.strerror or exc}",
                operation="exec",
            ) from exc
        token = _EXEC_CGROUP.set(cgroup)
        try:
            return await super()._exec_argv(argv, timeout=timeout, workdir=workdir, env=env)
        finally:
            _EXEC_CGROUP.reset(token)
            await asyncio.to_thread(remove_cgroup, cgroup)


def _optional_limit(name: str, value: int | None, minimum: int) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise UserError(f"{name} must be None or an integer >= {minimum}, got {value!r}")
    return value


class BubblewrapSandboxClient(UnixLocalSandboxClient):
    """Creates, resumes and deletes sessions whose commands run under bubblewrap.

    ``network=False`` gives commands no network at all (not even the host's 127.0.0.1);
    ``True`` shares the host's network namespace. ``memory_limit_mb`` caps each process's
    address space (and the size of the private ``/tmp`` and ``/dev/shm``); ``max_processes``
    caps the processes and threads a command may run at once; ``None`` means no limit.
    ``readonly_binds`` are the host paths mounted read-only (default: system directories and
    a few ``/etc`` files; extend with ``(*DEFAULT_READONLY_BINDS, "/opt/tool")``). ``env`` and
    the keyword settings are those of ``UnixLocalSandboxClient``; ``HOME`` is ``/workspace``.

    Unlike ``UnixLocalSandboxClient``, commands get a minimal environment by default
    (``inherit_host_environment=False``: ``PATH`` of the system directories, ``HOME``,
    ``LANG``, no host variable); ``host_environment_allowlist`` names host variables to pass,
    and ``inherit_host_environment=True`` passes every host variable except credential-looking
    ones (host ``PATH`` entries outside the read-only binds do not exist in the sandbox).

    Raises ``UserError`` when bwrap is missing or cannot create namespaces here (the message
    says how to install or enable it), or when a limit cannot be enforced.
    """

    backend_name: ClassVar[str] = "bubblewrap"
    _default_host_allowlist: ClassVar[frozenset[str]] = frozenset()

    def __init__(
        self,
        env: Mapping[str, str] | None = None,
        *,
        network: bool = False,
        memory_limit_mb: int | None = None,
        max_processes: int | None = None,
        readonly_binds: Sequence[str] = DEFAULT_READONLY_BINDS,
        inherit_host_environment: bool = False,
        host_environment_allowlist: Collection[str] | None = None,
        exec_timeout: float = DEFAULT_EXEC_TIMEOUT,
        max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
        pre_stop_hook_timeout: float = DEFAULT_PRE_STOP_HOOK_TIMEOUT,
    ) -> None:
        super().__init__(
            env,
            inherit_host_environment=inherit_host_environment,
            host_environment_allowlist=host_environment_allowlist,
            exec_timeout=exec_timeout,
            max_output_bytes=max_output_bytes,
            pre_stop_hook_timeout=pre_stop_hook_timeout,
        )
        if not isinstance(network, bool):
            raise UserError(f"network must be True or False, got {network!r}")
        self.network = network
        self.memory_limit_mb = _optional_limit("memory_limit_mb", memory_limit_mb, 16)
        self.max_processes = _optional_limit("max_processes", max_processes, 1)
        self.readonly_binds = check_binds(readonly_binds)
        probe = probe_bwrap()
        if probe.error is not None or probe.path is None:
            raise UserError(probe.error or INSTALL_HINT)
        self._policy = SandboxPolicy(
            bwrap=probe.path,
            network=network,
            readonly_binds=self.readonly_binds,
            memory_limit_mb=self.memory_limit_mb,
            max_processes=self.max_processes,
            disable_userns=probe.disable_userns,
            tmpfs_size=probe.tmpfs_size,
            prlimit=self._find_prlimit(),
            pids_cgroup=self._find_pids_cgroup(),
            seccomp=seccomp_source() if seccomp_works(probe.path, probe.disable_userns) else None,
        )

    def _find_prlimit(self) -> str | None:
        if self.memory_limit_mb is None and (self.max_processes is None or os.getuid() == 0):
            return None
        prlimit = shutil.which("prlimit", path=DEFAULT_PATH)
        if prlimit is None:
            raise UserError(
                "memory_limit_mb and max_processes need `prlimit` (util-linux) in a system "
                "directory: install util-linux, or pass None for these limits"
            )
        return prlimit

    def _find_pids_cgroup(self) -> Path | None:
        if self.max_processes is None or os.getuid() != 0:
            return None
        base, reason = pids_cgroup_base()
        if base is None:
            raise UserError(
                "max_processes cannot be enforced: running as root, the kernel ignores the "
                "process-count rlimit (even in a user namespace), so sandmem needs a writable "
                f"cgroup with the pids controller, and {reason}. Run as a non-root user, mount "
                "the cgroup filesystem writable, or pass max_processes=None"
            )
        return base

    def _make_session(self, state: SandboxSessionState) -> BubblewrapSandboxSession:
        # the client's settings govern the session, also a resumed one: record those
        state = state.model_copy(update={"backend_settings": self._backend_settings()})
        return BubblewrapSandboxSession(
            state,
            policy=self._policy,
            env=self.env,
            host_environment=self.host_environment,
            exec_timeout=self.exec_timeout,
            max_output_bytes=self.max_output_bytes,
            pre_stop_hook_timeout=self.pre_stop_hook_timeout,
        )

    def _backend_settings(self) -> dict[str, object]:
        """A record of the sandbox the session's commands run in: the settings of the client
        that created or resumed it (``env`` is left out: it may hold secrets)."""
        return {
            "network": self.network,
            "memory_limit_mb": self.memory_limit_mb,
            "max_processes": self.max_processes,
            "readonly_binds": list(self.readonly_binds),
            "sandbox_root": SANDBOX_ROOT,
        }
