# SPDX-License-Identifier: MIT
"""A private kvshared daemon for one program: the embedded default.

``Daemon`` starts ``kvshared`` in socket mode on a socket in a fresh
temporary directory (host memory, no module, no GPU), waits until it says
it is ready, and stops it with SIGTERM on exit -- what ``make serve`` does
with tools/kvshared-session.sh.  Pools are given as kvshared ``--pool``
specs, or created later with ``Arbiter(daemon.socket).create_pool(...)``.

Which kvshared: ``Daemon(kvshared=PATH)``, else find_kvshared(): the one
`make install` installed, then ``$KVSHARED``, then ``PATH`` (and, for the
package in a build tree, that tree's build/kvshared before all of them).
"""
import os
import shutil
import signal
import subprocess
import tempfile
import time

__all__ = ["Daemon", "find_kvshared", "kvshared_candidates"]

# The prefixes `make install` installs kvshared under (PREFIX/sbin): its
# default, /usr/local, and the packagers' prefix=/usr.
INSTALL_PREFIXES = ("/usr/local", "/usr")
# This copy of the package; where it lives says which kvshared goes with it.
PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))

HOW_TO_GET = (
    "get one: from a kvshare checkout, 'make && sudo make install' installs "
    "/usr/local/sbin/kvshared; or build it there ('make build/kvshared') and "
    "set $KVSHARED=/path/to/checkout/build/kvshared; or pass "
    "Daemon(kvshared=PATH)")


def _beside_package():
    """The kvshared that came with this copy of the package, if any: in the
    build tree (build/python/kvshare) build/kvshared; when `make install`
    put the package in PREFIX/lib/python3[.X]/dist-packages, PREFIX/sbin."""
    pkg_parent = os.path.dirname(PACKAGE_DIR)
    if os.path.basename(pkg_parent) == "python":
        return [os.path.join(os.path.dirname(pkg_parent), "kvshared")]
    lib = os.path.dirname(os.path.dirname(pkg_parent))
    if (os.path.basename(pkg_parent) == "dist-packages"
            and os.path.basename(os.path.dirname(pkg_parent)).startswith("python3")
            and os.path.basename(lib) == "lib"):
        return [os.path.join(os.path.dirname(lib), "sbin", "kvshared")]
    return []


def kvshared_candidates():
    """Where find_kvshared() looks, in order, as (what, path): the one that
    came with this package (build tree or `make install`), the ones `make
    install` puts in INSTALL_PREFIXES, $KVSHARED, then every kvshared on
    PATH."""
    cands = [("this package's", p) for p in _beside_package()]
    cands += [("installed", os.path.join(p, "sbin", "kvshared"))
              for p in INSTALL_PREFIXES]
    env = os.environ.get("KVSHARED")
    if env:
        cands.append(("$KVSHARED", env))
    for d in os.environ.get("PATH", "").split(os.pathsep):
        if d:
            cands.append(("PATH", os.path.join(d, "kvshared")))
    return cands


def _runnable(path):
    return os.path.isfile(path) and os.access(path, os.X_OK)


def find_kvshared():
    """The kvshared binary, the first of kvshared_candidates() that is an
    executable file; None if there is none."""
    for _, path in kvshared_candidates():
        if _runnable(path):
            return os.path.normpath(path)
    return None


def _not_found_message():
    looked = ", ".join(["%s %s" % c for c in kvshared_candidates()
                        if c[0] != "PATH"] + ["PATH"])
    env = os.environ.get("KVSHARED")
    bad = ("; $KVSHARED=%s is not an executable file" % env) if env else ""
    return "kvshared not found (looked at: %s)%s.  To %s" % (
        looked, bad, HOW_TO_GET)


class Daemon:
    """Daemon(pools=(), kvshared=None, args=(), ready_timeout=10)

    A private kvshared on a temporary socket.  ``socket`` is its path (pass
    it as ``arbiter=`` or set $KVSHARE_ARBITER).  Use as a context manager,
    or call start() and stop()."""

    def __init__(self, pools=(), kvshared=None, args=(), ready_timeout=10.0):
        self.binary = kvshared or find_kvshared()
        if not self.binary:
            raise FileNotFoundError(_not_found_message())
        self.pools = list(pools)
        self.args = list(args)
        self.ready_timeout = ready_timeout
        self.dir = None
        self.socket = None
        self.proc = None

    def start(self):
        self.dir = tempfile.mkdtemp(prefix="kvshare-py-")
        os.chmod(self.dir, 0o755)
        self.socket = os.path.join(self.dir, "kvshared.sock")
        log = os.path.join(self.dir, "kvshared.log")
        cmd = [self.binary, "--mode", "socket", "--socket", self.socket]
        for p in self.pools:
            cmd += ["--pool", p]
        cmd += self.args
        with open(log, "wb") as f:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=f,
                                         stderr=subprocess.STDOUT)
        deadline = time.monotonic() + self.ready_timeout
        while True:
            with open(log, "rb") as f:
                text = f.read().decode(errors="replace")
            if "kvshared: ready" in text:
                return self
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("kvshared did not start (%s):\n%s"
                                   % (" ".join(cmd), text[-2000:]))
            time.sleep(0.02)

    def stop(self):
        """SIGTERM, then wait; returns the daemon's exit status."""
        st = None
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGTERM)
                try:
                    self.proc.wait(10)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()
            st = self.proc.returncode
            self.proc = None
        if self.dir:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None
        return st

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
