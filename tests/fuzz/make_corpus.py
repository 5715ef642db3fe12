#!/usr/bin/python3
"""Writes the seed corpora of the libFuzzer targets (tests/fuzz/corpus/<target>/):
  frame  valid frames of every type with and without metadata and payload,
         and one input per rejection rule of zcrpc__frame_decode (the
         layout mirrors src/rpc/frame.h, a 64-byte little-endian header);
  hello  handshakes of every kind, CM-padded and longer ones, and one input
         per rejection rule of zcrpc__hello_decode (src/transport/hello.h);
  pb     a method id (u32 LE) and a request of that method, for methods of
         tests/proto/pbtest.proto, idl/echo.proto and idl/kv.proto, valid and
         broken (fuzz_pb.c).
Deterministic, so the checked-in files can be regenerated and compared:

    tests/fuzz/make_corpus.py            # rewrite corpus/*/
    tests/fuzz/make_corpus.py --check    # exit 1 if they differ from the files
"""
import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "corpus")

REQUEST, REPLY, CANCEL, GOAWAY, GRANT = 1, 2, 3, 4, 5
MESSAGE, WINDOW, HEADERS, HALF_CLOSE = 6, 7, 8, 9  # streams (protocol.md §8)
F_BULK = 1
F_PAYLOAD_IN_BULK = 2
F_STREAM = 4
F_MORE = 8
MD_MAX_LEN = 2048
BULK_MAX = 1 << 32


def fnv1a(s):
    h = 0x811C9DC5
    for c in s.encode():
        h = ((h ^ c) * 16777619) & 0xFFFFFFFF
    return h


def md(*pairs):
    out = b""
    for k, v in pairs:
        out += struct.pack("<BH", len(k), len(v)) + k + v
    return out


def frame(type_, body_md=b"", payload=b"", *, flags=0, call_id=1, method=0,
          status=0, deadline=0, addr=0, blen=0, rkey=0, token=0, md_len=None,
          payload_len=None, magic=0x727A, version=1, res12=0, res56=0):
    hdr = struct.pack(
        "<HBBHHIIIIIIQQIIQ", magic, version, type_, flags,
        len(body_md) if md_len is None else md_len, call_id, res12, method,
        status, len(payload) if payload_len is None else payload_len,
        deadline, addr, blen, rkey, token, res56)
    assert len(hdr) == 64
    return hdr + body_md + payload


