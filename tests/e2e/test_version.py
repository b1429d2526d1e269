"""--version: dnsdist's two lines, the version with the Lua version, then the
features compiled in (docs/cli.md)."""

import re
import subprocess

import pytest

from dnslbtest import dnslb_bin

pytestmark = pytest.mark.dnslb_only("dnslb's version text")


@pytest.mark.parametrize("flag", ["-V", "--version"])
def test_version_lines(flag):
    r = subprocess.run([dnslb_bin(), flag], capture_output=True, text=True, timeout=10)
    assert r.returncode == 0 and r.stderr == ""
    lines = r.stdout.splitlines()
    assert len(lines) == 2, r.stdout
    assert re.fullmatch(r"dnslb \d+\.\d+\.\d+ \(Lua 5\.4\.\d+\)", lines[0]), lines[0]
    assert lines[1] == ("Enabled features: carbon console(libsodium) dynblocks ecs "
                        "fleet(hiredis) kvstore(hiredis) packet-cache proxy-protocol "
                        "recvmmsg/sendmmsg systemd web(libmicrohttpd)")
