"""Install rules, systemd units, the man page and the Debian package.

Run by ctest from the build directory (DNSLB_BUILD: that directory,
DNSLB_SRC: the source root):
  - dnslb(1) is generated from docs/cli.md at build time: the build's page
    equals a fresh generation, renders without groff warnings, and names
    every option `dnslb --help` lists;
  - `systemd-analyze verify` accepts both units (with the build's binary and
    man page in place of the installed ones);
  - `cmake --install` into a DESTDIR gives exactly the expected files;
  - `cpack -G DEB` builds a package with those files, /etc/dnslb/dnslb.conf
    as a conffile, the maintainer scripts, and shared-library dependencies.
"""

import os
import re
import shutil
import subprocess
import sys

import pytest

BUILD = os.environ.get("DNSLB_BUILD", "build")
SRC = os.environ.get("DNSLB_SRC", os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def test_man_page_is_docs_cli_md():
    page = os.path.join(BUILD, "dnslb.1")
    fresh = run([sys.executable, os.path.join(SRC, "cmake", "cli2man.py"),
                 os.path.join(SRC, "docs", "cli.md"), "0"]).stdout
    built = open(page).read()
    strip = lambda t: re.sub(r'^\.TH .*$', "", t, flags=re.M)  # noqa: E731
    assert strip(built) == strip(fresh), "dnslb.1 is not docs/cli.md: rebuild"
    if shutil.which("groff"):
        r = run(["groff", "-man", "-Tutf8", "-ww", "-z", page])
        assert r.stderr == "", r.stderr


def test_every_option_documented():
    helptext = run([os.path.join(BUILD, "dnslb"), "--help"]).stdout
    opts = set(re.findall(r"(--[a-z][a-z-]+)", helptext))
    assert "--check-config" in opts and "--log-timestamps" in opts
    cli = open(os.path.join(SRC, "docs", "cli.md")).read()
    page = open(os.path.join(BUILD, "dnslb.1")).read().replace("\\-", "-")
    for o in sorted(opts):
        assert o in cli, "%s is not in docs/cli.md" % o
        assert o in page, "%s is not in dnslb(1)" % o


@pytest.mark.skipif(not shutil.which("systemd-analyze"), reason="systemd-analyze missing")
@pytest.mark.parametrize("unit", ["dnslb.service", "dnslb@.service"])
def test_units_verify(tmp_path, unit):
    text = open(os.path.join(BUILD, unit)).read()
    m = re.search(r"^ExecStart=(\S+)", text, re.M)
    text = text.replace(m.group(1), os.path.abspath(os.path.join(BUILD, "dnslb")))
    name = unit.replace("@.", "@test.")
    (tmp_path / unit).write_text(text)
    mandir = tmp_path / "man" / "man1"
    mandir.mkdir(parents=True)
    shutil.copy(os.path.join(BUILD, "dnslb.1"), mandir)
    env = dict(os.environ, MANPATH=str(tmp_path / "man"))
    r = run(["systemd-analyze", "verify", str(tmp_path / name)], env=env, cwd=str(tmp_path))
    assert r.returncode == 0 and r.stderr == "", r.stderr
    for key in ("Type=notify", "ExecReload=/bin/kill -HUP $MAINPID", "User=_dnslb",
                "CapabilityBoundingSet=CAP_NET_BIND_SERVICE", "--check-config",
                "NoNewPrivileges=true", "ProtectSystem=full"):
        assert key in text


EXPECTED = {
    "etc/dnslb/dnslb.conf",
    "usr/bin/dnslb",
    "usr/lib/systemd/system/dnslb.service",
    "usr/lib/systemd/system/dnslb@.service",
    "usr/lib/sysusers.d/dnslb.conf",
    "usr/share/man/man1/dnslb.1",
}


def installed_files(root):
    out = set()
    for d, _, files in os.walk(root):
        for f in files:
            out.add(os.path.relpath(os.path.join(d, f), root))
    return out


def test_install_destdir(tmp_path):
    dest = tmp_path / "root"
    r = run(["cmake", "--install", BUILD, "--prefix", "/usr"],
            env=dict(os.environ, DESTDIR=str(dest)))
    assert r.returncode == 0, r.stderr
    files = installed_files(str(dest))
    docs = {f for f in files if f.startswith("usr/share/doc/dnslb/")}
    assert "usr/share/doc/dnslb/cli.md" in docs
    assert files - docs == EXPECTED
    conf = (dest / "etc/dnslb/dnslb.conf").read_text()
    assert conf == open(os.path.join(SRC, "conf", "dnslb.conf")).read()


@pytest.mark.skipif(not shutil.which("dpkg-deb") or not shutil.which("cpack"),
                    reason="dpkg-deb or cpack missing")
def test_debian_package(tmp_path):
    r = run(["cpack", "-G", "DEB", "-B", str(tmp_path), "--config",
             os.path.join(BUILD, "CPackConfig.cmake")], cwd=BUILD)
    assert r.returncode == 0, r.stdout + r.stderr
    debs = [f for f in os.listdir(tmp_path) if f.endswith(".deb")]
    assert len(debs) == 1
    deb = str(tmp_path / debs[0])
    listing = run(["dpkg-deb", "-c", deb]).stdout
    files = {l.split()[-1].lstrip("./") for l in listing.splitlines() if not l.startswith("d")}
    docs = {f for f in files if f.startswith("usr/share/doc/")}
    assert files - docs == EXPECTED
    info = run(["dpkg-deb", "-I", deb]).stdout
    depends = re.search(r"^ Depends: (.*)$", info, re.M).group(1)
    for lib in ("libev4", "liblua5.4-0", "libck0", "libsodium23", "libsystemd0", "libc6"):
        assert lib in depends, depends
    ctl = tmp_path / "ctl"
    assert run(["dpkg-deb", "-e", deb, str(ctl)]).returncode == 0
    assert (ctl / "conffiles").read_text().split() == ["/etc/dnslb/dnslb.conf"]
    for script in ("postinst", "prerm", "postrm"):
        assert os.access(ctl / script, os.X_OK)


@pytest.mark.skipif(not os.access("/usr/bin/dnsdist", os.X_OK), reason="dnsdist missing")
def test_migration_guide_table_is_current():
    """docs/migrating-from-dnsdist.md's function table is what
    docs/gen-compat.py makes from the two binaries now."""
    gen = os.path.join(SRC, "docs", "gen-compat.py")
    r = run([sys.executable, gen, os.path.join(BUILD, "dnslb")])
    assert r.returncode == 0, r.stderr
    guide = open(os.path.join(SRC, "docs", "migrating-from-dnsdist.md")).read()
    assert r.stdout in guide, "the table is stale: run docs/gen-compat.py --update BUILD/dnslb"
