"""A peer-protocol speaker for the hostile-peer tests (docs/peer-protocol.md):
the handshake with the shared secret, sealed frames, READ/DATA/END, and a
man-in-the-middle proxy that can alter what passes. libsodium and libxxhash
are reached through ctypes, so the tests need nothing beyond the libraries
the daemon links.

    peer_client.py flood HOST PORT SECRET PEERS RANK PATH SIZE N PID
        an authenticated client sends N READs of PATH (SIZE bytes) and reads
        no reply for 2 s; prints the daemon's RSS growth (PID) in MB, then
        reads every reply it can and prints how many checked out.
    peer_client.py loris HOST PORT N
        opens N connections that never say a word; prints how many the
        daemon closed at once.
    peer_client.py proxy LISTEN_PORT TARGET_PORT MODE_FILE
        forwards 127.0.0.1:LISTEN_PORT to TARGET_PORT; while MODE_FILE holds
        "forge", alters the first byte of every DATA body going to the client
        and rewrites its reply's END checksum to match (what an attacker on
        the path without the secret can do).
"""
import ctypes
import hashlib
import hmac
import os
import socket
import struct
import sys
import threading
import time

sodium = ctypes.CDLL("libsodium.so.23")
sodium.sodium_init()
xxh = ctypes.CDLL("libxxhash.so.0")
xxh.XXH3_64bits.restype = ctypes.c_uint64
xxh.XXH3_64bits.argtypes = (ctypes.c_char_p, ctypes.c_size_t)
xxh.XXH3_64bits_withSeed.restype = ctypes.c_uint64
xxh.XXH3_64bits_withSeed.argtypes = (ctypes.c_char_p, ctypes.c_size_t, ctypes.c_uint64)

HELLO, CHALLENGE, AUTH, READY, READ, DATA, END, ERROR = range(1, 9)
VERSION = 2


def mix(z):
    m = (1 << 64) - 1
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & m
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & m
    return z ^ (z >> 31)


def digest_of(peers, chunk=256 << 10):
    d = 0
    for node in peers.split(","):
        b = node.encode() + b"\0"
        d = xxh.XXH3_64bits_withSeed(b, len(b), d)
    return mix(d ^ chunk)


def key_of(secret_path):
    data = open(secret_path, "rb").read()
    if data.endswith(b"\n"):
        data = data[:-1]
    return hashlib.blake2b(data, digest_size=32).digest()


def hdr(length, ftype, tag=0):
    return struct.pack("<IBBHQ", length, ftype, 0, 0, tag)


def seal(key, seq, frame):
    nonce = struct.pack("<Q", seq) + b"\0" * 4
    otk = ctypes.create_string_buffer(32)
    sodium.crypto_stream_chacha20_ietf(otk, ctypes.c_ulonglong(32), nonce, key)
    tag = ctypes.create_string_buffer(16)
    sodium.crypto_onetimeauth(tag, frame, ctypes.c_ulonglong(len(frame)), otk)
    return frame + tag.raw


def recv_exact(s, n):
    b = b""
    while len(b) < n:
        got = s.recv(n - len(b))
        if not got:
            raise EOFError
        b += got
    return b


class Client:
    """An authenticated client connection, as node RANK of PEERS."""

    def __init__(self, host, port, secret, peers, rank):
        self.key = key_of(secret)
        self.digest = digest_of(peers)
        self.s = socket.create_connection((host, port), timeout=10)
        nc = os.urandom(32)
        body = b"EPOCHFS\0" + struct.pack("<HHIQI", VERSION, 0, rank, self.digest, 0) + nc
        self.s.sendall(hdr(len(body), HELLO) + body)
        h = recv_exact(self.s, 16)
        length, ftype = struct.unpack("<IB", h[:5])
        body = recv_exact(self.s, length)
        assert ftype == CHALLENGE, ftype
        ns = body[8:40]
        dig = struct.pack("<Q", self.digest)
        proof = hmac.new(self.key, b"C" + ns + nc + dig, hashlib.sha512).digest()[:32]
        self.s.sendall(hdr(32, AUTH) + proof)
        h = recv_exact(self.s, 16)
        assert h[4] == READY, h[4]
        recv_exact(self.s, struct.unpack("<I", h[:4])[0])
        label = b"epochfs frames v2\0"
        self.tx = hashlib.blake2b(label + b"C" + nc + ns + dig, digest_size=32, key=self.key).digest()
        self.rx = hashlib.blake2b(label + b"S" + nc + ns + dig, digest_size=32, key=self.key).digest()
        self.txseq = self.rxseq = 0

    def read(self, tag, path, size, mtime_ns, off=0, length=None):
        p = path.encode()
        body = struct.pack("<QqQIHH", size, mtime_ns, off, length or size, len(p), 0) + p
        frame = seal(self.tx, self.txseq, hdr(len(body), READ, tag) + body)
        self.txseq += 1
        return frame

    def frame(self):
        """The next frame from the server: (type, tag, body), its seal checked."""
        h = recv_exact(self.s, 16)
        length, ftype = struct.unpack("<IB", h[:5])
        tag = struct.unpack("<Q", h[8:16])[0]
        body = recv_exact(self.s, length)
        t = recv_exact(self.s, 16)
        if seal(self.rx, self.rxseq, h + body)[-16:] != t:
            raise ValueError("a frame failed its seal")
        self.rxseq += 1
        return ftype, tag, body


