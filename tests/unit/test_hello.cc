// The connection handshake carried in RDMA CM private data.
#include <cstdint>
#include <cstring>
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
	for (uint8_t kind : {ZCRPC_HELLO_CONNECT, ZCRPC_HELLO_ACCEPT}) {
		auto buf = Encode(Sample(kind));
		EXPECT_EQ(buf[8], ZCRPC_FEAT_CREDITS | ZCRPC_FEAT_PIECE |
					  ZCRPC_FEAT_CLOSE | ZCRPC_FEAT_SHARED);
		EXPECT_EQ(buf[9] | buf[10] | buf[11], 0);
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
