"""Command line, configuration checking, signals, ACL and the SIGUSR1 dump."""

import os
import pathlib
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time

import pytest

from dnslbtest import (IMPL, SRC, DNSDIST, TcpClient, UdpClient, a_addrs, build_query,
                       dnslb_bin, free_port, lua_server, tcp_query, udp_query)


def run_bin(args, timeout=20, cwd=None):
    exe = DNSDIST if IMPL == "dnsdist" else dnslb_bin()
    r = subprocess.run([exe] + args, capture_output=True, text=True, timeout=timeout,
                       stdin=subprocess.DEVNULL, cwd=cwd)
    return r.returncode, r.stdout + r.stderr


def check_config(path):
    return run_bin(["--check-config", "-C", path])


def write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def ok_line(path):
    return "Configuration '%s' OK!" % path


# ---- --check-config -----------------------------------------------------

@pytest.mark.dnslb_only("dnslb's own default config")
def test_check_config_shipped_conf():
    path = os.path.join(SRC, "conf", "dnslb.conf")
    assert os.path.exists(path), "conf/dnslb.conf missing"
    rc, out = check_config(path)
    assert rc == 0, out
    assert out == ok_line(path) + "\n", out


def test_check_config_good(tmp_path):
    path = write(tmp_path, "good.conf", """-- a good config
setLocal("127.0.0.1:5300")
addLocal("127.0.0.1:5301", {reusePort=true, doTCP=true, maxInFlight=10})
setACL({"127.0.0.0/8", "10.0.0.0/8"})
addACL("192.168.0.0/16")
newServer("127.0.0.1:5399")
newServer({address="127.0.0.1:5398", name="b2", pool="abuse", order=2, weight=10, qps=100})
newServer({address="[::1]:5397", name="b3", weight="3", retries="2"})
setServerPolicy(leastOutstanding)
setUDPTimeout(2)
setServFailWhenNoServer(true)
setDropEmptyQueries(false)
setAllowEmptyResponse(false)
setPayloadSizeOnSelfGeneratedAnswers(1232)
setAddEDNSToSelfGeneratedResponses(true)
setTCPRecvTimeout(2)
setMaxTCPQueriesPerConnection(100)
setMaxTCPConnectionsPerClient(10)
setMaxTCPConnectionDuration(30)
setSecurityPollSuffix("")
assert(DNSQType.A == 1 and DNSQType.AAAA == 28)
assert(DNSClass.IN == 1)
assert(DNSRCode.NXDOMAIN == 3 and DNSRCode.REFUSED == 5)
assert(DNSOpcode.Notify == 4)
assert(DNSSection.Answer == 1)
assert(DNSAction.Drop ~= nil and DNSResponseAction.Allow ~= nil)
assert(#getServers() == 3)
getServer(1):setDown()
infolog("config loaded")
""")
    rc, out = check_config(path)
    assert rc == 0, out
    # as dnsdist: infolog() prints, "Added downstream server" does not
    assert out == "config loaded\n" + ok_line(path) + "\n", out


BROKEN = [
    ("syntax-error", 'setLocal("127.0.0.1:5300")\nlocal x = = 1\n', 2,
     "unexpected symbol near '='"),
    ("unknown-function", 'setLocal("127.0.0.1:5300")\n\nfrobnicate(1)\n', 3,
     "attempt to call a nil value (global 'frobnicate')"),
    ("server-bad-address", 'setLocal("127.0.0.1:5300")\nnewServer("127.0.0.355")\n', 2,
     "newServer: invalid address '127.0.0.355'"),
    ("server-table-bad-address", '\nnewServer({address="127.0.0.355:53"})\n', 2,
     "newServer: invalid address '127.0.0.355:53'"),
    # a bad weight= is not an error of the configuration: as in dnsdist
    # 1.7.3, newServer logs it and adds nothing (tests/diff/test_routing.py)
    ("acl-bad-address", 'setLocal("127.0.0.1:5300")\naddACL("127.0.0.355")\n', 2,
     "addACL: invalid netmask '127.0.0.355'"),
    ("local-bad-address", '\n\n\nsetLocal("127.0.0.355:53")\n', 4,
     "setLocal: invalid address '127.0.0.355:53'"),
    ("runtime-error", 'local t = nil\nlocal y = t.x\n', 2,
     "attempt to index a nil value (local 't')"),
]


