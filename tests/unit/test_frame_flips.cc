// Deterministic bit-flip suite for the parsers of what a peer sends: the RPC
// frame (src/rpc/frame.c) and the connection handshake (src/transport/
// hello.c). For a valid input of each kind, every single-bit flip and a
// fixed sample of two-bit flips is parsed from a heap buffer of exactly its
// size (the ASan build sees any read past it). Every variant must get a
// verdict (OK or INVALID_ARGUMENT / FAILED_PRECONDITION), never a crash; an
// accepted variant must re-encode to its own header bytes and decode again
// to the same fields; flips of the fields a receiver must check (magic,
// version, reserved words) must always be rejected.
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "rpc/frame.h"
#include "transport/hello.h"

namespace {

std::vector<uint8_t> Md(const std::vector<std::pair<std::string, std::string>> &kv)
{
	std::vector<uint8_t> out;
	for (auto &p : kv) {
		out.push_back(static_cast<uint8_t>(p.first.size()));
		out.push_back(static_cast<uint8_t>(p.second.size() & 0xff));
		out.push_back(static_cast<uint8_t>(p.second.size() >> 8));
		out.insert(out.end(), p.first.begin(), p.first.end());
		out.insert(out.end(), p.second.begin(), p.second.end());
	}
	return out;
}

std::vector<uint8_t> Frame(zcrpc_frame f, const std::vector<uint8_t> &md = {},
			   const std::string &payload = "")
{
	f.md_len = static_cast<uint16_t>(md.size());
	f.payload_len = static_cast<uint32_t>(payload.size());
	std::vector<uint8_t> b(ZCRPC_FRAME_HDR_LEN);
	zcrpc__frame_encode(&f, b.data());
	b.insert(b.end(), md.begin(), md.end());
	b.insert(b.end(), payload.begin(), payload.end());
	return b;
}

struct Named {
	std::string name;
	std::vector<uint8_t> bytes;
};

// One valid frame of every type, with and without bulk parts.
std::vector<Named> ValidFrames()
{
	std::vector<Named> v;
	const auto md = Md({{"authorization", "Bearer abc"}, {"trace-id", "0af7651916cd43dd"}});
	zcrpc_frame f{};
	f.type = ZCRPC_FRAME_REQUEST;
	f.call_id = 0x00100001;
	f.method_id = zcrpc__fnv1a("/pkg.Svc/Echo");
	f.deadline_us = 250000;
	v.push_back({"request", Frame(f, md, "hello")});
	f.flags = ZCRPC_FRAME_F_BULK;
	f.bulk_len = 1 << 20;
	v.push_back({"request-bulk", Frame(f, Md({{"k", "v"}}), "x")});
	f.flags = ZCRPC_FRAME_F_BULK | ZCRPC_FRAME_F_PAYLOAD_IN_BULK;
	f.bulk_len = 1 << 24;
	v.push_back({"request-payload-in-bulk", Frame(f)});
	f = zcrpc_frame{};
	f.type = ZCRPC_FRAME_REPLY;
	f.call_id = 0x00200002;
	f.status = ZCRPC_NOT_FOUND;
	v.push_back({"reply-error", Frame(f, {}, "no such key")});
	f.status = ZCRPC_OK;
	f.flags = ZCRPC_FRAME_F_BULK;
	f.bulk_len = 65536;
	f.bulk_token = 0x1234;
	v.push_back({"reply-bulk", Frame(f, md, "\x08\x96\x01")});
	f = zcrpc_frame{};
	f.type = ZCRPC_FRAME_CANCEL;
	f.call_id = 42;
	v.push_back({"cancel", Frame(f)});
	f = zcrpc_frame{};
	f.type = ZCRPC_FRAME_GOAWAY;
	v.push_back({"goaway", Frame(f, {}, "draining")});
	f = zcrpc_frame{};
	f.type = ZCRPC_FRAME_BULK_GRANT;
	f.call_id = 7;
	f.bulk_addr = 0x00007f0012340000ULL;
	f.bulk_len = 1 << 20;
	f.bulk_rkey = 0xabcdef01;
	f.bulk_token = 77;
	v.push_back({"bulk-grant", Frame(f)});
	// Streams (docs/protocol.md §8).
	f = zcrpc_frame{};
	f.type = ZCRPC_FRAME_REQUEST;
	f.flags = ZCRPC_FRAME_F_STREAM;
	f.call_id = 0x00100003;
	f.method_id = zcrpc__fnv1a("/pkg.Svc/Chat");
	v.push_back({"stream-open", Frame(f, md)});
	f = zcrpc_frame{};
	f.type = ZCRPC_FRAME_MESSAGE;
	f.call_id = 0x00100003;
	v.push_back({"stream-message", Frame(f, {}, "\x08\x01")});
	f.type = ZCRPC_FRAME_WINDOW;
	f.count = 8;
	v.push_back({"stream-window", Frame(f)});
	f.count = 0;
	f.type = ZCRPC_FRAME_HEADERS;
	v.push_back({"stream-headers", Frame(f, md)});
	f.type = ZCRPC_FRAME_HALF_CLOSE;
	v.push_back({"stream-half-close", Frame(f)});
	f.type = ZCRPC_FRAME_REPLY;
	f.flags = ZCRPC_FRAME_F_STREAM;
	f.status = ZCRPC_ABORTED;
	v.push_back({"stream-end", Frame(f, md, "enough")});
	f = zcrpc_frame{};
	f.type = ZCRPC_FRAME_REPLY;
	f.call_id = 0x00200004;
	f.count = 1; // one initial pair, one trailing
	v.push_back({"reply-initial-md", Frame(f, md, "ok")});
	return v;
}

bool SameFields(const zcrpc_frame &a, const zcrpc_frame &b)
{
	return a.type == b.type && a.flags == b.flags && a.md_len == b.md_len &&
	       a.call_id == b.call_id && a.method_id == b.method_id && a.status == b.status &&
	       a.payload_len == b.payload_len && a.deadline_us == b.deadline_us &&
	       a.bulk_addr == b.bulk_addr && a.bulk_len == b.bulk_len &&
	       a.bulk_rkey == b.bulk_rkey && a.bulk_token == b.bulk_token;
}

// Parses @in from an exact-size heap copy. Returns 1 when accepted, 0 when
// rejected; records a gtest failure for anything a total parser must not do.
int CheckFrame(const std::vector<uint8_t> &in, const std::string &what)
{
	std::vector<uint8_t> buf(in); // exactly in.size() bytes on the heap
	zcrpc_frame f{}, g{};
	char why[128] = "";
	zcrpc_status st = zcrpc__frame_decode(buf.data(), buf.size(), &f, why, sizeof(why));
	if (st != ZCRPC_OK) {
		EXPECT_EQ(st, ZCRPC_INVALID_ARGUMENT) << what;
		EXPECT_GT(std::strlen(why), 0u) << what << ": a rejection without a reason";
		return 0;
	}
	// Accepted: the lengths tile the buffer, pointers stay inside it.
	EXPECT_EQ(size_t{ZCRPC_FRAME_HDR_LEN} + f.md_len + f.payload_len, buf.size()) << what;
	EXPECT_EQ(f.md, buf.data() + ZCRPC_FRAME_HDR_LEN) << what;
	EXPECT_EQ(f.payload, f.md + f.md_len) << what;
	// Its metadata decodes and re-encodes to the same bytes.
	zcrpc_md_view pairs[ZCRPC_MD_MAX_PAIRS];
	int n = zcrpc__md_decode(f.md, f.md_len, pairs);
	EXPECT_GE(n, 0) << what << ": accepted frame with malformed metadata";
	if (n > 0) {
		size_t need = zcrpc__md_size(pairs, static_cast<size_t>(n));
		EXPECT_EQ(need, f.md_len) << what;
		if (need == f.md_len) {
			std::vector<uint8_t> md(need);
			zcrpc__md_encode(pairs, static_cast<size_t>(n), md.data());
			EXPECT_EQ(std::memcmp(md.data(), f.md, need), 0) << what;
		}
	}
	// The header re-encodes to the input's bytes and decodes the same.
	std::vector<uint8_t> again(buf);
	zcrpc__frame_encode(&f, again.data());
	EXPECT_EQ(std::memcmp(again.data(), buf.data(), ZCRPC_FRAME_HDR_LEN), 0)
		<< what << ": accepted header does not re-encode to itself";
	EXPECT_EQ(zcrpc__frame_decode(again.data(), again.size(), &g, nullptr, 0), ZCRPC_OK)
		<< what;
	EXPECT_TRUE(SameFields(f, g)) << what;
	return 1;
}

// Header bits a receiver must check: magic (0-1), version (2), the
// reserved word (56-63), and the count word (12-15) where it must be zero:
// everywhere but a WINDOW (a count of messages) and a unary REPLY (how many
// of its metadata pairs are initial metadata). Flipping one of them must
// always be refused.
bool MustReject(size_t byte, const std::vector<uint8_t> &frame)
{
	const bool count_used = frame[3] == ZCRPC_FRAME_WINDOW ||
				(frame[3] == ZCRPC_FRAME_REPLY && !(frame[4] & ZCRPC_FRAME_F_STREAM));
	return byte <= 2 || (byte >= 12 && byte <= 15 && !count_used) ||
	       (byte >= 56 && byte <= 63);
}

std::vector<uint8_t> Flip(const std::vector<uint8_t> &in, size_t bit)
{
	std::vector<uint8_t> out(in);
	out[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
	return out;
}

} // namespace

TEST(FrameFlips, EverySingleBitFlipOfEveryFrameTypeIsParsedSafely)
{
	for (auto &v : ValidFrames()) {
		ASSERT_EQ(CheckFrame(v.bytes, v.name), 1) << v.name << " is not valid to start with";
		size_t accepted = 0, rejected = 0;
		for (size_t bit = 0; bit < v.bytes.size() * 8; bit++) {
			std::string what = v.name + " bit " + std::to_string(bit);
			int ok = CheckFrame(Flip(v.bytes, bit), what);
			if (ok && bit / 8 < ZCRPC_FRAME_HDR_LEN)
				EXPECT_FALSE(MustReject(bit / 8, v.bytes)) << what << " was accepted";
			(ok ? accepted : rejected)++;
		}
		// Both verdicts occur: flips of ids and payload bytes are
		// accepted, of magic and lengths rejected.
		EXPECT_GT(accepted, 0u) << v.name;
		EXPECT_GE(rejected, size_t{8 * 3 + 8 * 12}) << v.name;
		if (HasFailure())
			return;
	}
}

TEST(FrameFlips, SampledTwoBitFlipsAreParsedSafely)
{
	std::mt19937_64 rng(0x7a637270); // fixed: the same pairs every run
	size_t total = 0, accepted = 0;
	for (auto &v : ValidFrames()) {
		const size_t bits = v.bytes.size() * 8;
		std::vector<std::pair<size_t, size_t>> pairs;
		// Every pair within the 64-bit words of the header (both bits
		// in one field), plus random pairs over the whole frame.
		for (size_t w = 0; w < ZCRPC_FRAME_HDR_LEN * 8; w += 64)
			for (size_t a = w; a < w + 64; a++)
				for (size_t b = a + 1; b < w + 64; b++)
					pairs.emplace_back(a, b);
		std::uniform_int_distribution<size_t> pick(0, bits - 1);
		for (int i = 0; i < 4000; i++) {
			size_t a = pick(rng), b = pick(rng);
			if (a != b)
				pairs.emplace_back(a, b);
		}
		for (auto &p : pairs) {
			auto in = Flip(Flip(v.bytes, p.first), p.second);
			accepted += static_cast<size_t>(CheckFrame(
				in, v.name + " bits " + std::to_string(p.first) + "," +
					    std::to_string(p.second)));
			total++;
		}
		if (HasFailure())
			return;
	}
	EXPECT_GT(total, 8u * (8 * 2016 + 3000));
	EXPECT_GT(accepted, 0u);
	EXPECT_LT(accepted, total);
}

TEST(FrameFlips, EveryTruncationAndExtensionIsRejected)
{
	for (auto &v : ValidFrames()) {
		for (size_t n = 0; n < v.bytes.size(); n++) {
			std::vector<uint8_t> cut(v.bytes.begin(),
						 v.bytes.begin() + static_cast<std::ptrdiff_t>(n));
			EXPECT_EQ(CheckFrame(cut, v.name + " cut to " + std::to_string(n)), 0);
		}
		auto longer = v.bytes;
		longer.push_back(0);
		EXPECT_EQ(CheckFrame(longer, v.name + " plus one byte"), 0);
	}
}

TEST(FrameFlips, EveryBitFlipOfTheHandshakeIsParsedSafely)
{
	struct zcrpc_hello hs[3] = {
		{ZCRPC_PROTO_VERSION, ZCRPC_HELLO_CONNECT, ZCRPC_FEAT_CREDITS, 64, 4096, 0},
		{ZCRPC_PROTO_VERSION, ZCRPC_HELLO_ACCEPT, ZCRPC_FEAT_CREDITS, 1040, 1 << 20, 0},
		{ZCRPC_PROTO_VERSION, ZCRPC_HELLO_REJECT, 0, 0, 0, ZCRPC_FAILED_PRECONDITION},
	};
	for (auto &h : hs) {
		std::vector<uint8_t> enc(ZCRPC_HELLO_LEN);
		ASSERT_EQ(zcrpc__hello_encode(&h, enc.data(), enc.size()), size_t{ZCRPC_HELLO_LEN});
		size_t accepted = 0;
		for (size_t bit = 0; bit < enc.size() * 8; bit++) {
			std::vector<uint8_t> in = Flip(enc, bit);
			struct zcrpc_hello d{};
			char why[160] = "";
			zcrpc_status st = zcrpc__hello_decode(in.data(), in.size(), &d, why, sizeof(why));
			std::string what = "kind " + std::to_string(h.kind) + " bit " + std::to_string(bit);
			if (st != ZCRPC_OK) {
				EXPECT_TRUE(st == ZCRPC_INVALID_ARGUMENT ||
					    (st == ZCRPC_FAILED_PRECONDITION && bit / 8 == 4))
					<< what;
				EXPECT_GT(std::strlen(why), 0u) << what;
				continue;
			}
			accepted++;
			// Magic, version and the length field are always checked
			// (only the kind may turn into another valid kind).
			EXPECT_TRUE(bit / 8 == 5 || bit / 8 >= 8) << what << " was accepted";
			std::vector<uint8_t> re(ZCRPC_HELLO_LEN);
			ASSERT_EQ(zcrpc__hello_encode(&d, re.data(), re.size()),
				  size_t{ZCRPC_HELLO_LEN});
			EXPECT_EQ(std::memcmp(re.data(), in.data(), 24), 0) << what;
		}
		EXPECT_GT(accepted, 0u);
	}
}
