"""The built-in policies that need no hashing, compared with dnsdist 1.7.3 by
which backend receives each query: firstAvailable's and leastOutstanding's
order with a server set down, and roundrobin's exact cycle over the servers
that are up (dnslb with one worker: its rotation is per worker). The hashed
ones are in test_routing.py; dnslb's own unit tests of every policy are
tests/unit/test_policy.c."""

import time

import pytest

from diffharness import build_query, known, strip_id


def backends_of(p):
    """For each side, the qnames (wire) each backend received, by backend."""
    return {s.impl: [[q.wire[12:] for q in r.client_queries()] for r in s.responders]
            for s in (p.theirs, p.ours)}


def servers(orders, down=()):
    body = ""
    for i, o in enumerate(orders):
        body += 'newServer({address="@B%d@", order=%d})\n' % (i, o)
    for i in down:
        # getServer(n) numbers the servers by order, as dnsdist lists them
        body += 'for _, s in ipairs(getServers()) do if s:getName() == "@B%d@" then ' \
                's:setDown() end end\n' % i
    return body


def ask(p, n, prefix):
    for i in range(n):
        a, b = p.answers(build_query("%s%d.policy.test." % (prefix, i), qid=i), "udp")
        assert a is not None and strip_id(a) == strip_id(b)
    time.sleep(0.1)


@pytest.mark.parametrize("policy", ["firstAvailable", "leastOutstanding"])
@pytest.mark.parametrize("down", [(), (1,), (1, 2)])
def test_order_and_down(pair, policy, down):
    p = pair("setServerPolicy(%s)\n" % policy + servers((3, 1, 2), down),
             backends=({}, {}, {}))
    ask(p, 8, "o")
    got = backends_of(p)
    assert got["dnsdist"] == got["dnslb"]
    # the lowest order that is up takes everything (one query at a time)
    first = {(): 1, (1,): 2, (1, 2): 0}[tuple(down)]
    assert len(got["dnslb"][first]) == 8, got
    p.stats()


@pytest.mark.parametrize("down", [(), (1,)])
def test_roundrobin_cycle(pair, down):
    # one rotation per worker: with one worker, dnsdist's
    assert known("Policies count per worker")
    p = pair("setServerPolicy(roundrobin)\n" + servers((1, 1, 1), down),
             backends=({}, {}, {}), dnslb_args=("--workers", "1"))
    ask(p, 9, "r")
    got = backends_of(p)
    assert got["dnsdist"] == got["dnslb"]
    up = [i for i in range(3) if i not in down]
    # an exact cycle: every up server in turn, none to a down one
    assert all(len(got["dnslb"][i]) == 9 // len(up) or len(got["dnslb"][i]) == 9 // len(up) + 1
               for i in up), got
    assert all(not got["dnslb"][i] for i in down), got
    p.stats()
