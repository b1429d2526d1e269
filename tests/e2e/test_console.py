"""The console: dnsdist 1.7's encrypted protocol on controlSocket(), with
setKey(); `dnslb -c [-e]` against dnslb and against Debian's dnsdist 1.7.3,
`dnsdist -c -e` against dnslb; wrong key, no key, console ACL, connection
limit, an oversized frame; how replies are formatted (returned values,
printed output, Lua errors); delta(); the daemon answering DNS throughout."""

import base64
import os
import re
import socket
import subprocess
import time

import pytest

from dnslbtest import (DNSDIST, SANITIZER_MARKERS, a_addrs, dnslb_bin, free_port, lua_server,
                       udp_query)

pytestmark = pytest.mark.dnslb_only("tests dnslb's console (dnsdist is driven explicitly)")

HAVE_DNSDIST = os.access(DNSDIST, os.X_OK)


def new_key():
    return base64.b64encode(os.urandom(32)).decode()


def console_conf(port, key=None, extra=""):
    s = 'controlSocket("127.0.0.1:%d")\n' % port
    if key is not None:
        s += 'setKey("%s")\n' % key
    return s + extra


def client(conf_path, cmd=None, args=(), stdin=None, home=None, exe=None, timeout=30):
    """Run a console client; returns (rc, stdout, stderr)."""
    argv = [exe or dnslb_bin(), "-C", conf_path, "-c"] + list(args)
    if cmd is not None:
        argv += ["-e", cmd]
    env = dict(os.environ)
    env["HOME"] = str(home or os.path.dirname(conf_path))
    r = subprocess.run(argv, input=stdin if stdin is not None else "", capture_output=True,
                       text=True, timeout=timeout, env=env,
                       cwd=os.path.dirname(conf_path))
    for m in SANITIZER_MARKERS:
        assert m not in r.stderr, r.stderr
    return r.returncode, r.stdout, r.stderr


def write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def answers(d):
    r = udp_query(d.port, "www.example.test.")
    return r is not None and a_addrs(r) == ["192.0.2.1"]


@pytest.fixture
def console(dnslb, responder):
    """A dnslb with a backend and a console; returns (daemon, console port, key)."""
    port = free_port()
    key = new_key()
    d = dnslb(lua_server(responder, name="b1") + console_conf(port, key), impl="dnslb",
              args=("--workers", "1"))
    return d, port, key


def test_startup_lines(console):
    d, port, _ = console
    out = d.output()
    assert "Console ACL allowing connections from: 127.0.0.0/8, ::1/128" in out
    assert "Accepting control connections on 127.0.0.1:%d" % port in out


def test_execute_replies(console):
    d, _, _ = console
    conf = d.conf_path
    assert answers(d)
    rc, out, err = client(conf, "showVersion()")
    assert rc == 0, err
    assert re.fullmatch(r"dnsdist 1\.7\.3 \(dnslb \S+\)\n", out), out
    # returned values, formatted as dnsdist formats them
    expect = [
        ("1+1", "2\n"),
        ("10/3", "3.3333333333333\n"),
        ("'abc'", "abc\n"),
        ("nil", ""),
        ("getServer(0)", "b1\n"),
        ("{b=2, a=1.5}", '{"a": 1.5, "b": 2}\n'),
        ("{}", "{}\n"),
        ("{[1]=0.1, x='3'}", '{"1": 0.10000000000000001, "x": 3}\n'),
        ('print("hi", 1)', "hi\t1\n"),
        ("x = 5", ""),
        ("local y = 1 return y + 1", "2\n"),
        ("testCrypto()", "Everything is ok!\n"),
        ("showConsoleACL()", "127.0.0.0/8\n::1/128\n"),
    ]
    for cmd, want in expect:
        rc, out, err = client(conf, cmd)
        assert rc == 0, (cmd, err)
        assert out == want, (cmd, out)
    rc, out, _ = client(conf, "true")
    assert rc == 0 and out == "true\n", out
    rc, out, _ = client(conf, "false, 'why'")
    assert rc == 0 and out == "false\nwhy\n", out
    rc, out, _ = client(conf, "print")
    assert rc == 0 and out.startswith("Command returned an object we can't print"), out
    assert '"function"' in out
    rc, out, _ = client(conf, "makeKey()")
    assert rc == 0 and re.fullmatch(r'setKey\("[A-Za-z0-9+/]{43}="\)\n', out), out
    # show*() output reaches the console
    rc, out, _ = client(conf, "showServers()")
    assert rc == 0 and "b1" in out and "Address" in out, out
    rc, out, _ = client(conf, "showPools()")
    assert rc == 0 and "ServerPolicy" in out, out
    # the client prints nothing but the reply (the config is read silently)
    assert "Added downstream server" not in out
    assert answers(d)


