#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""A Redis that lies, for tests/remote: it accepts any AUTH and PING, then
answers every other command the way MODE says.  Usage: hostile_redis.py
MODE PORT [ARG] (prints "ready" once listening; serves until killed).

Modes: garbage (random bytes), huge (a 1 GiB bulk string that never
comes), nested (arrays nested 100 deep), wrongtype (an array of strings
for GET), moved (MOVED to a non-routable address), slots (a slot map with
2000 masters, bad ranges and long host names), trickle (the right
answer for a missing key, one byte every 50 ms), close (closes at once);
and, for hostile_test.sh:
  corpus FILE:AFTER  the bytes of FILE (tests/remote/corpus) for every
                     keyed command, then AFTER: next, close or hold
  slow               an honest store 3 ms a SET (then +OK), GET a miss
  storm PEER         a cluster node owning every slot that MOVEs every
                     key to 127.0.0.1:PEER, which does the same back
  portwrap PORT      a cluster whose only master is at PORT + 65536
  trap               accepts, prints "connected" for each connection
  escape-auth        refuses AUTH with words that carry escape sequences
                     and a forged log line
  escape-slots       the same words as its CLUSTER SLOTS error
"""
import os
import socket
import sys
import threading
import time


PORT, ARG, CORPUS, AFTER = 0, "", b"", "next"


def commands(conn):
    """Yield each command (a list of bytes) a client pipelines."""
    buf = b""
    while True:
        while True:
            cmd, used = parse(buf)
            if cmd is None:
                break
            buf = buf[used:]
            yield cmd
        data = conn.recv(65536)
        if not data:
            return
        buf += data


def parse(buf):
    """One RESP array of bulk strings from buf: (args, bytes used) or (None, 0)."""
    if not buf.startswith(b"*"):
        return None, 0
    end = buf.find(b"\r\n")
    if end < 0:
        return None, 0
    n, pos, args = int(buf[1:end]), end + 2, []
    for _ in range(n):
        end = buf.find(b"\r\n", pos)
        if end < 0:
            return None, 0
        size = int(buf[pos + 1:end])
        if len(buf) < end + 2 + size + 2:
            return None, 0
        args.append(buf[end + 2:end + 2 + size])
        pos = end + 2 + size + 2
    return args, pos


def slot_map():
    out = [b"*2003\r\n"]
    for i in range(2000):
        host = b"10.%d.%d.1" % (i // 250, i % 250)
        out.append(b"*3\r\n:%d\r\n:%d\r\n*2\r\n$%d\r\n%s\r\n:7000\r\n"
                   % (i * 8, i * 8 + 7, len(host), host))
    out.append(b"*3\r\n:16000\r\n:99999\r\n*2\r\n$3\r\nabc\r\n:1\r\n")
    out.append(b"*3\r\n:-5\r\n:3\r\n*2\r\n$9\r\n127.0.0.1\r\n:1\r\n")
    long_host = b"h" * 300
    out.append(b"*3\r\n:0\r\n:0\r\n*2\r\n$300\r\n%s\r\n:1\r\n" % long_host)
    return b"".join(out)


# No CR: RESP cannot carry one in an error line (the reader refuses it).
FORGED = b"WRONGPASS \x1b[2J\x1b[31mno\x1b[0m\nkvshared: ready\x07"


def one_master(host, port):
    """CLUSTER SLOTS: every slot on one master."""
    return b"*1\r\n*3\r\n:0\r\n:16383\r\n*2\r\n$%d\r\n%s\r\n:%d\r\n" % (
        len(host), host, port)


def answer(mode, conn, cmd):
    name = cmd[0].upper() if cmd else b""
    if name == b"AUTH" and mode == "escape-auth":
        conn.sendall(b"-" + FORGED + b"\r\n")
        return True
    if name in (b"AUTH", b"PING", b"ASKING", b"READONLY"):
        conn.sendall(b"+OK\r\n" if name != b"PING" else b"+PONG\r\n")
        return True
    if name == b"CLUSTER":
        if mode == "escape-slots":
            conn.sendall(b"-ERR " + FORGED + b"\r\n")
        elif mode == "storm":
            conn.sendall(one_master(b"127.0.0.1", PORT))
        elif mode == "portwrap":
            conn.sendall(one_master(b"127.0.0.1", int(ARG) + 65536))
        else:
            conn.sendall(slot_map())
        return True
    if mode == "corpus":
        conn.sendall(CORPUS)
        if AFTER == "hold":
            time.sleep(30)
        return AFTER == "next"
    if mode == "slow":
        if name == b"SET":
            time.sleep(0.003)
            conn.sendall(b"+OK\r\n")
        else:
            conn.sendall(b"$-1\r\n")
        return True
    if mode == "storm":
        conn.sendall(b"-MOVED 42 127.0.0.1:%d\r\n" % int(ARG))
        return True
    if mode == "garbage":
        conn.sendall(os.urandom(4096))
    elif mode == "huge":
        conn.sendall(b"$1073741824\r\n" + b"x" * 65536)
        time.sleep(5)
        return False
    elif mode == "nested":
        conn.sendall(b"*1\r\n" * 100 + b":1\r\n")
    elif mode == "wrongtype":
        conn.sendall(b"*2\r\n$1\r\na\r\n$1\r\nb\r\n")
    elif mode == "moved":
        conn.sendall(b"-MOVED 1234 10.255.255.1:6379\r\n")
    elif mode == "slots":
        conn.sendall(b"-MOVED 99999 :0\r\n")
    elif mode == "trickle":
        for b in b"$-1\r\n":
            conn.sendall(bytes([b]))
            time.sleep(0.05)
    elif mode == "close":
        return False
    return True


def serve(mode, conn):
    try:
        for cmd in commands(conn):
            if not answer(mode, conn, cmd):
                break
    except (OSError, ValueError):
        pass
    conn.close()


def main():
    global PORT, ARG, CORPUS, AFTER
    mode, port = sys.argv[1], int(sys.argv[2])
    PORT, ARG = port, sys.argv[3] if len(sys.argv) > 3 else ""
    if mode == "corpus":
        path, AFTER = ARG.rsplit(":", 1)
        with open(path, "rb") as f:
            CORPUS = f.read()
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", port))
    srv.listen(64)
    print("ready", flush=True)
    while True:
        conn, _ = srv.accept()
        if mode == "trap":
            print("connected", flush=True)
        threading.Thread(target=serve, args=(mode, conn), daemon=True).start()


if __name__ == "__main__":
    main()
