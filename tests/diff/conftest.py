"""pytest fixtures for the differential tests (see diffharness.py).

  pair        factory: pair(body, backends=({},), listen_opts=None, args=(),
              dnslb_args=(), web=False) -> a started Pair. Both daemons are
              killed at teardown; the test errors if dnslb printed a
              sanitizer report.
  workdir     a temporary directory (str)

Every test here is skipped when Debian's dnsdist is not installed.
"""

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import diffharness  # noqa: E402


def pytest_collection_modifyitems(config, items):
    if diffharness.have_dnsdist():
        return
    for item in items:
        item.add_marker(pytest.mark.skip(reason="dnsdist is not installed (%s)"
                                         % diffharness.DNSDIST))


@pytest.fixture
def workdir(tmp_path):
    return str(tmp_path)


@pytest.fixture
def pair(tmp_path):
    made = []

    def start(body, **kw):
        p = diffharness.Pair(str(tmp_path / ("p%d" % len(made))), body, **kw)
        made.append(p)
        return p.start()
    yield start
    reports = []
    for p in made:
        p.stop()
        rep = p.sanitizer_report()
        if rep:
            reports.append(rep)
    if reports:
        pytest.fail("dnslb: sanitizer report on stderr:\n" + "\n".join(reports), pytrace=False)
