"""The service manager's protocol (sd_notify): a fake $NOTIFY_SOCKET
receives READY=1 once dnslb serves, RELOADING=1 then READY=1 around a
SIGHUP reload (a failed one too), STOPPING=1 on SIGTERM, in that order, and
WATCHDOG=1 pings when $WATCHDOG_USEC asks for them."""

import os
import re
import signal
import socket
import time

import pytest

from dnslbtest import lua_server, udp_query

pytestmark = pytest.mark.dnslb_only("dnsdist's notify messages are not compared here")


class NotifySocket:
    def __init__(self, path):
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(path)
        self.sock.settimeout(0.2)

    def messages(self, timeout=5.0, until=None):
        """Messages received until @until (a predicate on the list) or @timeout."""
        out = []
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            try:
                out.append(self.sock.recv(4096).decode())
            except socket.timeout:
                pass
            if until and until(out):
                break
        return out

    def close(self):
        self.sock.close()


def kinds(msgs):
    return [m.split("\n")[0] for m in msgs]


@pytest.fixture
def notify_socket(tmp_path):
    s = NotifySocket(str(tmp_path / "notify.sock"))
    yield s
    s.close()


def test_ready_reloading_stopping_in_order(dnslb, responder, notify_socket, tmp_path):
    d = dnslb(lua_server(responder), env={"NOTIFY_SOCKET": notify_socket.path})
    msgs = notify_socket.messages(until=lambda m: any(x.startswith("READY=1") for x in m))
    assert kinds(msgs) == ["READY=1"]
    assert "STATUS=running" in msgs[0]
    # READY came when it serves
    assert udp_query(d.port, "www.example.test.") is not None

    d.send_signal(signal.SIGHUP)
    msgs = notify_socket.messages(until=lambda m: len(m) >= 2)
    assert kinds(msgs) == ["RELOADING=1", "READY=1"]
    assert "MONOTONIC_USEC=" in msgs[0]

    # a failed reload keeps the old config and still ends with READY=1
    with open(d.conf_path, "a") as f:
        f.write("\nthis is not lua\n")
    d.send_signal(signal.SIGHUP)
    msgs = notify_socket.messages(until=lambda m: len(m) >= 2)
    assert kinds(msgs) == ["RELOADING=1", "READY=1"]
    assert "reload failed" in msgs[1]
    assert udp_query(d.port, "www.example.test.") is not None

    assert d.stop(signal.SIGTERM) == 0
    msgs = notify_socket.messages(timeout=2.0, until=lambda m: len(m) >= 1)
    assert kinds(msgs) == ["STOPPING=1"]


def test_watchdog_pings(dnslb, responder, notify_socket):
    dnslb(lua_server(responder), env={"NOTIFY_SOCKET": notify_socket.path,
                                      "WATCHDOG_USEC": "200000"})
    msgs = notify_socket.messages(timeout=3.0,
                                  until=lambda m: kinds(m).count("WATCHDOG=1") >= 4)
    assert kinds(msgs).count("READY=1") == 1
    assert kinds(msgs).count("WATCHDOG=1") >= 4


def test_no_watchdog_without_the_variable(dnslb, responder, notify_socket):
    dnslb(lua_server(responder), env={"NOTIFY_SOCKET": notify_socket.path})
    msgs = notify_socket.messages(timeout=1.5)
    assert kinds(msgs) == ["READY=1"]


def test_no_socket_no_message(dnslb, responder):
    # without $NOTIFY_SOCKET dnslb serves as before (and says nothing about it)
    env = dict(os.environ)
    env.pop("NOTIFY_SOCKET", None)
    d = dnslb(lua_server(responder))
    assert udp_query(d.port, "www.example.test.") is not None
    assert "notify" not in d.output().lower()


def _run_with_stdout_file(tmp_path, conf, args=(), env_extra=None, journal=False):
    """dnslb with stdout in a file (optionally named by $JOURNAL_STREAM, as
    systemd does for the journal); returns the lines once it runs."""
    import subprocess
    from dnslbtest import dnslb_bin, free_port, wait_until
    port = free_port()
    cpath = tmp_path / "j.conf"
    cpath.write_text('setLocal("127.0.0.1:%d")\n' % port + conf)
    out = tmp_path / "stdout.txt"
    with open(out, "wb") as f:
        env = dict(os.environ)
        st = os.fstat(f.fileno())
        if journal:
            env["JOURNAL_STREAM"] = "%d:%d" % (st.st_dev, st.st_ino)
        env.update(env_extra or {})
        p = subprocess.Popen([dnslb_bin(), "-C", str(cpath), "--supervised", "--disable-syslog"]
                             + list(args), stdout=f, stderr=subprocess.STDOUT, env=env)
        try:
            assert wait_until(lambda: "running with" in out.read_text(), 10)
        finally:
            p.send_signal(signal.SIGTERM)
            p.wait(10)
    return out.read_text().splitlines()


def test_journal_lines_carry_priorities(tmp_path):
    # a server that never answers: "Marking downstream ... as 'down'" is a warning
    lines = _run_with_stdout_file(tmp_path, 'newServer("127.0.0.1:1")\n', journal=True)
    assert "<6>Added downstream server 127.0.0.1:1" in lines
    assert any(l.startswith("<6>Listening on 127.0.0.1:") for l in lines)
    assert any(l.startswith("<4>Marking downstream 127.0.0.1:1 as 'down'") for l in lines)
    assert all(re.match(r"^<[3467]>", l) for l in lines), lines


def test_no_priorities_when_stdout_is_not_the_journal(tmp_path):
    lines = _run_with_stdout_file(tmp_path, 'newServer("127.0.0.1:1")\n')
    assert not any(l.startswith("<") for l in lines)


def test_log_timestamps(tmp_path):
    lines = _run_with_stdout_file(tmp_path, 'newServer("127.0.0.1:1")\n',
                                  args=["--log-timestamps"])
    for l in lines:
        assert re.match(r"^[A-Z][a-z]{2} \d\d \d\d:\d\d:\d\d \S", l), l


def test_structured_logging(tmp_path):
    lines = _run_with_stdout_file(
        tmp_path, 'newServer("127.0.0.1:1")\n'
        'setStructuredLogging(true, {levelPrefix="level", timeFormat="numeric"})\n')
    # from the call on, every line is logfmt
    rx = re.compile(r'^msg="(?:[^"\\]|\\.)*" level="(Info|Warning|Error)" ts="\d+\.\d{3}"$')
    i = next(k for k, l in enumerate(lines) if l.startswith("msg="))
    assert all(rx.match(l) for l in lines[i:]), lines[i:]
    assert any(l.startswith('msg="Marking downstream 127.0.0.1:1 as \'down\'" level="Warning"')
               for l in lines)


def test_structured_logging_bad_format_is_refused(tmp_path):
    import subprocess
    from dnslbtest import dnslb_bin
    c = tmp_path / "bad.conf"
    c.write_text('setStructuredLogging(true, {timeFormat="rfc"})\n')
    r = subprocess.run([dnslb_bin(), "--check-config", "-C", str(c)], capture_output=True,
                       text=True)
    assert r.returncode == 1