def seeds():
    m_echo = fnv1a("/pkg.Svc/Echo")
    auth = md((b"authorization", b"Bearer abc"), (b"trace-id", b"0af7651916cd43dd"))
    one = md((b"k", b"v"))
    sixteen = b"".join(md((bytes([0x61 + i]), b"")) for i in range(16))
    full = md((b"k", b"v" * (MD_MAX_LEN - 4)))
    s = {}
    # --- valid frames ------------------------------------------------------
    s["ok-request-empty"] = frame(REQUEST, method=m_echo)
    s["ok-request-md"] = frame(REQUEST, auth, method=m_echo, deadline=250000)
    s["ok-request-payload"] = frame(REQUEST, payload=b"hello", method=m_echo)
    s["ok-request-md-payload"] = frame(REQUEST, one, b"\x08\x96\x01", method=m_echo)
    s["ok-request-bulk"] = frame(REQUEST, one, b"x", flags=F_BULK, method=m_echo,
                                 blen=1 << 20)
    s["ok-request-bulk-4gib"] = frame(REQUEST, flags=F_BULK, blen=BULK_MAX)
    s["ok-request-payload-in-bulk"] = frame(REQUEST, one, flags=F_BULK | F_PAYLOAD_IN_BULK,
                                            blen=1 << 24)
    s["ok-reply-payload-in-bulk"] = frame(REPLY, flags=F_BULK | F_PAYLOAD_IN_BULK, blen=100)
    s["ok-request-md-16-pairs"] = frame(REQUEST, sixteen, b"p")
    s["ok-request-md-at-limit"] = frame(REQUEST, full)
    s["ok-reply-ok"] = frame(REPLY, payload=b"world")
    s["ok-reply-md-payload"] = frame(REPLY, auth, b"\x00\x01\x02", status=0)
    s["ok-reply-status-16"] = frame(REPLY, status=16)
    s["ok-reply-status-5"] = frame(REPLY, one, status=5)
    s["ok-reply-bulk"] = frame(REPLY, flags=F_BULK, blen=4096, token=9)
    # (the address and key belong to grants only: these were refused)
    s["ok-cancel"] = frame(CANCEL, call_id=42)
    s["ok-cancel-md"] = frame(CANCEL, one, call_id=42)
    s["ok-goaway"] = frame(GOAWAY, call_id=0)
    s["ok-goaway-payload"] = frame(GOAWAY, payload=b"draining")
    s["ok-grant"] = frame(GRANT, addr=0x7F0000200000, blen=65536, rkey=0xABCD, token=11)
    s["ok-grant-top"] = frame(GRANT, addr=(1 << 64) - 4097, blen=4096)
    s["ok-grant-4gib"] = frame(GRANT, addr=0x100000000, blen=BULK_MAX)
    # --- streams (docs/protocol.md §8) ------------------------------------
    s["ok-stream-open"] = frame(REQUEST, flags=F_STREAM, method=m_echo, deadline=1000000)
    s["ok-stream-open-md"] = frame(REQUEST, auth, flags=F_STREAM, method=m_echo)
    s["ok-stream-message"] = frame(MESSAGE, payload=b"\x08\x01", call_id=0x100001)
    s["ok-stream-message-empty"] = frame(MESSAGE, call_id=0x100001)
    s["ok-stream-message-piece"] = frame(MESSAGE, payload=b"\x00" * 100, flags=F_MORE,
                                         call_id=0x100001)
    s["ok-stream-window"] = frame(WINDOW, call_id=0x100001, res12=8)
    s["ok-stream-headers"] = frame(HEADERS, one, call_id=0x100001)
    s["ok-stream-half-close"] = frame(HALF_CLOSE, call_id=0x100001)
    s["ok-stream-end"] = frame(REPLY, auth, b"not found", flags=F_STREAM, status=5)
    s["ok-stream-cancel"] = frame(CANCEL, flags=F_STREAM, call_id=0x100001)
    # --- one rejection each -----------------------------------------------
    s["bad-empty"] = b""
    s["bad-short-63"] = frame(REQUEST)[:63]
    s["bad-short-1"] = b"z"
    s["bad-magic"] = frame(REQUEST, magic=0x7A72)
    s["bad-version-0"] = frame(REQUEST, version=0)
    s["bad-version-2"] = frame(REQUEST, version=2)
    s["bad-type-0"] = frame(0)
    s["bad-type-10"] = frame(10)
    s["bad-flags"] = frame(REQUEST, flags=0x8001, blen=1)
    s["bad-flags-10"] = frame(REQUEST, flags=0x10, blen=1)
    s["bad-reserved-12"] = frame(REQUEST, res12=1)
    s["bad-reserved-56"] = frame(REQUEST, res56=1 << 63)
    s["bad-len-beyond"] = frame(REQUEST, one, b"abc", payload_len=4)
    s["bad-len-md-beyond"] = frame(REQUEST, one, md_len=len(one) + 1)
    s["bad-len-huge"] = frame(REQUEST, b"", b"ab", payload_len=0xFFFFFFFF, md_len=0xFFFF)
    s["bad-len-trailing"] = frame(REQUEST, one, b"abcd", payload_len=3)
    s["bad-md-over-limit"] = frame(REQUEST, md((b"k", b"v" * (MD_MAX_LEN - 3))))
    s["bad-md-zero-key"] = frame(REQUEST, b"\x00\x01\x00v")
    s["bad-md-value-past-end"] = frame(REQUEST, b"\x01\x05\x00kv", b"tail")
    # ... past it by less than the key's length (a bound that forgot the key).
    s["bad-md-value-past-end-by-key"] = frame(REQUEST, b"\x03\x02\x00abcd")
    s["bad-md-17-pairs"] = frame(REQUEST, sixteen + md((b"q", b"")))
    s["bad-md-cut-pair-header"] = frame(REQUEST, one + b"\x01\x00")
    s["bad-reply-status-17"] = frame(REPLY, status=17)
    s["bad-reply-status-max"] = frame(REPLY, status=0xFFFFFFFF)
    s["bad-bulk-on-cancel"] = frame(CANCEL, flags=F_BULK, blen=10)
    s["bad-bulk-on-goaway"] = frame(GOAWAY, flags=F_BULK, blen=10)
    s["bad-bulk-on-grant"] = frame(GRANT, flags=F_BULK, addr=0x1000, blen=10)
    s["bad-payload-in-bulk-no-bulk"] = frame(REQUEST, flags=F_PAYLOAD_IN_BULK, blen=10)
    s["bad-payload-in-bulk-inline"] = frame(REPLY, payload=b"x", flags=F_BULK | F_PAYLOAD_IN_BULK,
                                            blen=10)
    s["bad-bulk-len-0"] = frame(REQUEST, flags=F_BULK, blen=0)
    s["bad-bulk-len-over"] = frame(REPLY, flags=F_BULK, blen=BULK_MAX + 1)
    s["bad-grant-wrap"] = frame(GRANT, addr=(1 << 64) - 100, blen=4096)
    s["bad-grant-empty"] = frame(GRANT, addr=0x1000, blen=0)
    s["bad-grant-body"] = frame(GRANT, payload=b"x", addr=0x1000, blen=16)
    s["bad-grant-md"] = frame(GRANT, one, addr=0x1000, blen=16)
    s["bad-stream-window-0"] = frame(WINDOW, call_id=0x100001)
    s["bad-stream-window-on-message"] = frame(MESSAGE, b"", b"x", res12=4)
    s["bad-stream-window-body"] = frame(WINDOW, b"", b"x", res12=4)
    s["bad-stream-message-md"] = frame(MESSAGE, one, b"x")
    s["bad-stream-headers-payload"] = frame(HEADERS, one, b"x")
    s["bad-stream-half-close-body"] = frame(HALF_CLOSE, one)
    s["bad-stream-flag-on-goaway"] = frame(GOAWAY, flags=F_STREAM)
    s["bad-stream-flag-on-message"] = frame(MESSAGE, flags=F_STREAM)
    s["bad-stream-open-payload"] = frame(REQUEST, b"", b"x", flags=F_STREAM, method=m_echo)
    s["bad-stream-bulk"] = frame(REPLY, flags=F_STREAM | F_BULK, blen=4096)
    s["ok-stream-message-bulk"] = frame(MESSAGE, flags=F_BULK, blen=4 << 20)
    s["ok-stream-message-bulk-from-server"] = frame(MESSAGE, flags=F_BULK, blen=1 << 20, token=0x200005)
    s["bad-stream-message-token-no-bulk"] = frame(MESSAGE, payload=b"x", token=5)
    s["ok-stream-grant"] = frame(GRANT, flags=F_STREAM, addr=0x1000, blen=1 << 20, token=7)
    s["bad-stream-message-bulk-payload"] = frame(MESSAGE, payload=b"x", flags=F_BULK, blen=4096)
    s["bad-stream-message-bulk-piece"] = frame(MESSAGE, flags=F_BULK | F_MORE, blen=4096)
    s["bad-stream-window-bulk"] = frame(WINDOW, flags=F_BULK, blen=4096, res12=4)
    s["bad-stream-piece-empty"] = frame(MESSAGE, flags=F_MORE)
    s["bad-stream-more-on-reply"] = frame(REPLY, payload=b"x", flags=F_MORE)
    # --- batches (docs/protocol.md §8, Batches): frames back to back; the
    # exact decoder refuses them all (not "ok-"), the batch walk takes the
    # "batch-ok-" ones to their end and refuses the "batch-bad-" ones.
    msg = lambda p: frame(MESSAGE, payload=p, call_id=0x100001)
    s["batch-ok-messages"] = msg(b"a") + msg(b"") + msg(b"\x08\x01")
    s["batch-ok-window-message-reply"] = (frame(WINDOW, call_id=0x100001, res12=8) +
                                          msg(b"xyz") +
                                          frame(REPLY, one, flags=F_STREAM, call_id=0x100001))
    s["batch-ok-piece-then-end"] = (frame(MESSAGE, payload=b"\x00" * 100, flags=F_MORE,
                                          call_id=0x100001) + msg(b"\x01"))
    s["batch-bad-request-first"] = frame(REQUEST, method=m_echo) + msg(b"a")
    s["batch-bad-bulk-message-first"] = frame(MESSAGE, flags=F_BULK, blen=4096) + msg(b"a")
    s["batch-bad-torn-tail"] = msg(b"a") + msg(b"b")[:10]
    s["batch-bad-runs-past"] = msg(b"a") + msg(b"bcdef")[:-2]
    # Bare metadata: the fuzzer also runs zcrpc__md_decode on the raw input.
    s["md-raw-pairs"] = auth
    s["md-raw-sixteen"] = sixteen
    return s


