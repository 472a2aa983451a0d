#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""Known answers for the v2 block keys (include/kvshare/blockhash.h),
from the documented encoding alone: SHA-256's compression function in
pure Python (FIPS 180-4 6.2.2, checked against hashlib below), Python's
hashlib for the root and the extras digest.  Prints the vectors that
tests/libkv/blockhash_test.c pins; run it to regenerate them."""
import hashlib
import struct

K = [int(x, 16) for x in """
428a2f98 71374491 b5c0fbcf e9b5dba5 3956c25b 59f111f1 923f82a4 ab1c5ed5
d807aa98 12835b01 243185be 550c7dc3 72be5d74 80deb1fe 9bdc06a7 c19bf174
e49b69c1 efbe4786 0fc19dc6 240ca1cc 2de92c6f 4a7484aa 5cb0a9dc 76f988da
983e5152 a831c66d b00327c8 bf597fc7 c6e00bf3 d5a79147 06ca6351 14292967
27b70a85 2e1b2138 4d2c6dfc 53380d13 650a7354 766a0abb 81c2c92e 92722c85
a2bfe8a1 a81a664b c24b8b70 c76c51a3 d192e819 d6990624 f40e3585 106aa070
19a4c116 1e376c08 2748774c 34b0bcb5 391c0cb3 4ed8aa4a 5b9cca4f 682e6ff3
748f82ee 78a5636f 84c87814 8cc70208 90befffa a4506ceb bef9a3f7 c67178f2
""".split()]
IV = [0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
      0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19]
M = 0xffffffff


def ror(x, n):
    return ((x >> n) | (x << (32 - n))) & M


def compress(h, block):
    assert len(block) == 64
    w = list(struct.unpack(">16I", block))
    for t in range(16, 64):
        s0 = ror(w[t - 15], 7) ^ ror(w[t - 15], 18) ^ (w[t - 15] >> 3)
        s1 = ror(w[t - 2], 17) ^ ror(w[t - 2], 19) ^ (w[t - 2] >> 10)
        w.append((w[t - 16] + s0 + w[t - 7] + s1) & M)
    a, b, c, d, e, f, g, hh = h
    for t in range(64):
        t1 = (hh + (ror(e, 6) ^ ror(e, 11) ^ ror(e, 25)) +
              ((e & f) ^ (~e & g)) + K[t] + w[t]) & M
        t2 = ((ror(a, 2) ^ ror(a, 13) ^ ror(a, 22)) +
              ((a & b) ^ (a & c) ^ (b & c))) & M
        a, b, c, d, e, f, g, hh = (t1 + t2) & M, a, b, c, (d + t1) & M, e, f, g
    return [(x + y) & M for x, y in zip(h, [a, b, c, d, e, f, g, hh])]


def self_check():
    """compress() from the IV over a padded message is hashlib's SHA-256."""
    for msg in (b"", b"abc", bytes(range(55))):
        pad = msg + b"\x80" + bytes(55 - len(msg)) + struct.pack(">Q", 8 * len(msg))
        out = struct.pack(">8I", *compress(IV, pad))
        assert out == hashlib.sha256(msg).digest(), msg


def u64(v):
    return struct.pack("<Q", v)


def lp(b):
    return u64(len(b)) + b


def root(salt, tpp):
    m = lp(b"kvshare.root.v2\0") + u64(tpp) + u64(salt is not None) + lp(salt or b"")
    return hashlib.sha256(m).digest()


def extras_digest(extras):
    m = lp(b"kvshare.extras.v2\0") + u64(len(extras)) + b"".join(lp(e) for e in extras)
    return hashlib.sha256(m).digest()


def page(key, tokens, extras):
    """The key of one page after @key (32 bytes, digest order)."""
    wide = any(t >= 1 << 24 for t in tokens)
    if wide:
        rec = b"".join(struct.pack("<I", t) for t in tokens)
    else:
        rec = b"".join(struct.pack("<I", t)[:3] for t in tokens)
    flags = (1 if wide else 0) | (2 if extras else 0)
    if extras:
        rec += extras_digest(extras)
    h = list(struct.unpack(">8I", key))
    chunks = [rec[i:i + 56] for i in range(0, len(rec), 56)]
    for i, c in enumerate(chunks):
        last = i == len(chunks) - 1
        blk = c + bytes(56 - len(c)) + struct.pack("<I", i) + bytes([flags, last, 2, 1])
        h = compress(h, blk)
    return struct.pack(">8I", *h)


def chain(salt, tpp, tokens, extras=()):
    key, out = root(salt, tpp), []
    for i in range(len(tokens) // tpp):
        key = page(key, tokens[i * tpp:(i + 1) * tpp], list(extras))
        out.append(key)
    return out


def c_key(k):
    w = struct.unpack("<4Q", k)
    return "{ { " + ", ".join("0x%016xull" % x for x in w) + " } }"


VECTORS = [
    # name, salt, tpp, tokens, extras
    ("v2_tpp16", b"tenant-a", 16, list(range(1, 33)), ()),
    ("v2_wide", b"tenant-a", 16, [7] * 15 + [1 << 24] + [0xffffffff] + [3] * 15, ()),
    ("v2_extra", None, 16, list(range(100, 116)), (b"lora-7",)),
    ("v2_tpp4", b"", 4, [9, 8, 7, 6], ()),
    ("v2_tpp20", b"s", 20, [i * 7 + 1 for i in range(20)], ()),
    ("v2_tpp300", b"", 300, [i * 7 + 1 for i in range(300)], (b"x" * 2000, b"")),
]

if __name__ == "__main__":
    self_check()
    for name, salt, tpp, toks, extras in VECTORS:
        keys = chain(salt, tpp, toks, extras)
        print("/* %s: root %s */" % (name, c_key(root(salt, tpp))))
        for k in keys:
            print("\t%s," % c_key(k))
