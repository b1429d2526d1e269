"""A real redis-server (Debian's) for the fleet tests, on 127.0.0.1 and a
free port, without persistence; stop() and start() again on the same port
(Redis going away mid-test), pause()/resume() (SIGSTOP/SIGCONT: Redis
"slow", it stops answering)."""

import os
import shutil
import signal
import socket
import subprocess
import time

from dnslbtest import free_port

REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"


class Redis:
    def __init__(self, workdir, port=None):
        self.workdir = workdir
        self.port = port or free_port()
        self.proc = None

    @property
    def address(self):
        return "127.0.0.1:%d" % self.port

    def start(self, timeout=10.0):
        self.proc = subprocess.Popen(
            [REDIS_SERVER, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", self.workdir, "--protected-mode", "no",
             "--notify-keyspace-events", "KEA"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            try:
                if self.command("PING") == "PONG":
                    return self
            except OSError:
                pass
            time.sleep(0.05)
        raise RuntimeError("redis-server did not start on port %d" % self.port)

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.proc = None

    def pause(self):
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self):
        self.proc.send_signal(signal.SIGCONT)

    def command(self, *args, timeout=3.0):
        """One command over RESP; returns the decoded reply (str, int, list, None)."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=timeout) as s:
            out = b"*%d\r\n" % len(args)
            for a in args:
                a = a if isinstance(a, bytes) else str(a).encode()
                out += b"$%d\r\n%s\r\n" % (len(a), a)
            s.sendall(out)
            f = s.makefile("rb")
            return _read(f)


def _read(f):
    line = f.readline()
    if not line:
        raise OSError("redis closed the connection")
    t, rest = line[:1], line[1:-2]
    if t == b"+":
        return rest.decode()
    if t == b"-":
        raise RuntimeError(rest.decode())
    if t == b":":
        return int(rest)
    if t == b"$":
        n = int(rest)
        if n < 0:
            return None
        data = f.read(n + 2)[:-2]
        return data.decode(errors="replace")
    if t == b"*":
        n = int(rest)
        if n < 0:
            return None
        return [_read(f) for _ in range(n)]
    raise OSError("bad RESP line %r" % line)