# --- the handshake (src/transport/hello.h) ----------------------------------
HELLO_MAGIC = 0x7072637A
CONNECT, ACCEPT, REJECT = 1, 2, 3


def hello(kind, *, version=1, length=32, features=1, depth=64, max_msg=4096,
          status=0, magic=HELLO_MAGIC, res=(0, 0), extra=b""):
    return struct.pack("<IBBHIIIIII", magic, version, kind, length, features,
                       depth, max_msg, status, *res) + extra


def hello_seeds():
    s = {}
    s["ok-connect"] = hello(CONNECT)
    s["ok-accept"] = hello(ACCEPT, depth=128, max_msg=1 << 20)
    s["ok-reject"] = hello(REJECT, depth=0, max_msg=0, status=9)
    s["ok-connect-cm-padded"] = hello(CONNECT) + bytes(56 - 32)
    s["ok-accept-cm-padded"] = hello(ACCEPT) + bytes(196 - 32)
    s["ok-longer-hello"] = hello(CONNECT, length=48, extra=b"\x01" * 16)
    s["ok-longest-hello"] = hello(ACCEPT, length=196, extra=bytes(164))
    s["ok-unknown-features"] = hello(CONNECT, features=0xFFFFFFFF, res=(1 << 20, 0))
    s["ok-piece"] = hello(ACCEPT, features=0x5, res=(8 << 20, 0))
    s["ok-piece-smallest"] = hello(CONNECT, features=0x5, res=(4096, 0))
    s["ok-reject-piece-ignored"] = hello(REJECT, depth=0, max_msg=0, status=8,
                                         features=0x5)
    # CREDITS | PIECE | CLOSE (0x8, docs/protocol.md §5), as this version sends
    s["ok-connect-close"] = hello(CONNECT, features=0xD, res=(1 << 20, 0))
    s["ok-accept-close"] = hello(ACCEPT, features=0xD, res=(8 << 20, 0))
    s["ok-reserved-set"] = hello(ACCEPT, res=(0xFFFFFFFF, 1))
    # A REJECT with its reason after the 32 bytes (docs/protocol.md §1)
    why = b"RESOURCE_EXHAUSTED: connection limit of 8 reached"
    s["ok-reject-reason"] = hello(REJECT, length=32 + len(why), depth=0,
                                  max_msg=0, status=8, extra=why)
    s["ok-reject-reason-control-chars"] = hello(REJECT, length=40, depth=0,
                                                max_msg=0, status=8,
                                                extra=b"a\x1b[2Jb\n\x00z")
    # SHARED (0x10): receives from a shared queue (protocol §3)
    s["ok-connect-shared"] = hello(CONNECT, features=0x1D, depth=16,
                                   res=(1 << 20, 0))
    s["bad-empty"] = b""
    s["bad-short-7"] = hello(CONNECT)[:7]
    s["bad-short-31"] = hello(CONNECT)[:31]
    s["bad-magic"] = hello(CONNECT, magic=0x7A637270)
    s["bad-version-0"] = hello(CONNECT, version=0)
    s["bad-version-2"] = hello(CONNECT, version=2)
    s["bad-length-small"] = hello(CONNECT, length=31)
    s["bad-length-beyond"] = hello(CONNECT, length=33)
    s["bad-length-over-limit"] = hello(CONNECT, length=197, extra=bytes(165))
    s["bad-kind-0"] = hello(0)
    s["bad-kind-4"] = hello(4)
    s["bad-zero-depth"] = hello(CONNECT, depth=0)
    s["bad-zero-max-msg"] = hello(ACCEPT, max_msg=0)
    s["bad-piece-small"] = hello(CONNECT, features=0x5, res=(4095, 0))
    s["bad-piece-zero"] = hello(ACCEPT, features=0x5)
    return s


