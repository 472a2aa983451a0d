# SPDX-License-Identifier: GPL-2.0
"""LMCache's multi-process mode for the vLLM engine bench's row (iv): the
LMCache environment (scripts/lmcache-env.sh, a venv of its own), an
`lmcache server` process, and the kv_transfer_config of vLLM's own
LMCacheMPConnector pointing at it.

    py, why = environment()      # its python, or None and why not
    with Server(py, log_dir) as srv:
        kv = connector(srv.port)  # for engines run by py

Every failure says what was tried and LMCache's own last words."""
import os
import socket
import subprocess
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
ENV_SCRIPT = os.path.join(ROOT, "scripts", "lmcache-env.sh")

# LMCache's own switches: no banner, no usage reports (nothing is reachable
# from these machines anyway).
ENV = {"LMCACHE_DISABLE_BANNER": "1", "LMCACHE_TRACK_USAGE": "false", "DO_NOT_TRACK": "1"}


class LMCacheError(RuntimeError):
    pass


def environment():
    """(python, None) when the LMCache environment is complete, else
    (None, why): it is never built here (make bench builds it first)."""
    py = subprocess.run([ENV_SCRIPT, "--path"], capture_output=True, text=True).stdout.strip()
    if subprocess.run([ENV_SCRIPT, "--check"]).returncode != 0:
        return None, ("the LMCache environment %s is not built: scripts/lmcache-env.sh "
                      "builds it (make bench does)" % os.path.dirname(os.path.dirname(py)))
    r = subprocess.run([py, "-c", "import importlib.metadata as m; print(m.version('lmcache'))"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        return None, "lmcache is not importable in %s: %s" % (py, _last(r.stderr))
    return py, None


def version(py):
    """The lmcache version installed for @py."""
    return subprocess.run([py, "-c", "import importlib.metadata as m; print(m.version('lmcache'))"],
                          capture_output=True, text=True).stdout.strip()


def _last(text, n=3):
    lines = [x for x in text.strip().splitlines() if x.strip()]
    return " | ".join(lines[-n:]) or "(no output)"


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def connector(port, mq_timeout=120):
    """--kv-transfer-config of vLLM's LMCacheMPConnector for the server on
    @port (lmcache.mp.* are the connector's extra-config keys)."""
    return {"kv_connector": "LMCacheMPConnector", "kv_role": "kv_both",
            "kv_connector_extra_config": {"lmcache.mp.host": "tcp://127.0.0.1",
                                          "lmcache.mp.port": port,
                                          "lmcache.mp.mq_timeout": mq_timeout}}


class Server:
    """`lmcache server` (MP mode) of environment @py, on a free port, with
    an L1 (host memory) cache of @l1_gb GiB.  --supported-transfer-mode
    auto: on a CPU, LMCache's workers default to its engine-driven transfer
    (the worker copies), which a server of the default mode (lmcache_driven
    only) refuses ("No handler registered for operation
    register_kv_cache_engine_driven_context")."""

    def __init__(self, py, log_dir, l1_gb=1, start_timeout=300):
        self.py = py
        self.port = _free_port()
        self.http_port = _free_port()
        self.log_path = os.path.join(log_dir, "lmcache-server.log")
        self.l1_gb = l1_gb
        self.timeout = start_timeout
        self.proc = None

    def env(self):
        return dict(os.environ, **ENV)

    def __enter__(self):
        cmd = [os.path.join(os.path.dirname(self.py), "lmcache"), "server",
               "--host", "127.0.0.1", "--port", str(self.port),
               "--l1-size-gb", str(self.l1_gb), "--eviction-policy", "LRU",
               "--supported-transfer-mode", "auto",
               "--http-host", "127.0.0.1", "--http-port", str(self.http_port),
               "--disable-observability"]
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                         env=self.env(), start_new_session=True)
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise LMCacheError("lmcache server exited with status %d at start: %s"
                                   % (self.proc.returncode, _last(self.log())))
            if "cache server is running" in self.log():
                return self
            time.sleep(0.5)
        self.stop()
        raise LMCacheError("lmcache server did not start within %d s: %s"
                           % (self.timeout, _last(self.log())))

    def log(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, 9)
                self.proc.wait()

    def __exit__(self, *exc):
        self.stop()
