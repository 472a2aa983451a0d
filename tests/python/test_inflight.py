# SPDX-License-Identifier: GPL-2.0
"""In-flight dedupe and call deadlines from Python (issue 14).

A second real process claims the pages of a prefix (Pool.alloc_claim, or a
PrefixCache with inflight_wait_ms) and this one waits for them
(Pool.lookup(wait_ms=...)): a publish ends the wait in hits, one compute
only; the owner's death ends it at once in a miss; a wait that runs out
reports the keys still in flight.  A stopped kvshared makes calls raise
CallTimeout (a TimeoutError) within the handle's deadline instead of
hanging.

Waits are bounded generously (wait_ms=10000) and the tests assert only
what a bug would break: hits and pages, counters, and "returned well
before the bound", never how fast."""
import errno
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import kvshare

SALT = "inflight"
N_TOKENS = 16            # 4 pages of 4 tokens (conftest's default geometry)
BOUND_MS = 10000         # a wait's bound; "at once" means well below it
NOT_STUCK_S = 5.0

# The claiming process.  Commands on stdin, one per line:
#   publish [n]   fill the first n claimed pages (all by default) and publish them
#   put           give every page back unpublished (the claims end in a miss)
# Every answer is one line on stdout.
OWNER = r"""
import sys, numpy as np, kvshare
name, mode = sys.argv[1], sys.argv[2]
p = kvshare.Pool(name)
tok = np.arange(%d, dtype=np.uint32)
keys = kvshare.BlockHasher(4, %r).hash(tok)
if mode == "prefix":
    pc = kvshare.PrefixCache(p, salt=%r, inflight_wait_ms=10000)
    r = pc.match(np.append(tok, 0).astype(np.uint32))
    print("claimed", r.cached_len, *r.pages, flush=True)
    sys.stdin.readline()
    for pg in r.pages:
        p.numpy(int(pg), 1)[:] = 1000 + int(pg)      # "compute" the KV
    pc.cache_unfinished_req(r)
    print("published", pc.stats["claimed"], pc.stats["published"], flush=True)
    sys.stdin.readline()
    sys.exit(0)
pages = p.alloc_claim(keys)
print("claimed", *pages, flush=True)
for line in sys.stdin:
    cmd = line.split()
    if cmd[0] == "publish":
        n = int(cmd[1]) if len(cmd) > 1 else len(keys)
        for pg in pages[:n]:
            p.numpy(int(pg), 1)[:] = 1000 + int(pg)  # "compute" the KV
        res, dup = p.publish(pages[:n], keys[:n])
        print("published", dup, *res, flush=True)
    elif cmd[0] == "put":
        p.put(pages)
        print("put", flush=True)
""" % (N_TOKENS, SALT, SALT)


def keys_of(n_tokens=N_TOKENS):
    return kvshare.BlockHasher(4, SALT).hash(np.arange(n_tokens, dtype=np.uint32))


