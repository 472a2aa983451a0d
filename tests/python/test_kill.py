# SPDX-License-Identifier: GPL-2.0
"""A Python worker killed with SIGKILL, in the middle of everything, leaves
nothing held: the arbiter releases its pages when its handle dies."""
import os
import signal
import subprocess
import sys

import kvshare

WORKER = r"""
import sys, numpy as np, kvshare
name = sys.argv[1]
p = kvshare.Pool(name)
h = kvshare.BlockHasher(4, "m")
tok = np.arange(64, dtype=np.uint32)
owned = p.alloc(5)                                   # OWNED, never published
pub = p.alloc(4)
res, _ = p.publish(pub, h.hash(tok[:16]))            # SHARED, a reference each
hits = p.lookup(h.hash(tok[:16]))                    # a second reference each
pc = kvshare.PrefixCache(p, salt="m")
r = pc.match(tok)                                    # a request mid-flight
pc.reserve(r, 64)
t = p.tensor()                                       # memory exported to torch
print("ready", p.quota()[1], flush=True)
sys.stdin.read()                                     # wait to be killed
"""


def test_killed_worker_releases_its_pages(mkpool, arbiter):
    name = mkpool(pages=64)
    w = subprocess.Popen([sys.executable, "-c", WORKER, name], env=os.environ,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        line = w.stdout.readline().split()
        assert line[0] == "ready" and int(line[1]) > 20
        st = arbiter.stats(name)
        assert st["n_held"] == int(line[1]) and st["n_owned"] > 0 and st["n_files"] == 1
    finally:
        w.send_signal(signal.SIGKILL)
        w.wait()
        w.stdin.close()
        w.stdout.close()
    assert w.returncode == -signal.SIGKILL
    st = arbiter.stats(name, check=True)
    assert st["n_held"] == 0 and st["n_owned"] == 0 and st["n_shared"] == 0
    assert st["n_refs"] == 0 and st["n_files"] == 0
    assert st["n_cached"] == 4 and st["n_free"] == 60    # published pages stay findable
    with kvshare.Pool(name) as p:
        keys = kvshare.BlockHasher(4, "m").hash(list(range(16)))
        hits = p.lookup(keys)
        assert len(hits) == 4
        p.put(hits)
