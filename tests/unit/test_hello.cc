// The connection handshake carried in RDMA CM private data.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "transport/hello.h"

namespace {

zcrpc_hello Sample(uint8_t kind = ZCRPC_HELLO_CONNECT)
{
	zcrpc_hello h{};
	h.version = ZCRPC_PROTO_VERSION;
	h.kind = kind;
	h.features = ZCRPC_FEAT_ALL;
	h.recv_depth = 1025;
	h.max_msg = 4096;
	h.max_write = 1U << 20;
	return h;
}

std::vector<uint8_t> Encode(const zcrpc_hello &h, size_t pad_to = 0)
{
	std::vector<uint8_t> buf(ZCRPC_HELLO_LEN);
	EXPECT_EQ(zcrpc__hello_encode(&h, buf.data(), buf.size()), size_t{ZCRPC_HELLO_LEN});
	if (pad_to > buf.size())
		buf.resize(pad_to, 0);
	return buf;
}

} // namespace

TEST(Hello, FitsTheConnectPrivateDataLimit)
{
	EXPECT_LE(ZCRPC_HELLO_LEN, ZCRPC_HELLO_MAX_CONNECT);
}

TEST(Hello, RoundTrips)
{
	zcrpc_hello in = Sample(), out{};
	auto buf = Encode(in);
	ASSERT_EQ(zcrpc__hello_decode(buf.data(), buf.size(), &out, nullptr, 0), ZCRPC_OK);
	EXPECT_EQ(out.version, in.version);
	EXPECT_EQ(out.kind, in.kind);
	EXPECT_EQ(out.features, in.features);
	EXPECT_EQ(out.recv_depth, in.recv_depth);
	EXPECT_EQ(out.max_msg, in.max_msg);
	EXPECT_EQ(out.status, 0u);
}

TEST(Hello, MaxWriteTravelsAtOffset24WithThePieceFeature)
{
	zcrpc_hello in = Sample(), out{};
	in.max_write = 0x800000; // rxe's max_msg_sz
	auto buf = Encode(in);
	EXPECT_EQ(buf[24], 0x00);
	EXPECT_EQ(buf[26], 0x80);
	ASSERT_EQ(zcrpc__hello_decode(buf.data(), buf.size(), &out, nullptr, 0), ZCRPC_OK);
	EXPECT_EQ(out.max_write, 0x800000u);
	// An older peer (no PIECE bit): whatever sits there is reserved.
	in.features = ZCRPC_FEAT_CREDITS;
	buf = Encode(in);
	EXPECT_EQ(buf[26], 0x00); // not written
	buf[26] = 0x80;
	ASSERT_EQ(zcrpc__hello_decode(buf.data(), buf.size(), &out, nullptr, 0), ZCRPC_OK);
	EXPECT_EQ(out.max_write, 0u);
}

TEST(Hello, RejectsAPieceBelowTheMinimum)
{
	// A peer must not make the other side split writes into tiny pieces.
	zcrpc_hello in = Sample(), out{};
	in.max_write = ZCRPC_HELLO_MIN_WRITE - 1;
	auto buf = Encode(in);
	char why[160] = "";
	EXPECT_EQ(zcrpc__hello_decode(buf.data(), buf.size(), &out, why, sizeof(why)),
		  ZCRPC_INVALID_ARGUMENT);
	EXPECT_NE(std::strstr(why, "RDMA WRITE pieces of 4095 bytes"), nullptr) << why;
	in.max_write = ZCRPC_HELLO_MIN_WRITE;
	buf = Encode(in);
	EXPECT_EQ(zcrpc__hello_decode(buf.data(), buf.size(), &out, why, sizeof(why)), ZCRPC_OK);
}