@pytest.fixture
def short_dir():
    """A directory with a short path: Lua shortens long chunk names in its
    messages, which test_error_location_long_path covers on its own."""
    d = tempfile.mkdtemp(prefix="dle")
    yield pathlib.Path(d)
    shutil.rmtree(d, ignore_errors=True)


@pytest.mark.parametrize("name,text,line,msg", BROKEN, ids=[b[0] for b in BROKEN])
def test_check_config_broken(short_dir, name, text, line, msg):
    path = write(short_dir, "bad.conf", text)
    rc, out = check_config(path)
    if IMPL == "dnsdist" and name in ("server-bad-address", "server-table-bad-address"):
        pytest.skip("1.7.3 prints an error but says OK")
    assert rc == 1, "exit %d:\n%s" % (rc, out)
    assert ok_line(path) not in out
    if IMPL == "dnslb":
        # the whole output (docs/dnsdist-differences.md, "Errors in the
        # configuration name the file and line")
        assert out == "Error while parsing the configuration file '%s': %s:%d: %s\n" % (
            path, path, line, msg), out


@pytest.mark.dnslb_only("error location with a long path")
def test_error_location_long_path(tmp_path):
    """The error names the whole file path, however long (Lua's own chunk
    names are cut to 60 characters with a leading '...')."""
    deep = tmp_path / ("a-rather-long-directory-name-" * 3)
    deep.mkdir()
    path = write(deep, "broken-config-file.conf", 'setLocal("127.0.0.1:5300")\n\nfrobnicate(1)\n')
    assert len(path) > 100
    rc, out = check_config(path)
    assert rc == 1, out
    assert out == ("Error while parsing the configuration file '%s': %s:3: attempt to call a "
                   "nil value (global 'frobnicate')\n" % (path, path)), out


@pytest.mark.dnslb_only("error location in an included file")
def test_check_config_error_in_included_file(short_dir):
    tmp_path = short_dir
    inc = tmp_path / "conf.d"
    inc.mkdir()
    (inc / "10-ok.conf").write_text('newServer("127.0.0.1:5399")\n')
    (inc / "20-bad.conf").write_text('-- comment\nfrobnicate()\n')
    path = write(tmp_path, "main.conf", 'includeDirectory("%s")\n' % inc)
    rc, out = check_config(path)
    assert rc == 1, out
    assert out == ("Error while parsing the configuration file '%s': %s:2: attempt to call a "
                   "nil value (global 'frobnicate')\n" % (path, inc / "20-bad.conf")), out


def test_broken_config_fails_startup(tmp_path):
    path = write(tmp_path, "bad.conf", 'setLocal("127.0.0.1:%d")\nfrobnicate()\n' % free_port())
    rc, out = run_bin(["--supervised", "--disable-syslog", "-C", path], timeout=20)
    assert rc != 0, out


def test_unknown_server_key_check_config_silent(tmp_path):
    """dnsdist 1.7 ignores unknown keys silently, and so does --check-config."""
    path = write(tmp_path, "w.conf",
                 'newServer({address="127.0.0.1:5399", qps="10", bogusKey=1})\n')
    rc, out = check_config(path)
    assert rc == 0, out
    assert out == ok_line(path) + "\n", out


@pytest.mark.dnslb_only("dnslb logs unknown newServer keys at startup (1.7.3 is silent)")
def test_unknown_server_key_logged_at_startup(dnslb, responder):
    d = dnslb('newServer({address="%s", bogusKey=1})\n' % responder.address)
    assert "newServer: unknown key 'bogusKey'" in d.output().splitlines(), d.output()


