#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""Hostile KVS_SOCK_REMOTE_TIER requests, sent raw on kvshared's socket.

Usage: tier_req.py SOCKET OWNER.  Pool 'kvserve' of OWNER has tier T on.
Runs as root (an admin), so every refusal below is the request's fault,
not a permission.  Exit 0 when each request got its errno.
"""
import errno
import socket
import struct
import sys

MAGIC = 0x3153564B
HDR = struct.Struct("<IIIiIIQ")
# pool[64] tier[64] ns[64] owner flags pool_id pad reserved[2]
BODY = struct.Struct("<64s64s64sIIII2Q")
CMD = (3 << 30) | (BODY.size << 16) | (0xB8 << 8) | 0x43


def call(sock, body, cut=0):
    msg = HDR.pack(MAGIC, CMD, HDR.size + len(body) - cut, 0, 0, 0, 1) + body
    sock.sendall(msg[:len(msg) - cut])
    head = b""
    while len(head) < HDR.size:
        head += sock.recv(HDR.size - len(head))
    _, _, length, result, _, _, _ = HDR.unpack(head)
    rest = b""
    while len(rest) < length - HDR.size:
        rest += sock.recv(length - HDR.size - len(rest))
    return result, rest


def body(owner, pool=b"kvserve", tier=b"T", ns=b"", flags=0, pool_id=0,
         pad=0, res=(0, 0)):
    return BODY.pack(pool, tier, ns, owner, flags, pool_id, pad, *res)


def main():
    path, owner = sys.argv[1], int(sys.argv[2])
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(path)
    cases = [
        ("a well-formed request: the pool has a tier", {}, errno.EBUSY),
        ("pool name of 64 bytes, no NUL", {"pool": b"p" * 64}, errno.EINVAL),
        ("tier name of 64 bytes, no NUL", {"tier": b"t" * 64}, errno.EINVAL),
        ("namespace of 64 bytes, no NUL", {"ns": b"n" * 64}, errno.EINVAL),
        ("namespace with a brace", {"ns": b"a{b}"}, errno.EINVAL),
        ("tier name with a newline", {"tier": b"T\nfake log"}, errno.EINVAL),
        ("empty pool name", {"pool": b""}, errno.EINVAL),
        ("unknown flag", {"flags": 2}, errno.EINVAL),
        ("pool_id set on input", {"pool_id": 5}, errno.EINVAL),
        ("pad set", {"pad": 1}, errno.EINVAL),
        ("reserved[0] set", {"res": (1, 0)}, errno.EINVAL),
        ("reserved[1] set", {"res": (0, 1 << 63)}, errno.EINVAL),
        ("off with a namespace", {"flags": 1, "ns": b"x"}, errno.EINVAL),
        ("unknown tier", {"tier": b"NOPE"}, errno.ENOENT),
        ("unknown pool", {"pool": b"nosuch"}, errno.ENOENT),
        ("another owner's pool of that name", {"owner": owner + 1}, errno.ENOENT),
        ("off naming another tier", {"flags": 1, "tier": b"BAD"}, errno.ENOENT),
    ]
    bad = 0
    for what, kw, want in cases:
        kw.setdefault("owner", owner)
        result, rest = call(sock, body(**kw))
        if result != -want:
            print(f"# {what}: got {result}, want -{errno.errorcode[want]}")
            bad += 1
    # A short message for this command: EINVAL, the connection still usable.
    result, _ = call(sock, body(owner), cut=8)
    if result != -errno.EINVAL:
        print(f"# short message: got {result}")
        bad += 1
    result, _ = call(sock, body(owner))
    if result != -errno.EBUSY:
        print(f"# after the bad requests the tier is not as before: {result}")
        bad += 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