TEST(Hello, IsLittleEndianWithMagicFirst)
{
	auto buf = Encode(Sample());
	EXPECT_EQ(std::memcmp(buf.data(), "zcrp", 4), 0);
	EXPECT_EQ(buf[4], ZCRPC_PROTO_VERSION);
	EXPECT_EQ(buf[5], ZCRPC_HELLO_CONNECT);
	EXPECT_EQ(buf[6], ZCRPC_HELLO_LEN);
	EXPECT_EQ(buf[7], 0);
	EXPECT_EQ(buf[12], 1025 & 0xff); // recv_depth, low byte first
	EXPECT_EQ(buf[13], 1025 >> 8);
	EXPECT_EQ(buf[26], 0x10); // max_write (1 MiB), then the reserved word
	for (size_t i = 28; i < 32; i++)
		EXPECT_EQ(buf[i], 0) << "reserved byte " << i;
}

TEST(Hello, AcceptsCmPaddingAfterTheMessage)
{
	zcrpc_hello out{};
	auto buf = Encode(Sample(), 56); // the CM pads connect data to 56 bytes
	EXPECT_EQ(zcrpc__hello_decode(buf.data(), buf.size(), &out, nullptr, 0), ZCRPC_OK);
	EXPECT_EQ(out.recv_depth, 1025u);
}

TEST(Hello, RejectsTruncatedData)
{
	auto buf = Encode(Sample());
	zcrpc_hello out{};
	char why[128] = "";
	for (size_t len = 0; len < ZCRPC_HELLO_LEN; len++) {
		EXPECT_EQ(zcrpc__hello_decode(buf.data(), len, &out, why, sizeof(why)),
			  ZCRPC_INVALID_ARGUMENT) << "length " << len;
		EXPECT_NE(std::strstr(why, "truncated"), nullptr) << why;
	}
	EXPECT_EQ(zcrpc__hello_decode(nullptr, 32, &out, why, sizeof(why)), ZCRPC_INVALID_ARGUMENT);
}

TEST(Hello, RejectsALengthFieldBeyondTheData)
{
	auto buf = Encode(Sample());
	buf[6] = 48; // claims 48 bytes, only 32 present
	zcrpc_hello out{};
	char why[128] = "";
	EXPECT_EQ(zcrpc__hello_decode(buf.data(), buf.size(), &out, why, sizeof(why)),
		  ZCRPC_INVALID_ARGUMENT);
	EXPECT_NE(std::strstr(why, "truncated"), nullptr) << why;
}

TEST(Hello, RejectsOversizedLength)
{
	auto buf = Encode(Sample(), 255);
	buf[6] = 0x00;
	buf[7] = 0x01; // 256 bytes: beyond any CM private data
	zcrpc_hello out{};
	char why[128] = "";
	EXPECT_EQ(zcrpc__hello_decode(buf.data(), buf.size(), &out, why, sizeof(why)),
		  ZCRPC_INVALID_ARGUMENT);
	EXPECT_NE(std::strstr(why, "oversized"), nullptr) << why;
	buf[6] = 200;
	buf[7] = 0;
	EXPECT_EQ(zcrpc__hello_decode(buf.data(), buf.size(), &out, why, sizeof(why)),
		  ZCRPC_INVALID_ARGUMENT);
}

TEST(Hello, ALongerFutureMessageIsAcceptedWithinLimits)
{
	auto buf = Encode(Sample(), 48);
	buf[6] = 48; // a later minor revision with 16 more bytes
	zcrpc_hello out{};
	EXPECT_EQ(zcrpc__hello_decode(buf.data(), buf.size(), &out, nullptr, 0), ZCRPC_OK);
}

TEST(Hello, RejectsWrongVersion)
{
	zcrpc_hello h = Sample();
	h.version = ZCRPC_PROTO_VERSION + 1;
	auto buf = Encode(h);
	zcrpc_hello out{};
	char why[128] = "";
	EXPECT_EQ(zcrpc__hello_decode(buf.data(), buf.size(), &out, why, sizeof(why)),
		  ZCRPC_FAILED_PRECONDITION);
	EXPECT_NE(std::strstr(why, "version"), nullptr) << why;
	h.version = 0;
	buf = Encode(h);
	EXPECT_EQ(zcrpc__hello_decode(buf.data(), buf.size(), &out, why, sizeof(why)),
		  ZCRPC_FAILED_PRECONDITION);
}