def rss_mb(pid):
    for line in open("/proc/%d/status" % pid):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024.0
    return 0.0


def flood(host, port, secret, peers, rank, path, size, n, pid):
    c = Client(host, int(port), secret, peers, int(rank))
    size, n, pid = int(size), int(n), int(pid)
    before = rss_mb(pid)
    mtime = os.stat(os.path.join(os.environ["SRC"], path)).st_mtime_ns
    frames = b"".join(c.read(i + 1, path, size, mtime) for i in range(n))
    c.s.settimeout(5)
    try:
        c.s.sendall(frames)
    except OSError:
        pass                            # dropped while sending: fine for the big flood
    time.sleep(2)
    print("rss_growth_mb %.1f" % (rss_mb(pid) - before), flush=True)
    want = xxh.XXH3_64bits(open(os.path.join(os.environ["SRC"], path), "rb").read(), size)
    good = 0
    data = b""
    try:
        while good < n:
            ftype, tag, body = c.frame()
            if ftype == DATA:
                data += body
            elif ftype == END:
                status, _, x = struct.unpack("<iIQ", body)
                if status == size and x == want and len(data) == size:
                    good += 1
                data = b""
            elif ftype == ERROR:
                break
    except (EOFError, OSError, ValueError):
        pass
    print("replies_ok %d" % good, flush=True)


def loris(host, port, n):
    socks, closed = [], 0
    for _ in range(int(n)):
        s = socket.create_connection((host, int(port)), timeout=5)
        socks.append(s)
    time.sleep(0.5)
    for s in socks:
        s.setblocking(False)
        try:
            if s.recv(1) == b"":
                closed += 1
        except BlockingIOError:
            pass
        except OSError:
            closed += 1
    print("closed_at_once %d" % closed, flush=True)
    for s in socks:
        s.close()


def close_both(a, b):
    for x in (a, b):
        try:
            x.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def proxy(listen_port, target_port, mode_file):
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", int(listen_port)))
    ls.listen(16)

    def up(a, b):                       # client -> server: as is
        try:
            while True:
                d = a.recv(65536)
                if not d:
                    break
                b.sendall(d)
        except OSError:
            pass
        close_both(a, b)

    def down(a, b):                     # server -> client: frame by frame
        sealed, bodies = False, b""
        try:
            while True:
                h = recv_exact(a, 16)
                length, ftype = struct.unpack("<IB", h[:5])
                body = bytearray(recv_exact(a, length))
                tag = recv_exact(a, 16) if sealed else b""
                forge = open(mode_file).read().strip() == "forge"
                if ftype == DATA:
                    if forge and length:
                        body[0] ^= 0x5A
                    bodies += bytes(body)
                elif ftype == END:
                    if forge:
                        body[8:16] = struct.pack("<Q", xxh.XXH3_64bits(bodies, len(bodies)))
                    bodies = b""
                b.sendall(h + bytes(body) + tag)
                if ftype == READY:
                    sealed = True
        except (EOFError, OSError):
            pass
        close_both(a, b)

    while True:
        c, _ = ls.accept()
        try:
            s = socket.create_connection(("127.0.0.1", int(target_port)))
        except OSError:
            c.close()
            continue
        threading.Thread(target=up, args=(c, s), daemon=True).start()
        threading.Thread(target=down, args=(s, c), daemon=True).start()


if __name__ == "__main__":
    {"flood": flood, "loris": loris, "proxy": proxy}[sys.argv[1]](*sys.argv[2:])
