# SPDX-License-Identifier: GPL-2.0
"""The binding's prefix caches give the C API's results on random traces:
the same trace runs through kvpy_ref (libkv from C) and through the
binding, and every output line must be equal."""
import subprocess

import numpy as np
import pytest

import kvshare


def fmt(tag, first, pages=()):
    return " ".join([tag, str(int(first))] + [str(int(p)) for p in pages])


def radix_trace(seed, tpp, n_ops=400):
    """A random trace over a few shared prefixes (lines for kvpy_ref radix)."""
    rng = np.random.default_rng(seed)
    bases = [rng.integers(0, 5, size=64).tolist() for _ in range(4)]
    # A node handle is usable while no evict ran since its match, or while
    # it holds a lock (the binding's rule, and what keeps C off freed nodes).
    lines, epoch, next_page = [], 0, 0
    born, locks = [], []

    def usable():
        return [h for h in range(len(born)) if born[h] == epoch or locks[h]]
    for _ in range(n_ops):
        op = rng.choice(["M", "I", "L", "U", "E", "S"], p=[.35, .3, .1, .1, .1, .05])
        base = bases[rng.integers(len(bases))]
        cut = int(rng.integers(0, 64))
        tok = base[:cut] + rng.integers(0, 5, size=int(rng.integers(0, 12))).tolist()
        if op == "M":
            lines.append("M " + " ".join(map(str, tok)))
            born.append(epoch)
            locks.append(0)
        elif op == "I":
            n = len(tok) // tpp
            pages = list(range(next_page, next_page + n))
            next_page += n
            lines.append("I " + " ".join(map(str, tok)) + " | " + " ".join(map(str, pages)))
        elif op == "L" and usable():
            h = int(rng.choice(usable()))
            lines.append("L %d" % h)
            locks[h] += 1
        elif op == "U" and any(locks):
            h = int(rng.choice([h for h in range(len(locks)) if locks[h]]))
            lines.append("U %d" % h)
            locks[h] -= 1
        elif op == "E":
            lines.append("E %d" % rng.integers(0, 8))
            epoch += 1
        elif op == "S":
            lines.append("S")
    return lines


def radix_py(tpp, lines):
    r = kvshare.RadixCache(tpp)
    nodes, out = [], []
    for line in lines:
        tag, _, rest = line.partition(" ")
        if tag == "M":
            m = r.match_prefix(np.array(rest.split(), dtype=np.uint32))
            nodes.append(m.last_node)
            out.append(fmt("M", m.length, m.pages))
        elif tag == "I":
            t, p = rest.split("|")
            out.append(fmt("I", r.insert([int(x) for x in t.split()],
                                         [int(x) for x in p.split()])))
        elif tag == "L":
            out.append(fmt("L", r.lock(nodes[int(rest)])))
        elif tag == "U":
            out.append(fmt("U", r.unlock(nodes[int(rest)])))
        elif tag == "E":
            n = r.evict(int(rest))
            out.append(fmt("E", n, r.take_released()))
        elif tag == "S":
            out.append("S %d %d %d %d" % (r.evictable_size, r.protected_size,
                                          r.total_size, r.node_count))
        r.check()
    return out


@pytest.mark.parametrize("seed,tpp", [(1, 1), (2, 2), (3, 4), (4, 16)])
def test_radix_parity_with_c(kvpy_ref, seed, tpp):
    lines = radix_trace(seed, tpp)
    c = subprocess.run([kvpy_ref, "radix", str(tpp)], input="\n".join(lines) + "\n",
                       capture_output=True, text=True, timeout=120)
    assert c.returncode == 0, c.stdout[-500:] + c.stderr
    want = c.stdout.splitlines()
    got = radix_py(tpp, lines)
    assert len(want) == len(got)
    for i, (w, g) in enumerate(zip(want, got)):
        assert w == g, "op %d differs: C %r, Python %r" % (i, w, g)


