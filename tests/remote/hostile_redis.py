#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""A Redis that lies, for tests/remote: it accepts any AUTH and PING, then
answers every other command the way MODE says.  Usage: hostile_redis.py
MODE PORT (prints "ready" once listening; serves until killed).

Modes: garbage (random bytes), huge (a 1 GiB bulk string that never
comes), nested (arrays nested 100 deep), wrongtype (an array of strings
for GET), moved (MOVED to a non-routable address), slots (a slot map with
2000 masters, bad ranges and long host names), trickle (the right
answer for a missing key, one byte every 50 ms), close (closes at once).
"""
import os
import socket
import sys
import threading
import time


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


def answer(mode, conn, cmd):
    name = cmd[0].upper() if cmd else b""
    if name in (b"AUTH", b"PING", b"ASKING"):
        conn.sendall(b"+OK\r\n" if name != b"PING" else b"+PONG\r\n")
        return True
    if name == b"CLUSTER":
        conn.sendall(slot_map())
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
    mode, port = sys.argv[1], int(sys.argv[2])
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", port))
    srv.listen(64)
    print("ready", flush=True)
    while True:
        conn, _ = srv.accept()
        threading.Thread(target=serve, args=(mode, conn), daemon=True).start()


if __name__ == "__main__":
    main()
