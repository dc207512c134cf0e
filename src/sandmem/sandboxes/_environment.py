"""Which host environment variables a sandbox command inherits.

``UnixLocalSandboxClient`` inherits the host environment by default (as the reference SDK does),
so ``python``, ``git`` and ``pytest`` found on the user's ``PATH`` work in the sandbox. Unlike the
reference, variables whose *names* look like credentials are never inherited unless they are
allowlisted by name: a model that runs ``env`` must not see the user's API keys.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from sandmem._errors import UserError

#: a name containing one of these (case-insensitive) looks like a credential
CREDENTIAL_MARKERS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL")
#: a name starting with one of these belongs to a cloud or model provider's client
CREDENTIAL_PREFIXES = ("OPENAI_", "ANTHROPIC_", "AWS_", "GITHUB_", "AZURE_", "GOOGLE_")
#: what ``inherit_host_environment=False`` keeps when no allowlist is given
MINIMAL_HOST_VARIABLES = frozenset(
    {
        "PATH",
        "LANG",
        "LANGUAGE",
        "LC_ALL",
        "LC_COLLATE",
        "LC_CTYPE",
        "LC_MESSAGES",
        "LC_MONETARY",
        "LC_NUMERIC",
        "LC_TIME",
        "TERM",
        "TZ",
        "USER",
        "LOGNAME",
        "SHELL",
    }
)


def looks_like_credential(name: str) -> bool:
    upper = name.upper()
    return any(marker in upper for marker in CREDENTIAL_MARKERS) or upper.startswith(
        CREDENTIAL_PREFIXES
    )


@dataclass(frozen=True)
class HostEnvironmentPolicy:
    """``inherit``: take every host variable except credential-looking ones; otherwise only
    the ``allowlist`` (default ``MINIMAL_HOST_VARIABLES``). Names in ``allowlist`` are always
    passed when the host has them, credential-looking or not."""

    inherit: bool = True
    allowlist: frozenset[str] = frozenset()

    @classmethod
    def of(
        cls,
        inherit_host_environment: bool,
        host_environment_allowlist: Collection[str] | None,
        *,
        default_allowlist: frozenset[str] = MINIMAL_HOST_VARIABLES,
    ) -> HostEnvironmentPolicy:
        """The policy for a client's two settings; ``default_allowlist`` is what
        ``inherit_host_environment=False`` keeps when no allowlist is given."""
        if not isinstance(inherit_host_environment, bool):
            raise UserError(
                f"inherit_host_environment must be True or False, got {inherit_host_environment!r}"
            )
        if isinstance(host_environment_allowlist, str):
            raise UserError(
                "host_environment_allowlist must be a collection of variable names, not a "
                f"string: write [{host_environment_allowlist!r}]"
            )
        if host_environment_allowlist is None:
            names = frozenset() if inherit_host_environment else default_allowlist
        else:
            names = frozenset(host_environment_allowlist)
        return cls(inherit=inherit_host_environment, allowlist=names)

    def select(self, environ: Mapping[str, str]) -> dict[str, str]:
        """The host variables a command inherits from ``environ``."""
        return {
            name: value
            for name, value in environ.items()
            if name in self.allowlist or (self.inherit and not looks_like_credential(name))
        }