TEST(Hello, RejectsBadMagicKindAndZeroDepths)
{
	zcrpc_hello out{};
	auto buf = Encode(Sample());
	buf[0] ^= 0xff;
	EXPECT_EQ(zcrpc__hello_decode(buf.data(), buf.size(), &out, nullptr, 0), ZCRPC_INVALID_ARGUMENT);

	zcrpc_hello h = Sample();
	h.kind = 9;
	buf = Encode(h);
	EXPECT_EQ(zcrpc__hello_decode(buf.data(), buf.size(), &out, nullptr, 0), ZCRPC_INVALID_ARGUMENT);

	h = Sample();
	h.recv_depth = 0;
	buf = Encode(h);
	EXPECT_EQ(zcrpc__hello_decode(buf.data(), buf.size(), &out, nullptr, 0), ZCRPC_INVALID_ARGUMENT);

	h = Sample(ZCRPC_HELLO_REJECT);
	h.recv_depth = 0;
	h.max_msg = 0;
	h.status = ZCRPC_FAILED_PRECONDITION;
	buf = Encode(h);
	ASSERT_EQ(zcrpc__hello_decode(buf.data(), buf.size(), &out, nullptr, 0), ZCRPC_OK);
	EXPECT_EQ(out.status, static_cast<uint32_t>(ZCRPC_FAILED_PRECONDITION));
}

TEST(Hello, EncodeRefusesASmallBuffer)
{
	zcrpc_hello h = Sample();
	uint8_t small[ZCRPC_HELLO_LEN - 1];
	EXPECT_EQ(zcrpc__hello_encode(&h, small, sizeof(small)), 0u);
}

// docs/protocol.md §1 and §5: every hello announces CLOSE (bit 3, 0x8)
// besides CREDITS and PIECE; the bits are on the wire at offset 8,
// little-endian.
TEST(Hello, EveryHelloAnnouncesTheCloseMessage)
{
	EXPECT_EQ(ZCRPC_FEAT_CLOSE, 0x8u);
	EXPECT_NE(ZCRPC_FEAT_ALL & ZCRPC_FEAT_CLOSE, 0u);
	EXPECT_NE(ZCRPC_FEAT_ALL & ZCRPC_FEAT_CREDITS, 0u);
	EXPECT_EQ(ZCRPC_FEAT_ALL & ZCRPC_FEAT_AUTH, 0u) << "AUTH is set per connection";
	EXPECT_EQ(ZCRPC_FEAT_ALL & ZCRPC_FEAT_NO_WIMM, 0u) << "NO_WIMM is set per device";
	EXPECT_EQ(ZCRPC_FEAT_WRITTEN, 0x20u);
	EXPECT_EQ(ZCRPC_FEAT_NO_WIMM, 0x40u);
	EXPECT_EQ(ZCRPC_FEAT_STREAMS, 0x80u);
	EXPECT_EQ(ZCRPC_FEAT_STREAM_BULK, 0x200u);
	EXPECT_EQ(ZCRPC_FEAT_BATCH, 0x400u);
	EXPECT_EQ(ZCRPC_FEAT_SERVER_STREAM_BULK, 0x800u);
	EXPECT_EQ(ZCRPC_FEAT_DRAIN, 0x1000u);
	EXPECT_EQ(ZCRPC_FEAT_MUTUAL, 0x2000u);
	for (uint8_t kind : {ZCRPC_HELLO_CONNECT, ZCRPC_HELLO_ACCEPT}) {
		auto buf = Encode(Sample(kind));
		EXPECT_EQ(buf[8], ZCRPC_FEAT_CREDITS | ZCRPC_FEAT_PIECE |
					  ZCRPC_FEAT_CLOSE | ZCRPC_FEAT_SHARED |
					  ZCRPC_FEAT_WRITTEN | ZCRPC_FEAT_STREAMS);
		EXPECT_EQ(buf[9], (ZCRPC_FEAT_STREAM_BULK | ZCRPC_FEAT_BATCH |
				   ZCRPC_FEAT_SERVER_STREAM_BULK | ZCRPC_FEAT_DRAIN |
				   ZCRPC_FEAT_MUTUAL) >> 8);
		EXPECT_EQ(buf[10] | buf[11], 0);
		zcrpc_hello out{};
		ASSERT_EQ(zcrpc__hello_decode(buf.data(), buf.size(), &out, nullptr, 0), ZCRPC_OK);
		EXPECT_EQ(out.features & ZCRPC_FEAT_CLOSE, ZCRPC_FEAT_CLOSE);
	}
}

