"""Real Debian servers as backends: unbound (local data) and knotd (a tiny
zone) on 127.0.0.1. Every answer through dnslb must equal the server's own
answer, over UDP and TCP."""

import os
import shutil
import subprocess
import time

import dns.flags
import dns.message
import dns.query
import pytest

from dnslbtest import free_port, lua_server

UNBOUND = "/usr/sbin/unbound"
KNOTD = "/usr/sbin/knotd"

UNBOUND_CONF = """server:
    interface: 127.0.0.1
    port: {port}
    do-ip6: no
    do-udp: yes
    do-tcp: yes
    chroot: ""
    username: ""
    directory: "{dir}"
    pidfile: ""
    use-syslog: no
    logfile: ""
    verbosity: 1
    num-threads: 1
    so-reuseport: no
    access-control: 127.0.0.0/8 allow
    do-not-query-localhost: no
    module-config: "iterator"
    local-zone: "example.test." static
    local-data: "example.test. 3600 IN SOA ns.example.test. hostmaster.example.test. 1 3600 900 604800 300"
    local-data: "example.test. 300 IN MX 10 mail.example.test."
    local-data: "www.example.test. 300 IN A 192.0.2.10"
    local-data: "www.example.test. 300 IN AAAA 2001:db8::10"
    local-data: "mail.example.test. 300 IN A 192.0.2.25"
    local-data: "txt.example.test. 300 IN TXT \\"hello from unbound\\""
remote-control:
    control-enable: no
"""

KNOT_CONF = """server:
    listen: 127.0.0.1@{port}
    rundir: "{dir}"
    udp-workers: 1
    tcp-workers: 1
    background-workers: 1
control:
    listen: "{dir}/knot.sock"
log:
  - target: stderr
    any: info
database:
    storage: "{dir}/db"
template:
  - id: default
    storage: "{dir}"
    file: "%s.zone"
zone:
  - domain: example.test
"""

ZONE = """$ORIGIN example.test.
$TTL 300
@       SOA ns hostmaster 1 3600 900 604800 300
@       NS  ns
@       MX  10 mail
ns      A   192.0.2.53
www     A   192.0.2.11
www     AAAA 2001:db8::11
mail    A   192.0.2.26
txt     TXT "hello from knot"
"""


class Server:
    def __init__(self, kind, workdir):
        self.kind = kind
        self.dir = workdir
        self.proc = None
        self.port = None

    def unbound_conf(self):
        return UNBOUND_CONF.format(port=self.port, dir=self.dir)

    def ready(self):
        """Does it answer yet? (raises while it does not listen)"""
        q = dns.message.make_query("www.example.test.", "A")
        return bool(dns.query.udp(q, "127.0.0.1", port=self.port, timeout=0.5).answer)

    def start(self):
        for _ in range(3):
            self.port = free_port()
            if self.kind == "unbound":
                conf = os.path.join(self.dir, "unbound.conf")
                with open(conf, "w") as f:
                    f.write(self.unbound_conf())
                cmd = [UNBOUND, "-d", "-c", conf]
            else:
                conf = os.path.join(self.dir, "knot.conf")
                with open(conf, "w") as f:
                    f.write(KNOT_CONF.format(port=self.port, dir=self.dir))
                with open(os.path.join(self.dir, "example.test.zone"), "w") as f:
                    f.write(ZONE)
                cmd = [KNOTD, "-c", conf]
            self.log = open(os.path.join(self.dir, self.kind + ".log"), "ab")
            self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, cwd=self.dir)
            end = time.monotonic() + 15
            while time.monotonic() < end and self.proc.poll() is None:
                try:
                    if self.ready():
                        return self
                except Exception:
                    time.sleep(0.1)
            self.stop()
        pytest.skip("%s did not start here: %s" % (self.kind, self.output()[-2000:]))

    def output(self):
        try:
            with open(os.path.join(self.dir, self.kind + ".log"), "rb") as f:
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


@pytest.fixture(scope="module", params=["unbound", "knot"])
def server(request, tmp_path_factory):
    binary = UNBOUND if request.param == "unbound" else KNOTD
    if not os.path.exists(binary) or shutil.which(binary) is None:
        pytest.skip("%s not installed" % binary)
    s = Server(request.param, str(tmp_path_factory.mktemp(request.param))).start()
    yield s
    s.stop()


QUERIES = [
    ("www.example.test.", "A", False),
    ("www.example.test.", "AAAA", False),
    ("example.test.", "MX", False),
    ("txt.example.test.", "TXT", False),
    ("nonexistent.example.test.", "A", False),     # NXDOMAIN with SOA
    ("www.example.test.", "MX", False),            # NODATA
    ("WwW.ExAmPlE.TeSt.", "A", False),             # case
    ("www.example.test.", "A", True),              # EDNS
    ("example.test.", "MX", True),
]


def ask(transport, port, name, qtype, edns, qid):
    q = dns.message.make_query(name, qtype, use_edns=0 if edns else -1, payload=1232)
    q.id = qid
    if transport == "udp":
        return dns.query.udp(q, "127.0.0.1", port=port, timeout=5)
    return dns.query.tcp(q, "127.0.0.1", port=port, timeout=5)


def shape(m):
    return {
        "id": m.id,
        "rcode": m.rcode(),
        "flags": dns.flags.to_text(m.flags),
        "edns": (m.edns, m.payload) if m.edns >= 0 else None,
        "question": [r.to_text() for r in m.question],
        "answer": sorted(r.to_text() for r in m.answer),
        "authority": sorted(r.to_text() for r in m.authority),
        "additional": sorted(r.to_text() for r in m.additional),
    }


@pytest.mark.parametrize("transport", ["udp", "tcp"])
def test_same_answer_as_server(dnslb, server, transport):
    d = dnslb(lua_server("127.0.0.1:%d" % server.port, name=server.kind,
                         checkName="www.example.test."))
    for i, (name, qtype, edns) in enumerate(QUERIES):
        direct = ask(transport, server.port, name, qtype, edns, 1000 + i)
        proxied = ask(transport, d.port, name, qtype, edns, 1000 + i)
        assert shape(proxied) == shape(direct), "%s %s %s differs" % (name, qtype, transport)
    if d.impl == "dnslb":
        s = d.stats()
        assert s["responses"] == len(QUERIES)
        assert s["frontend-nxdomain"] == 1


def test_real_server_tcp_only(dnslb, server):
    """A tcpOnly backend: UDP clients' queries reach the server over TCP."""
    d = dnslb(lua_server("127.0.0.1:%d" % server.port, tcpOnly=True,
                         checkName="www.example.test."))
    direct = ask("udp", server.port, "www.example.test.", "A", False, 77)
    proxied = ask("udp", d.port, "www.example.test.", "A", False, 77)
    assert shape(proxied) == shape(direct)
