"""dnslb's DoH request reader (dnslb/frontend/doh_req.c, through the
doh_probe helper) against Debian's dnsdist 1.7.3 on the same requests: an
addDOHLocal without certificate (plain HTTP), URLs "/dns-query" and
"/other/". For each request the status, and for a refusal its whole body,
must be the same. (dnslb has no DoH listener yet: the reader is compared
on its own; a query that goes on to the pipeline only has to be taken.)"""

import base64
import os
import socket
import subprocess
import time

import pytest

import dnslbtest
from dnslbtest import dnslb_bin, free_port

Q = (b"\0\0\1\0\0\1\0\0\0\0\0\0\3www\7example\3com\0\0\1\0\1")
QB64 = base64.urlsafe_b64encode(Q).decode().rstrip("=")

GETS = [
    "/dns-query?dns=" + QB64,
    "/dns-query?foo=1&dns=" + QB64,
    "/dns-query?dns=" + QB64 + "==",
    "/dns-query?dns=" + QB64 + "%3D",
    "/dns-query?dns=" + QB64 + "&dns=AAAA",
    "/dns-query?dns=" + QB64 + "&x=1",
    "/dns-query?dns=" + QB64 + "AA[[",
    "/dns-query?dns=" + QB64 + "AA::",
    "/dns-query?dns=" + QB64 + "AA``",
    "/dns-query",
    "/dns-query?dns=",
    "/dns-query?dns=@@@",
    "/dns-query?dns=AAAA",
    "/dns-query?xdns=" + QB64,
    "/dns-query/sub?dns=" + QB64,
    "/dns-queryx?dns=" + QB64,
    "/DNS-QUERY?dns=" + QB64,
    "/other/x?dns=" + QB64,
    "/nope",
    "/x/../dns-query?dns=" + QB64,
    "/./dns-query?dns=" + QB64,
]
POSTS = [Q, Q[:31], Q[:30], Q[:12], b""]


def ask(port, method, path, body=b""):
    """(status, body) of one HTTP/1.1 request."""
    head = "%s %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" % (method, path)
    if method == "POST":
        head += "Content-Length: %d\r\n" % len(body)
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(head.encode() + b"\r\n" + body)
        data = b""
        while True:
            b = s.recv(65536)
            if not b:
                break
            data += b
    head, _, rest = data.partition(b"\r\n\r\n")
    return int(head.split(b" ")[1]), rest


def probe(method, path, body, tmp_path):
    exe = os.path.join(os.path.dirname(dnslb_bin()), "tests", "doh_probe")
    args = [exe, method, path]
    if method == "POST":
        f = tmp_path / "body"
        f.write_bytes(body)
        args.append(str(f))
    out = subprocess.run(args, capture_output=True, check=True, timeout=10).stdout
    status, _, text = out.partition(b"\n")
    return int(status), text


@pytest.fixture(scope="module")
def dnsdist_doh(tmp_path_factory):
    if not os.path.exists(os.path.join(os.path.dirname(dnslb_bin()), "tests", "doh_probe")):
        pytest.skip("doh_probe not built")
    d = str(tmp_path_factory.mktemp("doh"))
    port = free_port()
    body = ("addDOHLocal('127.0.0.1:%d', nil, nil, {'/dns-query', '/other/'})\n"
            "newServer{address='127.0.0.1:%d'}\n"
            "addAction(AllRule(), SpoofAction('192.0.2.1'))\n" % (port, free_port()))
    daemon = dnslbtest.Daemon(d, body, impl="dnsdist", name="dnsdist")
    daemon.start()
    for _ in range(50):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.1)
    yield port
    daemon.kill()


@pytest.mark.parametrize("path", GETS, ids=["get%d" % i for i in range(len(GETS))])
def test_get(dnsdist_doh, path, tmp_path):
    theirs = ask(dnsdist_doh, "GET", path)
    ours = probe("GET", path, b"", tmp_path)
    assert ours[0] == theirs[0], (path, theirs, ours)
    if theirs[0] != 200:
        assert ours[1] == theirs[1], (path, theirs, ours)


@pytest.mark.parametrize("method", ["PUT", "DELETE"])
def test_other_methods(dnsdist_doh, method, tmp_path):
    for path in ("/dns-query", "/dns-query?dns=" + QB64):
        theirs = ask(dnsdist_doh, method, path)
        ours = probe(method, path, b"", tmp_path)
        assert ours[0] == theirs[0], (method, path, theirs, ours)
        if theirs[0] != 200:
            assert ours[1] == theirs[1]


@pytest.mark.parametrize("body", POSTS, ids=["post%d" % i for i in range(len(POSTS))])
def test_post(dnsdist_doh, body, tmp_path):
    theirs = ask(dnsdist_doh, "POST", "/dns-query", body)
    ours = probe("POST", "/dns-query", body, tmp_path)
    assert ours[0] == theirs[0], (body, theirs, ours)
    if theirs[0] != 200:
        assert ours[1] == theirs[1], (body, theirs, ours)