// An older peer's hello (CREDITS only) and a newer one's (bits we do not
// know) both decode; the connection uses the intersection with our bits.
TEST(Hello, OlderAndNewerFeatureSetsDecode)
{
	for (uint32_t f : {uint32_t{ZCRPC_FEAT_CREDITS}, uint32_t{0xffffffffu}}) {
		zcrpc_hello h = Sample(), out{};
		h.features = f;
		auto buf = Encode(h, 56);
		ASSERT_EQ(zcrpc__hello_decode(buf.data(), buf.size(), &out, nullptr, 0), ZCRPC_OK);
		EXPECT_EQ(out.features, f);
		EXPECT_EQ((out.features & ZCRPC_FEAT_ALL) == ZCRPC_FEAT_ALL, f != ZCRPC_FEAT_CREDITS);
	}
}

// ---- the REJECT's reason (docs/protocol.md §1) ------------------------------

namespace
{

// The decoder of the version-1 hello before REJECTs carried a reason
// (src/transport/hello.c as of d8103b6, the checks a REJECT meets): what an
// older peer runs on the REJECT this one sends.
zcrpc_status OldDecode(const uint8_t *buf, size_t len, zcrpc_hello *out)
{
	auto le16 = [&](size_t o) {
		return static_cast<uint32_t>(buf[o] | buf[o + 1] << 8);
	};
	auto le32 = [&](size_t o) { return le16(o) | le16(o + 2) << 16; };
	if (!buf || len < 8)
		return ZCRPC_INVALID_ARGUMENT;
	if (le32(0) != ZCRPC_HELLO_MAGIC)
		return ZCRPC_INVALID_ARGUMENT;
	zcrpc_hello h{};
	h.version = buf[4];
	h.kind = buf[5];
	size_t hlen = le16(6);
	if (h.version != ZCRPC_PROTO_VERSION)
		return ZCRPC_FAILED_PRECONDITION;
	if (hlen > 196)
		return ZCRPC_INVALID_ARGUMENT;
	if (hlen < 32 || len < hlen || len < 32)
		return ZCRPC_INVALID_ARGUMENT;
	if (h.kind < 1 || h.kind > 3)
		return ZCRPC_INVALID_ARGUMENT;
	h.features = le32(8);
	h.recv_depth = le32(12);
	h.max_msg = le32(16);
	h.status = le32(20);
	if (h.kind != 3 && (h.recv_depth == 0 || h.max_msg == 0))
		return ZCRPC_INVALID_ARGUMENT;
	*out = h;
	return ZCRPC_OK;
}

zcrpc_hello Reject(zcrpc_status st, const char *reason)
{
	zcrpc_hello h{};
	h.version = ZCRPC_PROTO_VERSION;
	h.kind = ZCRPC_HELLO_REJECT;
	h.status = static_cast<uint32_t>(st);
	std::snprintf(h.reason, sizeof(h.reason), "%s", reason);
	return h;
}

// What the CM delivers of a reject: its private data padded to 148 bytes.
std::vector<uint8_t> EncodeReject(const zcrpc_hello &h)
{
	std::vector<uint8_t> buf(ZCRPC_HELLO_MAX_REJECT, 0xee);
	size_t n = zcrpc__hello_encode(&h, buf.data(), buf.size());
	EXPECT_GE(n, size_t{ZCRPC_HELLO_LEN});
	EXPECT_LE(n, size_t{ZCRPC_HELLO_MAX_REJECT});
	buf.resize(n);
	buf.resize(ZCRPC_HELLO_MAX_REJECT, 0);
	return buf;
}

} // namespace

