"""The daemon's own console on its terminal: dnslb started without
--supervised with stdin a terminal (a pty here) reads commands with a "> "
prompt, evaluates them like a remote console command, keeps answering DNS
meanwhile, and stops on Ctrl-D or "quit" (as dnsdist does). With
--supervised, or stdin not a terminal, there is no console."""

import os
import pty
import select
import signal
import subprocess
import time

import pytest

from dnslbtest import SANITIZER_MARKERS, dnslb_bin, free_port, lua_server, udp_query

pytestmark = pytest.mark.dnslb_only("dnslb's terminal console (dnsdist's needs a tty too)")


class Term:
    def __init__(self, tmp_path, responder, args=()):
        self.port = free_port()
        conf = tmp_path / "term.conf"
        conf.write_text('setLocal("127.0.0.1:%d")\n' % self.port +
                        lua_server(responder, name="b", healthCheckMode="up"))
        self.master, slave = pty.openpty()
        env = dict(os.environ, HOME=str(tmp_path))
        self.proc = subprocess.Popen([dnslb_bin(), "-C", str(conf), "--disable-syslog"] +
                                     list(args), stdin=slave, stdout=slave, stderr=slave,
                                     env=env, close_fds=True)
        os.close(slave)
        self.buf = b""

    def read_until(self, pat, timeout=10.0):
        end = time.monotonic() + timeout
        while pat not in self.buf and time.monotonic() < end:
            r, _, _ = select.select([self.master], [], [], 0.1)
            if r:
                try:
                    data = os.read(self.master, 65536)
                except OSError:
                    break
                if not data:
                    break
                self.buf += data
        return pat in self.buf

    def command(self, line, expect):
        start = len(self.buf)
        os.write(self.master, line.encode() + b"\r")
        assert self.read_until(expect), self.text()
        # and the prompt again after the reply
        end = time.monotonic() + 5
        while b"> " not in self.buf[start + len(line):] and time.monotonic() < end:
            self.read_until(b"\x00", 0.1)

    def text(self):
        return self.buf.decode(errors="replace")

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)
        os.close(self.master)
        for m in SANITIZER_MARKERS:
            assert m not in self.text(), self.text()


def test_terminal_console(tmp_path, responder):
    t = Term(tmp_path, responder)
    try:
        assert t.read_until(b"running with"), t.text()
        assert t.read_until(b"> "), t.text()
        t.command("showVersion()", b"dnslb 0.")
        t.command("1 + 2", b"\r\n3\r\n")
        t.command("showServers()", b"Outstanding")
        t.command("nosuchfunction()", b"attempt to call a nil value")
        # DNS goes on while the console waits for input
        r = udp_query(t.port, "term.example.")
        assert r is not None and r.rcode() == 0
        t.command("setServFailWhenNoServer(true)", b"> ")
        assert (tmp_path / ".dnslb_history").read_text().splitlines()[-1] == \
            "setServFailWhenNoServer(true)"
        os.write(t.master, b"\x04")            # Ctrl-D: the daemon stops, as dnsdist
        assert t.proc.wait(10) == 0, t.text()
        t.read_until(b"Exiting", 2)
        assert "Exiting" in t.text()
        assert "in main chunk\r\n> " in t.text()     # an error reply ends its line
    finally:
        t.close()


def test_quit_stops_the_daemon(tmp_path, responder):
    t = Term(tmp_path, responder)
    try:
        assert t.read_until(b"> "), t.text()
        os.write(t.master, b"quit\r")
        assert t.proc.wait(10) == 0, t.text()
    finally:
        t.close()


def test_supervised_has_no_terminal_console(tmp_path, responder):
    t = Term(tmp_path, responder, args=("--supervised",))
    try:
        assert t.read_until(b"running with"), t.text()
        assert not t.read_until(b"> ", 1.0), t.text()
        os.write(t.master, b"\x04")
        time.sleep(0.5)
        assert t.proc.poll() is None            # Ctrl-D means nothing without a console
        assert udp_query(t.port, "sup.example.") is not None
        t.proc.send_signal(signal.SIGTERM)
        assert t.proc.wait(10) == 0
    finally:
        t.close()


def test_terminal_hangup_stops_the_daemon(tmp_path, responder):
    """The terminal going away (the pty closed) is the end of input: the
    daemon stops cleanly instead of spinning on a dead descriptor."""
    t = Term(tmp_path, responder)
    try:
        assert t.read_until(b"> "), t.text()
        os.close(t.master)
        t.master = os.open(os.devnull, os.O_RDONLY)     # close() in t.close() needs an fd
        assert t.proc.wait(10) == 0
    finally:
        t.close()