# ---- version, help ------------------------------------------------------

@pytest.mark.dnslb_only("dnslb's version line")
@pytest.mark.parametrize("flag", ["-V", "--version"])
def test_version(flag):
    rc, out = run_bin([flag])
    assert rc == 0
    first = out.splitlines()[0]
    assert first.startswith("dnslb ") and len(first.split()) >= 2, out


@pytest.mark.dnslb_only("dnslb's usage text")
def test_help():
    rc, out = run_bin(["-h"])
    assert rc == 0, out
    assert "--check-config" in out and "-C" in out


# ---- listeners, backends, ACL from the command line ----------------------

def test_startup_log_lines(dnslb, responder):
    d = dnslb(lua_server(responder))
    out = d.output()
    assert "Added downstream server %s" % responder.address in out, out
    assert "Listening on 127.0.0.1:%d" % d.port in out, out


def test_local_flag_replaces_config_listeners(dnslb, responder):
    p1, p2 = free_port(), free_port()
    d = dnslb(lua_server(responder), args=["-l", "127.0.0.1:%d" % p1, "-l", "127.0.0.1:%d" % p2])
    for p in (p1, p2):
        r = udp_query(p, "l.example.test.")
        assert r is not None and a_addrs(r) == ["192.0.2.1"], "no answer on -l port %d" % p
        assert tcp_query(p, "l.example.test.") is not None
    assert udp_query(d.port, "cfg.example.test.", timeout=1.5) is None, \
        "the config's setLocal listener is still active despite -l"


def test_positional_backend(dnslb, responder):
    d = dnslb("", args=[responder.address])
    r = udp_query(d.port, "pos.example.test.")
    assert r is not None and a_addrs(r) == ["192.0.2.1"]
    assert len(responder.queries_for("pos.")) == 1
    if d.impl == "dnslb":
        assert "Added downstream server %s" % responder.address in d.output()


def test_acl_drop_counted(dnslb, responder):
    d = dnslb(lua_server(responder) + 'setACL({"192.0.2.0/24"})\n')
    with UdpClient(d.port) as c:
        c.send(build_query("acl.example.test.", qid=1))
        assert c.recv(1.5) is None, "query from outside the ACL answered"
    assert d.stat_at_least("acl-drops", 1) == 1
    # TCP: no answer (connection refused, closed, or silent)
    try:
        with TcpClient(d.port, timeout=3) as c:
            c.send_msg(build_query("acl-tcp.example.test.", qid=2))
            assert c.recv_msg(2.0) is None
    except OSError:
        pass
    assert responder.queries_for("acl") == []


@pytest.mark.dnslb_only("1.7.3 applies -a before the config, whose setACL replaces it")
def test_acl_flag_adds(dnslb, responder):
    d = dnslb(lua_server(responder) + 'setACL({"192.0.2.0/24"})\n', args=["-a", "127.0.0.1/32"])
    r = udp_query(d.port, "acl.example.test.")
    assert r is not None and a_addrs(r) == ["192.0.2.1"]


def test_add_acl_keeps_default(dnslb, responder):
    d = dnslb(lua_server(responder) + 'addACL("192.0.2.0/24")\n')
    assert udp_query(d.port, "acl.example.test.") is not None


def test_repeated_reuseport_listener(dnslb, responder):
    d = dnslb(lua_server(responder) + 'addLocal("127.0.0.1:@PORT@", {reusePort=true})\n' * 2,
              listen_opts={"reusePort": True})
    for i in range(10):
        assert udp_query(d.port, "rp%d.example.test." % i) is not None
    assert tcp_query(d.port, "rp.example.test.") is not None