TEST(HelloReject, CarriesItsReasonAfterTheThirtyTwoBytes)
{
	const char *why = "connection limit of 256 reached";
	zcrpc_hello in = Reject(ZCRPC_RESOURCE_EXHAUSTED, why), out{};
	std::vector<uint8_t> buf(ZCRPC_HELLO_MAX_REJECT);
	size_t n = zcrpc__hello_encode(&in, buf.data(), buf.size());
	ASSERT_EQ(n, ZCRPC_HELLO_LEN + std::strlen(why));
	EXPECT_EQ(buf[6], n); // the length field covers the reason
	EXPECT_EQ(std::memcmp(buf.data() + ZCRPC_HELLO_LEN, why,
			      std::strlen(why)),
		  0);
	EXPECT_EQ(buf[20], ZCRPC_RESOURCE_EXHAUSTED);
	buf.resize(n);
	buf.resize(ZCRPC_HELLO_MAX_REJECT, 0); // the CM's padding
	ASSERT_EQ(zcrpc__hello_decode(buf.data(), buf.size(), &out, nullptr, 0),
		  ZCRPC_OK);
	EXPECT_EQ(out.kind, ZCRPC_HELLO_REJECT);
	EXPECT_EQ(out.status, static_cast<uint32_t>(ZCRPC_RESOURCE_EXHAUSTED));
	EXPECT_STREQ(out.reason, why);
}

TEST(HelloReject, WithoutAReasonIsTheOldThirtyTwoByteFormat)
{
	zcrpc_hello in = Reject(ZCRPC_FAILED_PRECONDITION, ""), out{};
	std::vector<uint8_t> buf(ZCRPC_HELLO_MAX_REJECT);
	ASSERT_EQ(zcrpc__hello_encode(&in, buf.data(), buf.size()),
		  size_t{ZCRPC_HELLO_LEN});
	// It still fits the 32-byte buffer older code gives it.
	uint8_t small[ZCRPC_HELLO_LEN];
	EXPECT_EQ(zcrpc__hello_encode(&in, small, sizeof(small)),
		  size_t{ZCRPC_HELLO_LEN});
	// An older server's REJECT (32 bytes, padded by the CM) decodes with
	// its status and no reason, whatever the padding.
	for (uint8_t pad : {uint8_t{0}, uint8_t{'x'}}) {
		std::vector<uint8_t> old(small, small + ZCRPC_HELLO_LEN);
		old.resize(ZCRPC_HELLO_MAX_REJECT, pad);
		std::memset(out.reason, 'z', sizeof(out.reason));
		ASSERT_EQ(zcrpc__hello_decode(old.data(), old.size(), &out,
					      nullptr, 0),
			  ZCRPC_OK);
		EXPECT_EQ(out.status,
			  static_cast<uint32_t>(ZCRPC_FAILED_PRECONDITION));
		EXPECT_STREQ(out.reason, "") << "padding " << int(pad);
	}
}

TEST(HelloReject, AnOlderPeerStillDecodesTheStatusOfAReasonedReject)
{
	for (const char *why :
	     {"", "x",
	      "per-source connection limit of 64 reached for 10.0.2.15",
	      "the worker's pool has no slot for receive 17 of 1040 "
	      "(pool_max_slots)"}) {
		zcrpc_hello out{};
		auto buf = EncodeReject(Reject(ZCRPC_RESOURCE_EXHAUSTED, why));
		ASSERT_EQ(OldDecode(buf.data(), buf.size(), &out), ZCRPC_OK)
			<< why;
		EXPECT_EQ(out.kind, ZCRPC_HELLO_REJECT);
		EXPECT_EQ(out.status,
			  static_cast<uint32_t>(ZCRPC_RESOURCE_EXHAUSTED))
			<< why;
	}
	// The longest reason too: at the CM's reject limit, inside the old
	// decoder's length limit.
	std::string longest(300, 'r');
	zcrpc_hello out{};
	auto buf =
		EncodeReject(Reject(ZCRPC_RESOURCE_EXHAUSTED, longest.c_str()));
	EXPECT_EQ(buf[6], ZCRPC_HELLO_MAX_REJECT);
	ASSERT_EQ(OldDecode(buf.data(), buf.size(), &out), ZCRPC_OK);
	EXPECT_EQ(out.status, static_cast<uint32_t>(ZCRPC_RESOURCE_EXHAUSTED));
}

