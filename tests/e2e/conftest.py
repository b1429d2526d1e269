"""pytest fixtures for the dnslb end-to-end tests.

  responder          a started Responder (tests/e2e/responder.py) on 127.0.0.1
  make_responder     factory: make_responder(host=..., late_ms=...) -> Responder
  dnslb              factory: dnslb(conf, args=(), listen=True, ...) -> Daemon,
                     started and serving. Every daemon is stopped at teardown
                     (SIGTERM, then SIGKILL); the test errors if it died on its
                     own, did not exit 0 on SIGTERM, or printed a sanitizer
                     report on stderr.

Run against dnsdist instead of dnslb (to debug the tests): DNSLB_E2E_IMPL=dnsdist.
Tests that rely on dnslb-only behaviour carry @pytest.mark.dnslb_only(reason).
"""

import os
import signal
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import dnslbtest  # noqa: E402
from responder import Responder  # noqa: E402


def pytest_configure(config):
    config.addinivalue_line("markers", "dnslb_only(reason): skipped with DNSLB_E2E_IMPL=dnsdist")


def pytest_collection_modifyitems(config, items):
    if dnslbtest.IMPL != "dnsdist" or os.environ.get("DNSLB_E2E_NOSKIP"):
        return
    for item in items:
        m = item.get_closest_marker("dnslb_only")
        if m:
            reason = m.args[0] if m.args else "dnslb-specific"
            item.add_marker(pytest.mark.skip(reason="dnsdist differs: " + reason))


@pytest.fixture
def make_responder():
    started = []

    def make(**kw):
        r = Responder(**kw).start()
        started.append(r)
        return r
    yield make
    for r in started:
        r.stop()


@pytest.fixture
def responder(make_responder):
    return make_responder()


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    setattr(item, "rep_" + rep.when, rep)


@pytest.fixture
def dnslb(tmp_path, request):
    daemons = []

    def start(conf="", args=(), wait=True, **kw):
        name = kw.pop("name", "dnslb%d" % len(daemons))
        d = dnslbtest.Daemon(str(tmp_path), conf, args, name=name, **kw)
        daemons.append(d)
        try:
            d.start(wait=wait)
        except Exception:
            # did not come up: the test reports it (or skips); teardown only
            # looks for sanitizer reports
            d.stopped_by_test = True
            d.kill()
            raise
        return d
    yield start
    problems = []
    for d in daemons:
        if d.proc is None:
            continue
        if not d.stopped_by_test:
            if d.proc.poll() is not None:
                problems.append("%s exited on its own with status %s during the test"
                                % (d.name, d.proc.returncode))
            else:
                try:
                    rc = d.stop(signal.SIGTERM, 5.0)
                    if rc != 0 and d.impl == "dnslb":
                        problems.append("%s exited with status %s after SIGTERM" % (d.name, rc))
                except dnslbtest.DaemonError as e:
                    problems.append("%s: %s" % (d.name, e))
        d.kill()
        rep = d.sanitizer_report()
        if rep:
            problems.append("%s: sanitizer report on stderr:\n%s" % (d.name, rep))
        failed = getattr(request.node, "rep_call", None)
        if problems or (failed is not None and failed.failed):
            print("==== %s output ====\n%s" % (d.name, d.output()[-20000:]))
    if problems:
        pytest.fail("\n".join(problems), pytrace=False)
