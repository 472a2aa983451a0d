# SPDX-License-Identifier: GPL-2.0
"""Block keys from Python equal libkv's, computed by C (kvpy_ref)."""
import subprocess

import numpy as np
import pytest

import kvshare


def c_keys(ref, algo, tpp, salt, extras, tokens):
    out = subprocess.run([ref, "keys", algo, str(tpp), "-" if salt is None else salt]
                         + list(extras), input=" ".join(map(str, tokens)) + "\n",
                         capture_output=True, text=True, check=True, timeout=60)
    return out.stdout.split()


CASES = [
    ("sha256", 16, None, ()),
    ("sha256", 16, "", ()),            # an empty salt is not no salt
    ("sha256", 4, "model-a", ()),
    ("sha256", 1, "m", ("lora-7",)),
    ("sha256", 16, "m", ("lora-7", "img:abc")),
    ("xxh3", 16, None, ()),
    ("xxh3", 8, "model-a", ("x",)),
]


@pytest.mark.parametrize("algo,tpp,salt,extras", CASES)
def test_keys_equal_c(kvpy_ref, algo, tpp, salt, extras):
    rng = np.random.default_rng(tpp * 7 + len(extras))
    tokens = rng.integers(0, 2**32, size=tpp * 37 + 3, dtype=np.uint64).astype(np.uint32)
    h = kvshare.BlockHasher(tpp, salt, algo=algo)
    keys = h.hash(tokens, extra=extras)
    assert keys.shape == (len(tokens) // tpp, 4)
    want = c_keys(kvpy_ref, algo, tpp, salt, extras, tokens.tolist())
    assert [kvshare.key_hex(k) for k in keys] == want
    # The same from a list, an int32 view and in two chained halves.
    assert np.array_equal(h.hash(tokens.tolist(), extra=extras), keys)
    assert np.array_equal(h.hash(tokens.view(np.int32), extra=extras), keys)
    first = h.hash(tokens[:tpp * 20], extra=extras)
    rest = h.hash(tokens[tpp * 20:], parent=first[-1], extra=extras)
    assert np.array_equal(np.concatenate([first, rest]), keys)


def test_salts_and_algos_differ():
    tok = np.arange(64, dtype=np.uint32)
    a = kvshare.BlockHasher(16, None).hash(tok)
    b = kvshare.BlockHasher(16, "").hash(tok)
    c = kvshare.BlockHasher(16, "x").hash(tok)
    d = kvshare.BlockHasher(16, None, algo="xxh3").hash(tok)
    assert not (a == b).all(axis=1).any() and not (a == c).all(axis=1).any()
    assert (d[:, 2:] == 0).all() and not (d[:, 2:] == a[:, 2:]).all()
    assert kvshare.BlockHasher(16).hash(tok[:15]).shape == (0, 4)


def test_sglang_style_usage_matches_prefix_cache_keys(mkpool):
    """The keys a PrefixCache publishes are the hasher's chain."""
    name = mkpool(pages=64, tokens_per_page=4)
    tok = np.arange(1000, 1040, dtype=np.uint32)
    with kvshare.Pool(name) as p, kvshare.PrefixCache(p, salt="m") as pc:
        r = pc.match(tok)
        pc.reserve(r, 40)
        pages = r.pages
        pc.cache_finished_req(r, tok)
        keys = kvshare.BlockHasher(4, "m").hash(tok)
        for i in range(10):
            assert np.array_equal(pc.page_key(int(pages[i])), keys[i])
        # And another handle finds the chain by those keys.
        with kvshare.Pool(name) as q:
            hits = q.lookup(keys)
            assert hits.tolist() == pages[:10].tolist()
            q.put(hits)
