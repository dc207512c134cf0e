"""Finding 5: under bubblewrap (as root too) a command cannot leave a setuid or setgid file in
the workspace: a seccomp filter refuses the bits, and without it they are stripped after each
command."""

from __future__ import annotations

import dataclasses
import os
import stat
from pathlib import Path

import pytest

from sandmem.sandboxes._bubblewrap import BubblewrapSandboxClient
from sandmem.sandboxes._bwrap_host import probe_bwrap, setid_seccomp_program

pytestmark = pytest.mark.skipif(probe_bwrap().error is not None, reason="bwrap cannot run here")

ATTEMPTS = """
cp /bin/true t; chmod u+s t; chmod g+s t; chmod 6755 t
python3 -c 'import os; os.close(os.open("n", os.O_CREAT | os.O_WRONLY, 0o4755))'
python3 -c 'import os; f = os.open("m", os.O_CREAT | os.O_WRONLY, 0o755); os.fchmod(f, 0o4755)'
python3 -c 'import os; os.chmod("t", 0o2755, follow_symlinks=True)'
mkdir -m 2755 d; mkdir -p e && chmod g+s e
install -m 4755 /bin/true i
echo done
"""


def _setid_files(root: Path) -> list[str]:
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            st = os.lstat(os.path.join(dirpath, name))
            if st.st_mode & (stat.S_ISUID | stat.S_ISGID):
                found.append(name)
    return found


@pytest.mark.parametrize("seccomp", [True, False], ids=["seccomp", "strip"])
async def test_no_setuid_or_setgid_file_remains(seccomp: bool) -> None:
    client = BubblewrapSandboxClient()
    if not seccomp:
        client._policy = dataclasses.replace(client._policy, seccomp=None)
    elif client._policy.seccomp is None:
        pytest.skip("seccomp filters are not available here")
    session = await client.create()
    async with session:
        result = await session.exec(ATTEMPTS, timeout=30)
        assert "done" in result.output
        assert (session.root / "t").exists()
        assert _setid_files(session.root) == []
        ordinary = await session.exec("chmod 750 t && mkdir -p x/y && echo ok > x/y/f", timeout=30)
        assert ordinary.exit_code == 0
        assert stat.S_IMODE(os.stat(session.root / "t").st_mode) == 0o750
        mounts = await session.exec("grep ' /workspace ' /proc/self/mountinfo", timeout=30)
        assert "nosuid" in mounts.output.split(" /workspace ")[1].split()[0]
    await client.delete(session)


def test_the_filter_refuses_other_abis() -> None:
    program = setid_seccomp_program("x86_64")
    assert program is not None and len(program) % 8 == 0
    assert setid_seccomp_program("sparc") is None
