# SPDX-License-Identifier: GPL-2.0
"""pytest plugin: kselftest-style TAP, one line per test, on the fd named by
$KVS_TAP_FD (pytest's own report goes elsewhere).  A test is "not ok" if
any of its phases failed, "ok ... # SKIP reason" if it was skipped."""
import os

_out = None
_n = 0
_results = {}


def _w(s):
    _out.write(s + "\n")
    _out.flush()


def pytest_configure(config):
    global _out
    fd = int(os.environ.get("KVS_TAP_FD", "1"))
    _out = os.fdopen(os.dup(fd), "w")


def pytest_collection_finish(session):
    _w("TAP version 13")
    _w("1..%d" % len(session.items))


def pytest_runtest_logreport(report):
    r = _results.setdefault(report.nodeid, {"failed": False, "skip": None, "msg": ""})
    if report.failed:
        r["failed"] = True
        if not r["msg"]:
            r["msg"] = "%s failed: %s" % (report.when, str(report.longrepr)[-1500:])
    elif report.skipped:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else "skipped"
        r["skip"] = reason
    if report.when == "teardown":
        global _n
        _n += 1
        name = report.nodeid.split("::", 1)[-1]
        if r["failed"]:
            _w("not ok %d %s" % (_n, name))
            for line in r["msg"].splitlines():
                _w("#   " + line)
        elif r["skip"] is not None:
            _w("ok %d %s # SKIP %s" % (_n, name, r["skip"]))
        else:
            _w("ok %d %s" % (_n, name))


def pytest_sessionfinish(session, exitstatus):
    if session.testscollected == 0 and exitstatus != 0:
        _w("TAP version 13")
        _w("1..1")
        _w("not ok 1 pytest could not collect the suite (status %d)" % exitstatus)
