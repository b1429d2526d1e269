"""The plainest config: one backend, normal answers over UDP and TCP,
then the counters and the console's server list."""

from diffharness import RD, build_query  # noqa: F401


def test_forwarded_answers_and_counters(pair):
    p = pair('newServer({address="@B0@"})\n')
    for proto in ("udp", "tcp"):
        for name in ("www.example.test.", "nx.example.test.", "servfail.example.test."):
            for opt in (None, {"payload": 1232}):
                p.query(build_query(name, qid=77, opt=opt), proto)
    p.stats()