def test_listen_port_in_use_fails(tmp_path):
    busy = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    busy.bind(("127.0.0.1", 0))
    port = busy.getsockname()[1]
    try:
        path = write(tmp_path, "busy.conf", 'setLocal("127.0.0.1:%d")\n' % port)
        exe = DNSDIST if IMPL == "dnsdist" else dnslb_bin()
        p = subprocess.Popen([exe, "--supervised", "--disable-syslog", "-C", path],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             stdin=subprocess.DEVNULL)
        try:
            rc = p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            pytest.fail("kept running although its listen port is taken")
        assert rc != 0
    finally:
        busy.close()


def test_include_directory(dnslb, responder, tmp_path):
    inc = tmp_path / "inc"
    inc.mkdir()
    (inc / "10-server.conf").write_text(lua_server(responder, name="included"))
    (inc / "ignored.txt").write_text("this is not Lua\n")
    d = dnslb('includeDirectory("%s")\n' % inc)
    r = udp_query(d.port, "inc.example.test.")
    assert r is not None and a_addrs(r) == ["192.0.2.1"]


@pytest.mark.dnslb_only("getResolvers is 1.8+")
def test_get_resolvers(dnslb, responder, tmp_path):
    rc = tmp_path / "resolv.conf"
    rc.write_text("# test\nsearch example.test\nnameserver 127.0.0.1\noptions ndots:1\n")
    d = dnslb('local r = getResolvers("%s")\nassert(#r == 1)\n'
              'newServer({address=r[1] .. ":%d"})\n' % (rc, responder.port))
    assert udp_query(d.port, "res.example.test.") is not None


def test_server_api(dnslb, make_responder):
    r1, r2 = make_responder(), make_responder()
    d = dnslb(lua_server(r1, name="one") + lua_server(r2, name="two") +
              "assert(#getServers() == 2)\nrmServer(0)\nassert(#getServers() == 1)\n")
    for i in range(5):
        assert udp_query(d.port, "api%d.example.test." % i) is not None
    assert r1.queries_for("api") == [] and len(r2.queries_for("api")) == 5


def test_numbers_as_strings(dnslb, responder):
    d = dnslb(lua_server(responder, weight="2", order="1", sockets="2") + 'setUDPTimeout("1")\n'
              if IMPL == "dnslb" else lua_server(responder, weight="2", order="1"))
    assert udp_query(d.port, "str.example.test.") is not None


def test_infolog(dnslb, responder):
    d = dnslb(lua_server(responder) + 'infolog("hello-from-lua-infolog")\n'
              'warnlog("hello-from-lua-warnlog")\n')
    assert "hello-from-lua-infolog" in d.output()
    assert "hello-from-lua-warnlog" in d.output()


@pytest.mark.dnslb_only("--workers / setWorkerThreads are dnslb's")
@pytest.mark.parametrize("how", ["flag", "lua"])
def test_workers(dnslb, responder, how):
    if how == "flag":
        d = dnslb(lua_server(responder), args=["--workers", "1"])
    else:
        d = dnslb(lua_server(responder) + "setWorkerThreads(3)\n")
    for i in range(5):
        assert udp_query(d.port, "w%d.example.test." % i) is not None
        assert tcp_query(d.port, "w%d.example.test." % i) is not None


def test_verbose_flag(dnslb, responder):
    d = dnslb(lua_server(responder), args=["-v"])
    assert udp_query(d.port, "v.example.test.") is not None


def test_drop_privileges(dnslb, responder):
    if os.geteuid() != 0:
        pytest.skip("needs root")
    try:
        nobody = pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("no user nobody")
    group = "nogroup"
    try:
        import grp
        grp.getgrnam(group)
    except KeyError:
        group = str(nobody.pw_gid)
    d = dnslb(lua_server(responder), args=["-u", "nobody", "-g", group])
    status = open("/proc/%d/status" % d.proc.pid).read()
    uids = [l for l in status.splitlines() if l.startswith("Uid:")][0].split()[1:]
    assert all(int(u) == nobody.pw_uid for u in uids), status
    assert udp_query(d.port, "priv.example.test.") is not None