def test_lua_errors(console):
    d, _, _ = console
    rc, out, _ = client(d.conf_path, "nosuch()")
    assert rc == 0
    assert out.startswith('Error: [string "return nosuch()"]:1: '), out
    assert "nosuch" in out and "stack traceback:" in out
    rc, out, _ = client(d.conf_path, "x =")
    assert rc == 0 and out.startswith('Error: [string "x ="]:1: ') and out.endswith(": "), out
    rc, out, _ = client(d.conf_path, "newServer({address='not an address'})")
    assert rc == 0 and out.startswith("Error: "), out
    # an endless loop is stopped, the daemon goes on
    rc, out, _ = client(d.conf_path, "while true do end")
    assert rc == 0 and out.startswith("Error: ") and "stopped" in out, out
    # errors do not break the connection: one interactive session
    rc, out, err = client(d.conf_path, stdin="nosuch()\nerror('boom')\n1+1\nquit\n")
    assert rc == 0, err
    assert out.count("Error: ") == 2 and out.endswith("2\n"), out
    assert answers(d)
    rc, out, _ = client(d.conf_path, "'still here'")
    assert out == "still here\n"


def test_print_restored_after_error(console):
    d, _, _ = console
    client(d.conf_path, "error('boom')")
    # print is the real one again: a config-state function printing to the console works
    rc, out, _ = client(d.conf_path, "(function() print('a') showVersion() return 7 end)()")
    assert rc == 0
    lines = out.splitlines()
    assert lines[0] == "a" and lines[1].startswith("dnsdist 1.7.3 (dnslb ") and lines[2] == "7", out


def test_delta(console):
    d, _, _ = console
    rc, out, _ = client(d.conf_path, "delta()")
    assert rc == 0 and out == ""
    client(d.conf_path, "setServerPolicy(roundrobin)")
    client(d.conf_path, "showServers()")
    client(d.conf_path, "nosuch()")
    rc, out, _ = client(d.conf_path, "showServerPolicy()")
    assert out == "roundrobin\n", out
    rc, out, _ = client(d.conf_path, "delta()")
    assert rc == 0
    lines = out.splitlines()
    assert len(lines) == 2, out
    assert re.fullmatch(r"-- \w{3} \w{3} \d\d \d{4} \d\d:\d\d:\d\d \S+", lines[0]), out
    assert lines[1] == "setServerPolicy(roundrobin)"
    client(d.conf_path, "clearConsoleHistory()")
    rc, out, _ = client(d.conf_path, "delta()")
    assert out == ""


def test_dnsdist_client_drives_dnslb(console):
    if not HAVE_DNSDIST:
        pytest.skip("no dnsdist")
    d, port, key = console
    conf = d.conf_path
    for cmd, check in [("showVersion()", lambda o: o.startswith("dnsdist 1.7.3 (dnslb ")),
                       ("showServers()", lambda o: "b1" in o),
                       ("showPools()", lambda o: "ServerPolicy" in o),
                       ("dumpStats()", lambda o: "queries" in o),
                       ("getServer(0)", lambda o: o == "b1\n"),
                       ("2^10", lambda o: o == "1024.0\n" or o == "1024\n"),
                       ("nosuch()", lambda o: o.startswith("Error: "))]:
        r = subprocess.run([DNSDIST, "-C", conf, "-c", "-e", cmd], capture_output=True,
                           text=True, timeout=30, cwd=os.path.dirname(conf))
        assert check(r.stdout), (cmd, r.stdout, r.stderr)
    # the address and key from the command line
    r = subprocess.run([DNSDIST, "-C", "/dev/null", "-k", key, "-c", "127.0.0.1:%d" % port,
                        "-e", "showVersion()"], capture_output=True, text=True, timeout=30)
    assert r.stdout.startswith("dnsdist 1.7.3 (dnslb "), r.stdout + r.stderr
    assert answers(d)


