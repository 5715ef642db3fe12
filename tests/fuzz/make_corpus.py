#!/usr/bin/python3
"""Writes the seed corpus of the frame fuzzer (tests/fuzz/corpus/frame/):
valid frames of every type with and without metadata and payload, and one
input per rejection rule of zcrpc__frame_decode. Deterministic, so the
checked-in files can be regenerated and compared:

    tests/fuzz/make_corpus.py            # rewrite corpus/frame/
    tests/fuzz/make_corpus.py --check    # exit 1 if it differs from the files

The layout mirrors src/rpc/frame.h (64-byte little-endian header)."""
import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "corpus", "frame")

REQUEST, REPLY, CANCEL, GOAWAY, GRANT = 1, 2, 3, 4, 5
F_BULK = 1
F_PAYLOAD_IN_BULK = 2
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
                                 addr=0x7F0000001000, blen=1 << 20, rkey=0x1234, token=7)
    s["ok-request-bulk-4gib"] = frame(REQUEST, flags=F_BULK, blen=BULK_MAX)
    s["ok-request-payload-in-bulk"] = frame(REQUEST, one, flags=F_BULK | F_PAYLOAD_IN_BULK,
                                            addr=0x2000, blen=1 << 24, rkey=5, token=6)
    s["ok-reply-payload-in-bulk"] = frame(REPLY, flags=F_BULK | F_PAYLOAD_IN_BULK, blen=100)
    s["ok-request-md-16-pairs"] = frame(REQUEST, sixteen, b"p")
    s["ok-request-md-at-limit"] = frame(REQUEST, full)
    s["ok-reply-ok"] = frame(REPLY, payload=b"world")
    s["ok-reply-md-payload"] = frame(REPLY, auth, b"\x00\x01\x02", status=0)
    s["ok-reply-status-16"] = frame(REPLY, status=16)
    s["ok-reply-status-5"] = frame(REPLY, one, status=5)
    s["ok-reply-bulk"] = frame(REPLY, flags=F_BULK, addr=0x1000, blen=4096, rkey=3, token=9)
    s["ok-cancel"] = frame(CANCEL, call_id=42)
    s["ok-cancel-md"] = frame(CANCEL, one, call_id=42)
    s["ok-goaway"] = frame(GOAWAY, call_id=0)
    s["ok-goaway-payload"] = frame(GOAWAY, payload=b"draining")
    s["ok-grant"] = frame(GRANT, addr=0x7F0000200000, blen=65536, rkey=0xABCD, token=11)
    s["ok-grant-top"] = frame(GRANT, addr=(1 << 64) - 4097, blen=4096)
    s["ok-grant-4gib"] = frame(GRANT, addr=0x100000000, blen=BULK_MAX)
    # --- one rejection each -----------------------------------------------
    s["bad-empty"] = b""
    s["bad-short-63"] = frame(REQUEST)[:63]
    s["bad-short-1"] = b"z"
    s["bad-magic"] = frame(REQUEST, magic=0x7A72)
    s["bad-version-0"] = frame(REQUEST, version=0)
    s["bad-version-2"] = frame(REQUEST, version=2)
    s["bad-type-0"] = frame(0)
    s["bad-type-6"] = frame(6)
    s["bad-flags"] = frame(REQUEST, flags=0x8001, blen=1)
    s["bad-flags-4"] = frame(REQUEST, flags=0x4, blen=1)
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
    # Bare metadata: the fuzzer also runs zcrpc__md_decode on the raw input.
    s["md-raw-pairs"] = auth
    s["md-raw-sixteen"] = sixteen
    return s


def main():
    check = "--check" in sys.argv[1:]
    want = seeds()
    total = sum(len(v) for v in want.values())
    assert total < 100 * 1024, total
    if check:
        have = {n: open(os.path.join(OUT, n), "rb").read() for n in os.listdir(OUT)}
        if have != want:
            diff = sorted(set(have) ^ set(want)) or sorted(
                n for n in want if have.get(n) != want[n])
            print("corpus/frame differs from make_corpus.py:", ", ".join(diff))
            return 1
        print(f"corpus/frame: {len(want)} seeds, {total} bytes, up to date")
        return 0
    os.makedirs(OUT, exist_ok=True)
    for n in os.listdir(OUT):
        os.remove(os.path.join(OUT, n))
    for n, data in sorted(want.items()):
        with open(os.path.join(OUT, n), "wb") as f:
            f.write(data)
    print(f"wrote {len(want)} seeds ({total} bytes) to {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
