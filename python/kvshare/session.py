# SPDX-License-Identifier: MIT
"""A private kvshared daemon for one program: the embedded default.

``Daemon`` starts ``kvshared`` in socket mode on a socket in a fresh
temporary directory (host memory, no module, no GPU), waits until it says
it is ready, and stops it with SIGTERM on exit -- what ``make serve`` does
with tools/kvshared-session.sh.  Pools are given as kvshared ``--pool``
specs, or created later with ``Arbiter(daemon.socket).create_pool(...)``.
"""
import os
import shutil
import signal
import subprocess
import tempfile
import time

__all__ = ["Daemon", "find_kvshared"]


def find_kvshared():
    """The kvshared binary: $KVSHARED, the build tree this package was built
    in (build/kvshared next to build/python), then PATH and the install
    locations.  None if there is none."""
    env = os.environ.get("KVSHARED")
    if env:
        return env
    here = os.path.dirname(os.path.abspath(__file__))
    cands = [os.path.join(here, "..", "..", "kvshared")]
    which = shutil.which("kvshared")
    if which:
        cands.append(which)
    cands += ["/usr/local/sbin/kvshared", "/usr/sbin/kvshared"]
    for c in cands:
        if os.path.isfile(c) and os.access(c, os.X_OK):
            return os.path.normpath(c)
    return None


class Daemon:
    """Daemon(pools=(), kvshared=None, args=(), ready_timeout=10)

    A private kvshared on a temporary socket.  ``socket`` is its path (pass
    it as ``arbiter=`` or set $KVSHARE_ARBITER).  Use as a context manager,
    or call start() and stop()."""

    def __init__(self, pools=(), kvshared=None, args=(), ready_timeout=10.0):
        self.binary = kvshared or find_kvshared()
        if not self.binary:
            raise FileNotFoundError(
                "kvshared not found: build it (make build/kvshared), install it "
                "(make install), or set $KVSHARED")
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