def test_dnslb_client_drives_dnsdist(dnslb, tmp_path):
    if not HAVE_DNSDIST:
        pytest.skip("no dnsdist")
    d = dnslb("", impl="dnsdist")     # the fixture gives dnsdist a console and key
    rc, out, err = client(d.conf_path, "showVersion()")
    assert rc == 0, err
    assert out.startswith("dnsdist 1.7"), out
    rc, out, _ = client(d.conf_path, "1+1")
    assert out == "2\n", out
    # -k and an address, with an empty config
    empty = write(tmp_path, "empty.conf", "")
    rc, out, err = client(empty, "showVersion()", args=("127.0.0.1:%d" % d.console_port,
                                                        "-k", d.key))
    assert rc == 0 and out.startswith("dnsdist 1.7"), out + err
    # interactive: several commands on one connection
    rc, out, err = client(d.conf_path, stdin="1+1\nshowVersion()\n")
    assert rc == 0, err
    assert out.startswith("2\ndnsdist 1.7"), out


def test_wrong_key(console, tmp_path):
    d, port, _ = console
    other = write(tmp_path, "other.conf", console_conf(port, new_key()))
    rc, out, err = client(other, "showVersion()")
    assert rc != 0
    assert "key mismatch" in err, err
    assert d.wait_line("Could not decrypt message") is not None
    rc, out, err = client(other, "showVersion()", args=("-k", "!!!"))
    assert rc != 0 and "Unable to decode !!! as Base64" in err
    rc, out, _ = client(d.conf_path, "'ok'")
    assert out == "ok\n"
    assert answers(d)


def test_no_key_configured(dnslb, responder, tmp_path):
    port = free_port()
    d = dnslb(lua_server(responder) + console_conf(port), impl="dnslb")
    assert d.wait_line("no key has been set") is not None
    keyed = write(tmp_path, "keyed.conf", console_conf(port, new_key()))
    rc, out, err = client(keyed, "showVersion()")
    assert rc != 0 and "closed the connection" in err, (out, err)
    # a client without a key does not even connect
    rc, out, err = client(d.conf_path, "showVersion()")
    assert rc != 0 and "console key is not valid" in err, err
    assert answers(d)