# --- protobuf requests (tests/proto, idl) -----------------------------------
def varint(n):
    out = b""
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])


def key(field, wt):
    return varint(field << 3 | wt)


def f_varint(field, n):
    return key(field, 0) + varint(n & ((1 << 64) - 1))


def f_bytes(field, b):
    return key(field, 2) + varint(len(b)) + b


def f_fixed32(field, n):
    return key(field, 5) + struct.pack("<I", n)


def f_fixed64(field, n):
    return key(field, 1) + struct.pack("<Q", n)


def zigzag(n):
    return (n << 1) ^ (n >> 63)


def mid(name):
    return struct.pack("<I", fnv1a(name))


def pb_seeds():
    inner = f_varint(1, 7) + f_bytes(2, b"kid")
    nested = f_varint(1, 1) + f_bytes(3, inner) + f_bytes(3, f_varint(1, 2))
    presence = f_varint(1, 5) + f_bytes(2, b"s") + f_bytes(3, b"\x00\x01") + \
        f_fixed64(4, 0x4004000000000000) + f_varint(5, 1 << 40)
    every = b"".join([
        f_fixed64(1, 0x3FF0000000000000), f_fixed32(2, 0x40000000),
        f_varint(3, -5), f_varint(4, 1 << 62), f_varint(5, 0xFFFFFFFF),
        f_varint(6, (1 << 64) - 1), f_varint(7, zigzag(-3)), f_varint(8, zigzag(-(1 << 40))),
        f_fixed32(9, 9), f_fixed64(10, 10), f_fixed32(11, 0xFFFFFFFF), f_fixed64(12, 1 << 63),
        f_varint(13, 1), f_bytes(14, "héllo".encode()), f_bytes(15, b"\x00\xff"),
        f_varint(16, 1000), f_bytes(17, nested),
        f_bytes(20, b"a"), f_bytes(20, b""), f_bytes(21, b"\x01"), f_bytes(22, inner),
        f_varint(23, 1), f_varint(23, 2),
        f_bytes(30, varint(1) + varint(300)), f_bytes(31, struct.pack("<d", 0.5)),
        f_bytes(32, varint(zigzag(-1))), f_bytes(33, struct.pack("<II", 1, 2)),
        f_bytes(34, b"\x01\x00"), f_bytes(35, varint(2)),
        f_bytes(40, b"oneof"),
        f_bytes(50, f_bytes(1, b"k") + f_varint(2, 9)),
        f_bytes(51, f_varint(1, 3) + f_bytes(2, inner)),
        f_bytes(60, presence),
    ])
    test = "/zcrpc.pbtest.Test/"
    s = {}
    s["ok-test-echo-empty"] = mid(test + "Echo")
    s["ok-test-echo-every-field"] = mid(test + "Echo") + every
    s["ok-test-later-oneof-inner"] = mid(test + "Later") + f_bytes(41, inner)
    s["ok-test-fail-oneof-u64"] = mid(test + "Fail") + f_varint(42, 1 << 63)
    s["ok-test-big-size"] = mid(test + "Big") + f_varint(1, 1 << 20)
    s["ok-test-missing-unknown-field"] = mid(test + "Missing") + f_varint(99, 1) + \
        f_bytes(100, b"x")
    s["ok-other-nope"] = mid("/zcrpc.pbtest.Other/Nope") + f_bytes(22, nested)
    s["ok-echo-ping"] = mid("/zcrpc.echo.Echo/Ping") + f_bytes(1, b"payload") + f_varint(2, 42)
    s["ok-echo-reverse"] = mid("/zcrpc.echo.Echo/Reverse") + f_bytes(1, bytes(range(64)))
    s["ok-kv-put"] = mid("/zcrpc.kv.Kv/Put") + f_bytes(1, b"key") + f_varint(2, 5) + \
        f_varint(3, 0) + f_bytes(4, b"value")
    s["ok-kv-get"] = mid("/zcrpc.kv.Kv/Get") + f_bytes(1, b"key")
    s["ok-kv-delete"] = mid("/zcrpc.kv.Kv/Delete") + f_bytes(1, b"key")
    s["ok-kv-scan"] = mid("/zcrpc.kv.Kv/Scan") + f_bytes(1, b"a") + f_bytes(2, b"z") + \
        f_varint(3, 100)
    s["bad-unknown-method"] = mid("/zcrpc.pbtest.Test/Nope") + f_bytes(1, b"x")
    s["bad-short-id"] = b"\x01\x02"
    s["bad-truncated-bytes"] = mid(test + "Echo") + key(15, 2) + varint(10) + b"abc"
    s["bad-length-huge"] = mid(test + "Echo") + key(15, 2) + varint((1 << 63) - 1) + b"abc"
    s["bad-varint-11-bytes"] = mid(test + "Echo") + key(3, 0) + b"\xff" * 10 + b"\x01"
    s["bad-wire-type-7"] = mid(test + "Echo") + key(3, 7) + b"\x00"
    s["bad-field-0"] = mid(test + "Echo") + key(0, 0) + b"\x00"
    s["bad-nested-truncated"] = mid(test + "Echo") + f_bytes(17, f_bytes(3, inner)[:-2])
    s["bad-deep-nesting"] = mid(test + "Echo") + (key(17, 2) + b"\x7f") * 3 + \
        (key(3, 2) + b"\x7f") * 40
    s["bad-packed-cut"] = mid(test + "Echo") + f_bytes(31, b"\x00" * 7)
    s["bad-map-entry-cut"] = mid(test + "Echo") + f_bytes(50, f_bytes(1, b"k")[:-1])
    s["bad-kv-put-wire-type"] = mid("/zcrpc.kv.Kv/Put") + key(1, 0) + varint(1)
    return s


TARGETS = {"frame": seeds, "hello": hello_seeds, "pb": pb_seeds}


def main():
    check = "--check" in sys.argv[1:]
    rc = 0
    for name, make in TARGETS.items():
        out = os.path.join(CORPUS, name)
        want = make()
        total = sum(len(v) for v in want.values())
        assert total < 100 * 1024, total
        if check:
            have = {n: open(os.path.join(out, n), "rb").read()
                    for n in os.listdir(out)} if os.path.isdir(out) else {}
            if have != want:
                diff = sorted(set(have) ^ set(want)) or sorted(
                    n for n in want if have.get(n) != want[n])
                print(f"corpus/{name} differs from make_corpus.py:", ", ".join(diff))
                rc = 1
            else:
                print(f"corpus/{name}: {len(want)} seeds, {total} bytes, up to date")
            continue
        os.makedirs(out, exist_ok=True)
        for n in os.listdir(out):
            os.remove(os.path.join(out, n))
        for n, data in sorted(want.items()):
            with open(os.path.join(out, n), "wb") as f:
                f.write(data)
        print(f"wrote {len(want)} seeds ({total} bytes) to {out}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
