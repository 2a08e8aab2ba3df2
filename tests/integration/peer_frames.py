"""Throws malformed peer-protocol traffic at an epochfs peer port, one
connection per case, and checks that the daemon closes each connection
(EOF, or an ERROR frame then EOF) within a few seconds. Exit 0 if every case
was dropped; the caller then checks the daemon still serves.

    peer_frames.py HOST PORT
"""
import os
import socket
import struct
import sys

host, port = sys.argv[1], int(sys.argv[2])


def hdr(length, ftype, flags=0, tag=0):
    return struct.pack("<IBBHQ", length, ftype, flags, 0, tag)


def hello(digest=0, version=2, flags=0):
    body = b"EPOCHFS\0" + struct.pack("<HHIQI", version, 0, 1, digest, flags) + os.urandom(32)
    return hdr(len(body), 1) + body


cases = {
    "garbage": os.urandom(4096),
    "oversized frame": hdr(0xFFFFFFF0, 1) + b"x" * 100,
    "oversized hello": hdr(10000, 1) + b"x" * 10000,
    "unknown type": hdr(4, 99) + b"abcd",
    "nonzero flags": hdr(0, 4, flags=1),
    "read before authentication": hdr(40, 5) + b"\0" * 40,
    "data to a server": hdr(8, 6) + b"\0" * 8,
    "hello with another digest": hello(digest=12345),
    "hello with another version": hello(version=9),
    "hello with bad flags": hello(flags=0x80),
    "truncated hello": hello()[:30],
    "auth without hello": hdr(32, 3) + b"\0" * 32,
}
failed = 0
for name, payload in cases.items():
    s = socket.create_connection((host, port), timeout=5)
    try:
        s.sendall(payload)
        if name == "truncated hello":
            s.shutdown(socket.SHUT_WR)
        closed = False
        while True:
            try:
                got = s.recv(65536)
            except socket.timeout:
                break
            except ConnectionResetError:
                closed = True
                break
            if not got:
                closed = True
                break
        if not closed:
            print("not dropped: %s" % name)
            failed += 1
    except (BrokenPipeError, ConnectionResetError):
        pass                    # dropped while we were still sending
    finally:
        s.close()
print("%d of %d malformed cases dropped" % (len(cases) - failed, len(cases)))
sys.exit(1 if failed else 0)