class Owner:
    """The claiming process, driven line by line."""

    def __init__(self, name, mode="claim"):
        self.proc = subprocess.Popen([sys.executable, "-c", OWNER, name, mode],
                                     env=os.environ, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)

    def answer(self):
        line = self.proc.stdout.readline().split()
        assert line, "the owner process died (status %s)" % self.proc.poll()
        return line[0], [int(x) for x in line[1:]]

    def tell(self, cmd):
        self.proc.stdin.write(cmd + "\n")
        self.proc.stdin.flush()

    def kill(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def close(self):
        self.kill()
        self.proc.stdin.close()
        self.proc.stdout.close()


@pytest.fixture
def owner():
    made = []

    def start(name, mode="claim"):
        o = Owner(name, mode)
        made.append(o)
        return o
    yield start
    for o in made:
        o.close()


class Waiter(threading.Thread):
    """fn() on another thread: its result or exception, and how long it took."""

    def __init__(self, fn):
        super().__init__(daemon=True)
        self.fn = fn
        self.result = self.error = None
        self.seconds = None

    def run(self):
        t0 = time.monotonic()
        try:
            self.result = self.fn()
        except BaseException as e:       # handed to the test's thread
            self.error = e
        self.seconds = time.monotonic() - t0

    def get(self, timeout=30):
        self.join(timeout)
        assert not self.is_alive(), "the waiting call never returned"
        if self.error is not None:
            raise self.error
        return self.result


def wait_armed(arbiter, name, n=1):
    """Until the pool has counted n LOOKUPs that armed a wait.  The caller's
    thread runs meanwhile, so this also needs the waiter to have released
    the GIL."""
    for _ in range(2000):
        if arbiter.stats(name)["inflight_waits"] >= n:
            return
        time.sleep(0.005)
    pytest.fail("no LOOKUP armed a wait on pool %s" % name)


def start_waiting_lookup(p, arbiter, name, n=1):
    """A Waiter for p.lookup() of the test's keys, waiting up to BOUND_MS,
    started and seen waiting (the n-th armed wait on the pool)."""
    w = Waiter(lambda: p.lookup(keys_of(), wait_ms=BOUND_MS, inflight=True))
    w.start()
    wait_armed(arbiter, name, n)
    assert w.is_alive()                     # waiting, not returned
    return w


def test_waiter_gets_the_pages_the_owner_publishes(mkpool, arbiter, owner):
    name = mkpool(pages=32)
    o = owner(name)
    what, claimed = o.answer()
    assert what == "claimed" and len(claimed) == 4
    assert arbiter.stats(name)["n_claimed"] == 4
    with kvshare.Pool(name) as p:
        # Without a wait the claim is reported, not waited for.
        pages, n_inflight = p.lookup(keys_of(), inflight=True)
        assert len(pages) == 0 and 1 <= n_inflight <= 4
        w = start_waiting_lookup(p, arbiter, name, 2)
        o.tell("publish")
        what, res = o.answer()
        assert what == "published" and res[0] == 0 and res[1:] == claimed
        r = w.get()
        assert isinstance(r, kvshare.LookupResult)
        assert list(r.pages) == claimed and r.n_inflight == 0
        assert w.seconds < NOT_STUCK_S
        # The owner's KV, not a page of our own.
        assert all((p.numpy(pg, 1) == 1000 + pg).all() for pg in claimed)
        p.put(r.pages)
    st = arbiter.stats(name)
    assert st["allocs"] == 4 and st["publishes"] == 4 and st["dup_publishes"] == 0
    assert st["n_claimed"] == 0


def test_owner_killed_while_waited_on_wakes_the_waiter(mkpool, arbiter, owner):
    name = mkpool(pages=32)
    o = owner(name)
    assert o.answer()[0] == "claimed"
    with kvshare.Pool(name) as p:
        w = start_waiting_lookup(p, arbiter, name)
        o.kill()
        pages, n_inflight = w.get()
        assert len(pages) == 0 and n_inflight == 0      # a miss: compute it
        assert w.seconds < NOT_STUCK_S, "woke after %.1f s, not at once" % w.seconds
        # The dead owner's claims are gone: this handle may claim the keys.
        mine = p.alloc_claim(keys_of())
        assert len(mine) == 4
        p.put(mine)
    st = arbiter.stats(name, check=True)
    assert st["n_claimed"] == 0 and st["n_held"] == 0 and st["publishes"] == 0


def test_owner_put_ends_the_wait_in_a_miss(mkpool, arbiter, owner):
    name = mkpool(pages=32)
    o = owner(name)
    assert o.answer()[0] == "claimed"
    with kvshare.Pool(name) as p:
        w = start_waiting_lookup(p, arbiter, name)
        o.tell("put")
        assert o.answer()[0] == "put"
        pages, n_inflight = w.get()
        assert isinstance(pages, np.ndarray) and len(pages) == 0
        assert n_inflight == 0                  # the claim ended: not given up
        assert w.seconds < NOT_STUCK_S


def test_wait_that_runs_out_reports_the_keys_in_flight(mkpool, arbiter, owner):
    name = mkpool(pages=32)
    o = owner(name)
    _, claimed = o.answer()
    o.tell("publish 2")                      # pages 0, 1 published; 2, 3 claimed
    assert o.answer()[0] == "published"
    with kvshare.Pool(name) as p:
        r = p.lookup(keys_of(), wait_ms=200, inflight=True)
        assert list(r.pages) == claimed[:2]
        assert 1 <= r.n_inflight <= 2
        p.put(r.pages)
        # Our own claim conflicts with theirs: EEXIST, nothing allocated.
        held = p.quota()[1]
        with pytest.raises(kvshare.Error) as ei:
            p.alloc_claim(keys_of()[2:])
        assert ei.value.errno == errno.EEXIST and "alloc_claim" in str(ei.value)
        assert p.quota()[1] == held
    assert arbiter.stats(name)["inflight_waits"] >= 1


def test_gil_released_while_waiting(mkpool, arbiter):
    """Both handles in this process: the thread that waits must let this one
    run, since this one publishes what it waits for.  Holding the GIL would
    leave the wait to run out into a miss."""
    name = mkpool(pages=32)
    with kvshare.Pool(name) as mine, kvshare.Pool(name) as theirs:
        claimed = mine.alloc_claim(keys_of())
        w = Waiter(lambda: theirs.lookup(keys_of(), wait_ms=BOUND_MS))
        w.start()
        wait_armed(arbiter, name)
        res, dup = mine.publish(claimed, keys_of())
        assert dup == 0
        assert list(w.get()) == list(res)
        theirs.put(w.result)


def test_prefix_cache_waits_for_the_prompt_another_process_computes(mkpool, arbiter,
                                                                    owner):
    name = mkpool(pages=32)
    o = owner(name, "prefix")
    what, row = o.answer()
    assert what == "claimed" and row[0] == 0 and len(row) == 5   # nothing cached, 4 claimed
    assert arbiter.stats(name)["n_claimed"] == 4
    with kvshare.Pool(name) as p, \
            kvshare.PrefixCache(p, salt=SALT, inflight_wait_ms=BOUND_MS) as pc:
        assert pc.inflight_wait_ms == BOUND_MS
        tok = np.arange(N_TOKENS + 1, dtype=np.uint32)
        w = Waiter(lambda: pc.match(tok))
        w.start()
        wait_armed(arbiter, name)
        o.tell("go")
        what, counts = o.answer()
        assert what == "published" and counts == [4, 4]   # claimed, published
        r = w.get()
        assert r.cached_len == N_TOKENS and list(r.pages) == row[1:]
        assert pc.stats["remote_hit_pages"] == 4 and pc.stats["claimed"] == 0
        pc.abort(r)
    st = arbiter.stats(name)
    assert st["allocs"] == 4 and st["publishes"] == 4 and st["dup_publishes"] == 0


@pytest.mark.parametrize("bad, exc", [(-1, ValueError), (86400001, ValueError),
                                      (2 ** 70, ValueError), ("10", TypeError),
                                      (1.5, TypeError), (True, TypeError)])
def test_bad_wait_and_timeout_arguments(mkpool, arbiter, bad, exc):
    name = mkpool(pages=8)
    with kvshare.Pool(name) as p:
        with pytest.raises(exc, match="wait_ms"):
            p.lookup(keys_of(), bad)
        with pytest.raises(exc, match="wait_ms"):
            p.lookup(keys_of(), wait_ms=bad, inflight=True)
        with pytest.raises(exc, match="timeout_ms"):
            p.timeout_ms = bad
        with pytest.raises(exc, match="timeout_ms"):
            arbiter.timeout_ms = bad
        with pytest.raises(exc, match="inflight_wait_ms"):
            kvshare.PrefixCache(p, salt=SALT, inflight_wait_ms=bad)
        assert p.quota()[1] == 0 and p.timeout_ms != bad
    with pytest.raises(exc, match="timeout_ms"):
        kvshare.Pool(name, timeout_ms=bad)
    with pytest.raises(exc, match="timeout_ms"):
        kvshare.Arbiter(timeout_ms=bad)


def test_bad_claim_arguments(mkpool, arbiter):
    name = mkpool(pages=8)
    p = kvshare.Pool(name)
    with pytest.raises(ValueError, match="32-byte keys"):
        p.alloc_claim(b"x" * 33)
    with pytest.raises(ValueError, match="alloc_claim: 0 entries"):
        p.alloc_claim(np.zeros((0, 4), dtype=np.uint64))
    with pytest.raises(TypeError):
        p.alloc_claim(7)
    with pytest.raises(kvshare.Error) as ei:
        p.alloc_claim(kvshare.BlockHasher(4).hash(np.arange(4 * 9, dtype=np.uint32)))
    assert ei.value.errno == errno.EDQUOT        # 9 pages of a pool of 8: quota first
    with pytest.raises(AttributeError, match="cannot be deleted"):
        del p.timeout_ms
    assert p.quota()[1] == 0
    p.close()
    with pytest.raises(ValueError, match="closed Pool"):
        p.alloc_claim(keys_of())
    with pytest.raises(ValueError, match="closed Pool"):
        p.timeout_ms = 5


def test_timeout_ms_reads_back(mkpool, arbiter):
    name = mkpool(pages=8)
    with kvshare.Pool(name, timeout_ms=1234) as p:
        assert p.timeout_ms == 1234 and p.broken is None
        p.timeout_ms = 0                            # no deadline
        assert p.timeout_ms == 0
    with kvshare.Arbiter(timeout_ms=4321) as a:
        assert a.timeout_ms == 4321 and a.broken is None


def test_stopped_daemon_raises_timeout_error(own_daemon):
    d = own_daemon
    with kvshare.Arbiter(d.socket) as a:
        a.create_pool("stopped", pages=16, layers=1, kv_heads=1, head_dim=8,
                      tokens_per_page=4)
    a = kvshare.Arbiter(d.socket, timeout_ms=300)
    p = kvshare.Pool("stopped", d.socket, timeout_ms=300)
    waiter = kvshare.Pool("stopped", d.socket, timeout_ms=300)
    claimed = p.alloc_claim(keys_of())
    w = Waiter(lambda: waiter.lookup(keys_of(), wait_ms=BOUND_MS))
    w.start()
    for _ in range(2000):                       # the wait is armed
        if a.stats("stopped")["inflight_waits"]:
            break
        time.sleep(0.005)
    d.proc.send_signal(signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        with pytest.raises(TimeoutError) as ei:
            p.lookup(keys_of())
        assert time.monotonic() - t0 < NOT_STUCK_S
        e = ei.value
        assert isinstance(e, kvshare.CallTimeout) and isinstance(e, kvshare.Error)
        assert e.errno == errno.ETIMEDOUT and "lookup of 4 keys" in str(e)
        assert p.broken == errno.ETIMEDOUT
        with pytest.raises(kvshare.Error) as ei:   # broken from now on
            p.put(claimed)
        assert ei.value.errno == errno.ENOTCONN
        with pytest.raises(kvshare.CallTimeout, match="INFO"):
            a.info()
        # The waiter sleeps no longer than its deadline at a time: it fails too.
        with pytest.raises(kvshare.CallTimeout, match="waiting up to 10000 ms"):
            w.get()
        assert w.seconds < NOT_STUCK_S
    finally:
        d.proc.send_signal(signal.SIGCONT)
    for h in (p, waiter, a):
        h.close()
    # Running again, the daemon took the broken handles' holdings back.
    with kvshare.Arbiter(d.socket) as a2:
        for _ in range(2000):
            st = a2.stats("stopped")
            if st["n_files"] == 0:
                break
            time.sleep(0.005)
        assert st["n_files"] == 0 and st["n_held"] == 0 and st["n_claimed"] == 0