def prefix_trace(seed, n_ops=120):
    """Requests of two clients over shared prompts (lines for kvpy_ref prefix)."""
    rng = np.random.default_rng(seed)
    system = rng.integers(0, 1000, size=48).tolist()
    docs = [rng.integers(0, 1000, size=40).tolist() for _ in range(3)]
    lines = []
    for _ in range(n_ops):
        c = int(rng.integers(2))
        op = rng.choice(["R", "P", "E", "S", "X"], p=[.6, .15, .1, .1, .05])
        tok = (system[:int(rng.integers(0, 49))] + docs[rng.integers(3)]
               + rng.integers(0, 1000, size=int(rng.integers(1, 12))).tolist())
        if op == "R":
            nm = int(rng.integers(0, len(tok)))
            lines.append("R %d %d %s" % (c, nm, " ".join(map(str, tok))))
        elif op == "P":
            lines.append("P %d %s" % (c, " ".join(map(str, tok))))
        elif op == "E":
            lines.append("E %d %d" % (c, rng.integers(0, 10)))
        elif op == "S":
            lines.append("S %d" % c)
        else:
            lines.append("X")
    lines += ["S 0", "S 1", "X"]
    return lines


def prefix_py(name, salt, lines):
    pools = [kvshare.Pool(name), kvshare.Pool(name)]
    pcs = [kvshare.PrefixCache(p, salt=salt) for p in pools]
    out = []
    for line in lines:
        f = line.split()
        if f[0] == "R":
            pc, tok = pcs[int(f[1])], np.array(f[3:], dtype=np.uint32)
            try:
                r = pc.match(tok, int(f[2]))
            except kvshare.Error as e:
                out.append("R! %d" % -e.errno)
                continue
            try:
                pc.reserve(r, len(tok))
            except kvshare.Error as e:
                out.append("R! %d %d" % (r.cached_len, -e.errno))
                pc.abort(r)
                continue
            out.append(fmt("R", r.cached_len, r.pages))
            pc.cache_finished_req(r, tok)
        elif f[0] == "P":
            m = pcs[int(f[1])].match_prefix(np.array(f[2:], dtype=np.uint32))
            out.append(fmt("P", m.length, m.pages))
        elif f[0] == "E":
            out.append(fmt("E", pcs[int(f[1])].evict(int(f[2]))))
        elif f[0] == "S":
            s = pcs[int(f[1])].stats
            out.append("S " + " ".join(str(s[k]) for k in (
                "local_hit_pages", "remote_hit_pages", "lookups", "published",
                "dup_published", "allocated", "alloc_evictions", "put_pages", "errors")))
        elif f[0] == "X":
            s = pools[0].stats()
            out.append("X %d %d %d %d %d" % (s["n_free"], s["n_owned"], s["n_shared"],
                                             s["n_cached"], s["n_held"]))
    for pc in pcs:
        pc.close()
    for p in pools:
        p.close()
    return out


@pytest.mark.parametrize("seed,pages", [(1, 512), (2, 48), (3, 40)])
def test_prefix_cache_parity_with_c(kvpy_ref, mkpool, daemon, seed, pages):
    """Fresh pools of the same geometry: the same trace gives the same
    matches, pages and counters from C and from Python (small pools make
    both evict)."""
    lines = prefix_trace(seed)
    c_pool, py_pool = mkpool(pages=pages), mkpool(pages=pages)
    c = subprocess.run([kvpy_ref, "prefix", c_pool, "salt"], input="\n".join(lines) + "\n",
                       capture_output=True, text=True, timeout=120)
    assert c.returncode == 0, c.stdout[-500:] + c.stderr
    want = c.stdout.splitlines()
    got = prefix_py(py_pool, "salt", lines)
    assert len(want) == len(got)
    for i, (w, g) in enumerate(zip(want, got)):
        assert w == g, "op %d (%s) differs: C %r, Python %r" % (i, lines[i][:40], w, g)
    assert any(int(x.split()[1]) > 0 for x in got if x.startswith("R")), "no hit at all"