def test_bad_key_is_a_config_error(tmp_path):
    conf = write(tmp_path, "bad.conf", 'setKey("abc")\n')
    r = subprocess.run([dnslb_bin(), "--check-config", "-C", conf], capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 1
    assert "Invalid encryption key of size 2, use setKey() to set a valid key" in r.stdout
    conf = write(tmp_path, "bad2.conf", 'setKey("!!!")\n')
    r = subprocess.run([dnslb_bin(), "--check-config", "-C", conf], capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 1 and "Unable to decode !!! as Base64" in r.stdout


def test_acl_refusal(console, dnslb, responder):
    d, port, key = console
    rc, out, _ = client(d.conf_path, "setConsoleACL('192.0.2.0/24')")
    assert rc == 0 and out == ""
    rc, out, err = client(d.conf_path, "showVersion()")
    assert rc != 0, out
    assert answers(d)
    # the same from the config: refused from the start
    port2 = free_port()
    d2 = dnslb(lua_server(responder) + console_conf(port2, key, "setConsoleACL({'10.0.0.0/8'})\n"),
               impl="dnslb", name="acl2")
    assert d2.wait_line("Console ACL allowing connections from: 10.0.0.0/8") is not None
    rc, out, err = client(d2.conf_path, "showVersion()")
    assert rc != 0
    assert answers(d2)


def test_connection_limit(dnslb, responder):
    port = free_port()
    key = new_key()
    d = dnslb(lua_server(responder) + console_conf(
        port, key, "setConsoleMaximumConcurrentConnections(1)\n"), impl="dnslb")
    held = socket.create_connection(("127.0.0.1", port), timeout=5)
    try:
        held.sendall(os.urandom(24))
        assert len(held.recv(24)) == 24     # it is being served
        rc, out, err = client(d.conf_path, "showVersion()")
        assert rc != 0
    finally:
        held.close()
    # once it is gone, a client gets in (the server notices the close first)
    for _ in range(50):
        rc, out, err = client(d.conf_path, "showVersion()")
        if rc == 0:
            break
        time.sleep(0.1)
    assert rc == 0 and out.startswith("dnsdist 1.7.3 (dnslb "), err
    assert answers(d)


def test_oversized_frame(console):
    d, port, _ = console
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    try:
        s.sendall(os.urandom(24))
        got = b""
        while len(got) < 24:
            chunk = s.recv(24 - len(got))
            assert chunk, "closed before the nonce"
            got += chunk
        s.sendall(b"\x7f\xff\xff\xff")
        s.settimeout(10)
        assert s.recv(1) == b""     # closed, nothing read or answered
    finally:
        s.close()
    rc, out, _ = client(d.conf_path, "'fine'")
    assert rc == 0 and out == "fine\n"
    assert answers(d)


def test_runtime_control_socket(console, tmp_path):
    d, port, key = console
    port2 = free_port()
    rc, out, _ = client(d.conf_path, "controlSocket('127.0.0.1:%d')" % port2)
    assert rc == 0 and out == "", out
    assert d.wait_line("Accepting control connections on 127.0.0.1:%d" % port2) is not None
    conf2 = write(tmp_path, "second.conf", console_conf(port2, key))
    rc, out, _ = client(conf2, "'second'")
    assert rc == 0 and out == "second\n"


def test_client_startup_and_config_check(console, tmp_path):
    d, port, key = console
    conf = write(tmp_path, "client.conf",
                 'if not inClientStartup() then error("only for the client") end\n'
                 'assert(not inConfigCheck())\n'
                 'newServer("127.0.0.1:1")\nsetLocal("127.0.0.1:1")\n' +
                 console_conf(port, key))
    rc, out, err = client(conf, "'hello'")
    assert rc == 0 and out == "hello\n", out + err
    check = write(tmp_path, "check.conf", 'assert(inConfigCheck() and not inClientStartup())\n')
    r = subprocess.run([dnslb_bin(), "--check-config", "-C", check], capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 0, r.stdout + r.stderr


def test_cannot_connect(tmp_path):
    port = free_port()
    conf = write(tmp_path, "c.conf", console_conf(port, new_key()))
    rc, out, err = client(conf, "showVersion()")
    assert rc != 0 and "Unable to connect to 127.0.0.1:%d" % port in err, err


def test_interactive_history(console, tmp_path):
    d, _, _ = console
    home = tmp_path / "home"
    home.mkdir()
    rc, out, err = client(d.conf_path, stdin="1+1\n\n'x'\nquit\n'never'\n", home=home)
    assert rc == 0, err
    assert out == "2\nx\n", out
    hist = (home / ".dnslb_history").read_text().splitlines()
    assert hist == ["1+1", "'x'", "quit"], hist


def test_daemon_setkey_option(dnslb, responder, tmp_path):
    # dnslb -k KEY: the console key, over setKey() of the config file (dnsdist's -k)
    port = free_port()
    key = new_key()
    d = dnslb(lua_server(responder) + console_conf(port, new_key()), impl="dnslb",
              args=("-k", key))
    rc, out, err = client(d.conf_path, "'config key'")
    assert rc != 0, out
    rc, out, err = client(d.conf_path, "'cli key'", args=("-k", key))
    assert rc == 0 and out == "cli key\n", err