TEST(HelloReject, AReasonIsCutToWhatTheCmsRejectCarries)
{
	std::string longest(300, 'r');
	zcrpc_hello in = Reject(ZCRPC_RESOURCE_EXHAUSTED, longest.c_str()),
		    out{};
	EXPECT_EQ(std::strlen(in.reason), size_t{ZCRPC_HELLO_REASON_MAX});
	EXPECT_EQ(ZCRPC_HELLO_REASON_MAX, 116);
	std::vector<uint8_t> buf(ZCRPC_HELLO_MAX);
	EXPECT_EQ(zcrpc__hello_encode(&in, buf.data(), buf.size()),
		  size_t{ZCRPC_HELLO_MAX_REJECT});
	// A buffer too small for the reason: nothing, as for any hello.
	EXPECT_EQ(zcrpc__hello_encode(&in, buf.data(),
				      ZCRPC_HELLO_MAX_REJECT - 1),
		  0u);
	// A peer on a transport with more private data (a length above 148):
	// the first 116 bytes are the reason, the rest is ignored.
	std::vector<uint8_t> big(ZCRPC_HELLO_MAX, 'q');
	ASSERT_EQ(zcrpc__hello_encode(&in, big.data(), big.size()),
		  size_t{ZCRPC_HELLO_MAX_REJECT});
	big[6] = ZCRPC_HELLO_MAX;
	std::memset(big.data() + ZCRPC_HELLO_MAX_REJECT, 'q',
		    ZCRPC_HELLO_MAX - ZCRPC_HELLO_MAX_REJECT);
	ASSERT_EQ(zcrpc__hello_decode(big.data(), big.size(), &out, nullptr, 0),
		  ZCRPC_OK);
	EXPECT_EQ(std::string(out.reason),
		  longest.substr(0, ZCRPC_HELLO_REASON_MAX));
}

TEST(HelloReject, AReasonEndsAtANulAndControlCharactersBecomeQuestionMarks)
{
	zcrpc_hello out{};
	auto buf = EncodeReject(Reject(ZCRPC_RESOURCE_EXHAUSTED, "limit"));
	const char text[] = "a\x1b[2Jb\nc\x7f"
			    "d\0hidden";
	std::memcpy(buf.data() + ZCRPC_HELLO_LEN, text, sizeof(text) - 1);
	buf[6] = static_cast<uint8_t>(ZCRPC_HELLO_LEN + sizeof(text) - 1);
	ASSERT_EQ(zcrpc__hello_decode(buf.data(), buf.size(), &out, nullptr, 0),
		  ZCRPC_OK);
	EXPECT_STREQ(out.reason, "a?[2Jb?c?d");
	// The length field bounds it, not the padding after it.
	buf = EncodeReject(Reject(ZCRPC_RESOURCE_EXHAUSTED, "abc"));
	buf[6] = ZCRPC_HELLO_LEN + 2;
	ASSERT_EQ(zcrpc__hello_decode(buf.data(), buf.size(), &out, nullptr, 0),
		  ZCRPC_OK);
	EXPECT_STREQ(out.reason, "ab");
}

TEST(HelloReject, OnlyARejectCarriesAReason)
{
	// Set on a CONNECT or an ACCEPT, a reason is not encoded...
	for (uint8_t kind : {ZCRPC_HELLO_CONNECT, ZCRPC_HELLO_ACCEPT}) {
		zcrpc_hello in = Sample(kind), out{};
		std::snprintf(in.reason, sizeof(in.reason), "not sent");
		std::vector<uint8_t> buf(ZCRPC_HELLO_MAX);
		ASSERT_EQ(zcrpc__hello_encode(&in, buf.data(), buf.size()),
			  size_t{ZCRPC_HELLO_LEN});
		// ...and the bytes after the 32 of a longer one are not read as
		// one.
		buf.resize(48, 'x');
		buf[6] = 48;
		ASSERT_EQ(zcrpc__hello_decode(buf.data(), buf.size(), &out,
					      nullptr, 0),
			  ZCRPC_OK);
		EXPECT_STREQ(out.reason, "");
	}
}
