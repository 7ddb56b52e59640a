#!/usr/bin/python3
"""A bounded slow-header flood (issue 37): SOCKETS connections to HOST:PORT, each sending one
header line every INTERVAL seconds and never ending its headers, reopened when the server
closes them, for SECONDS seconds. Prints how many connections it opened, how many the server
closed or refused, and how many stayed open longest (seconds).

usage: slow_flood.py HOST PORT SOCKETS INTERVAL SECONDS
"""
import selectors
import socket
import sys
import time

host, port, count, interval, seconds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5])
end = time.monotonic() + seconds
opened = closed = 0
longest = 0.0
sel = selectors.DefaultSelector()
conns = {}  # socket -> [opened at, next line at, request line sent]
reopen = []  # when to open the next connections, one each


def open_one():
    global opened
    s = socket.socket()
    s.setblocking(False)
    s.connect_ex((host, port))  # in flight; the first line goes at the first tick
    conns[s] = [time.monotonic(), time.monotonic(), False]
    sel.register(s, selectors.EVENT_READ)
    opened += 1


for _ in range(count):
    open_one()
while time.monotonic() < end:
    for key, _ in sel.select(timeout=0.2):
        s = key.fileobj
        try:
            data = s.recv(4096)
        except OSError:
            data = b""
        if not data:
            # Closed (or refused with a 503) by the server: count it and open another.
            t0 = conns.pop(s)[0]
            longest = max(longest, time.monotonic() - t0)
            sel.unregister(s)
            s.close()
            closed += 1
            reopen.append(time.monotonic() + 1)  # a second later: a slow flood, not a fast one
    now = time.monotonic()
    while reopen and reopen[0] <= now and now < end:
        reopen.pop(0)
        open_one()
    for s, st in list(conns.items()):
        if now >= st[1]:
            try:
                s.send(b"GET /v1/pools HTTP/1.1\r\n" if not st[2] else b"X-Slow: 1\r\n")
                st[2] = True
            except OSError:
                pass
            st[1] = now + interval
for s, st in conns.items():
    longest = max(longest, time.monotonic() - st[0])
    s.close()
print(f"opened={opened} closed_by_server={closed} longest_open_s={longest:.1f}")