# ---- signals ------------------------------------------------------------

@pytest.mark.dnslb_only("1.7.3 has no SIGTERM handler (exit 143)")
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_orderly_exit(dnslb, responder, sig):
    """Exit status 0 within 2 s, even with an idle TCP client connected and a
    UDP query waiting for a backend that never answers."""
    d = dnslb(lua_server(responder) + "setTCPRecvTimeout(30)\n")
    idle = TcpClient(d.port)
    pending = UdpClient(d.port)
    try:
        pending.send(build_query("drop.example.test.", qid=1))
        assert responder.wait_queries("drop.", 1, 3.0)
        t0 = time.monotonic()
        d.send_signal(sig)
        try:
            rc = d.proc.wait(2.0)
        except subprocess.TimeoutExpired:
            pytest.fail("still running 2 s after signal %d" % sig)
        d.stop()
        assert rc == 0, "exit status %d after signal %d\n%s" % (rc, sig, d.output())
        assert time.monotonic() - t0 <= 2.0
    finally:
        idle.close()
        pending.close()


@pytest.mark.dnslb_only("1.7.3 is killed by SIGHUP")
def test_sighup_survives(dnslb, responder):
    d = dnslb(lua_server(responder))
    assert udp_query(d.port, "before.example.test.") is not None
    d.send_signal(signal.SIGHUP)
    time.sleep(0.5)
    assert d.alive(), "killed by SIGHUP"
    r = udp_query(d.port, "after.example.test.")
    assert r is not None and a_addrs(r) == ["192.0.2.1"]
    assert tcp_query(d.port, "after.example.test.") is not None
    d.send_signal(signal.SIGHUP)
    time.sleep(0.3)
    assert d.alive()


COUNTERS = ["queries", "rdqueries", "responses", "servfail-responses", "frontend-noerror",
            "frontend-nxdomain", "frontend-servfail", "acl-drops", "self-answered",
            "downstream-timeouts", "downstream-send-errors", "no-policy",
            "noncompliant-queries", "noncompliant-responses", "empty-queries", "latency0-1",
            "latency1-10", "latency10-50", "latency50-100", "latency100-1000", "latency-slow",
            "latency-count", "tcp-client-connections"]


@pytest.mark.dnslb_only("SIGUSR1 dump")
def test_sigusr1_dump(dnslb, make_responder):
    r1, r2 = make_responder(), make_responder()
    d = dnslb(lua_server(r1, name="first") + lua_server(r2, name="second"))
    assert udp_query(d.port, "u1.example.test.") is not None
    assert tcp_query(d.port, "u1.example.test.") is not None
    start = len(d.lines)
    d.send_signal(signal.SIGUSR1)
    end = d.wait_line(lambda l: l.strip() == "stat-end", start, 5.0)
    assert end is not None, "no stat-end after SIGUSR1"
    block = d.lines[start:end]
    stats = {l.split()[1]: l.split()[2] for l in block if l.startswith("stat ")}
    for name in COUNTERS:
        assert name in stats, "counter %s missing from the dump" % name
        assert stats[name].isdigit()
    assert int(stats["queries"]) == 2 and int(stats["tcp-client-connections"]) == 1
    backends = [l.split() for l in block if l.startswith("backend ")]
    assert [b[1] for b in backends] == ["first", "second"]
    for b in backends:
        assert b[2::2] == ["queries", "responses", "drops", "outstanding", "timeouts",
                           "senderrors", "servfails", "refused", "latency_us"], b
        assert all(x.isdigit() for x in b[3::2])
    assert sum(int(b[3]) for b in backends) == 2
    # the dump does not disturb serving; a second dump works too
    assert d.alive() and udp_query(d.port, "u2.example.test.") is not None
    assert d.stats()["queries"] == 3
