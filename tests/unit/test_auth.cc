// Admission with a pre-shared key, on the host: the HMAC against RFC 4231's
// known answers, the proof's inputs, and the ACCEPT hello carrying the
// nonce — including malformed, zero and oversized private data (T4).
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "transport/hello.h"
#include "transport/auth.h"

namespace {

std::string Hex(const uint8_t *p, size_t n)
{
	static const char *d = "0123456789abcdef";
	std::string s;
	for (size_t i = 0; i < n; i++) {
		s += d[p[i] >> 4];
		s += d[p[i] & 15];
	}
	return s;
}

zcrpc_hello AuthAccept()
{
	zcrpc_hello h{};
	h.version = ZCRPC_PROTO_VERSION;
	h.kind = ZCRPC_HELLO_ACCEPT;
	h.features = ZCRPC_FEAT_ALL | ZCRPC_FEAT_AUTH;
	h.recv_depth = ZCRPC_AUTH_RECV_INITIAL;
	h.max_msg = 4096;
	h.max_write = 1U << 20;
	for (int i = 0; i < ZCRPC_HELLO_NONCE_LEN; i++)
		h.nonce[i] = static_cast<uint8_t>(0xa0 + i);
	return h;
}

} // namespace

// RFC 4231 §4.2, §4.3 and §4.7 (HMAC-SHA-256 column).
TEST(Auth, HmacSha256MatchesRfc4231)
{
	uint8_t out[32];
	std::vector<uint8_t> key1(20, 0x0b);
	ASSERT_EQ(zcrpc__hmac_sha256(key1.data(), key1.size(), "Hi There", 8, out), 0);
	EXPECT_EQ(Hex(out, 32), "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");

	const char *data2 = "what do ya want for nothing?";
	ASSERT_EQ(zcrpc__hmac_sha256("Jefe", 4, data2, std::strlen(data2), out), 0);
	EXPECT_EQ(Hex(out, 32), "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");

	std::vector<uint8_t> key6(131, 0xaa);
	const char *data6 = "Test Using Larger Than Block-Size Key - Hash Key First";
	ASSERT_EQ(zcrpc__hmac_sha256(key6.data(), key6.size(), data6, std::strlen(data6), out), 0);
	EXPECT_EQ(Hex(out, 32), "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
}

TEST(Auth, ProofIsHmacOfNonceThenIdentity)
{
	std::vector<uint8_t> key(32, 0x42), nonce(ZCRPC_HELLO_NONCE_LEN);
	for (size_t i = 0; i < nonce.size(); i++)
		nonce[i] = static_cast<uint8_t>(i * 7);
	const std::string id = "client-7";
	uint8_t proof[32], want[32];
	ASSERT_EQ(zcrpc__auth_proof(key.data(), key.size(), nonce.data(), id.data(), id.size(),
				    proof),
		  0);
	std::vector<uint8_t> msg(nonce);
	msg.insert(msg.end(), id.begin(), id.end());
	ASSERT_EQ(zcrpc__hmac_sha256(key.data(), key.size(), msg.data(), msg.size(), want), 0);
	EXPECT_EQ(Hex(proof, 32), Hex(want, 32));

	// Every input matters: another nonce (a replay), identity or key.
	uint8_t other[32];
	nonce[31] ^= 1;
	ASSERT_EQ(zcrpc__auth_proof(key.data(), key.size(), nonce.data(), id.data(), id.size(),
				    other),
		  0);
	EXPECT_NE(Hex(other, 32), Hex(proof, 32));
	nonce[31] ^= 1;
	ASSERT_EQ(zcrpc__auth_proof(key.data(), key.size(), nonce.data(), "client-8", 8, other), 0);
	EXPECT_NE(Hex(other, 32), Hex(proof, 32));
	key[0] ^= 1;
	ASSERT_EQ(zcrpc__auth_proof(key.data(), key.size(), nonce.data(), id.data(), id.size(),
				    other),
		  0);
	EXPECT_NE(Hex(other, 32), Hex(proof, 32));
	// No identity at all is allowed; a longer one than the limit is not.
	EXPECT_EQ(zcrpc__auth_proof(key.data(), key.size(), nonce.data(), nullptr, 0, other), 0);
	std::string longid(ZCRPC_IDENTITY_MAX + 1, 'x');
	EXPECT_NE(zcrpc__auth_proof(key.data(), key.size(), nonce.data(), longid.data(),
				    longid.size(), other),
		  0);
}

TEST(Auth, AcceptHelloCarriesTheNonceAfterTheHeader)
{
	zcrpc_hello in = AuthAccept(), out{};
	uint8_t buf[ZCRPC_HELLO_MAX] = {};
	ASSERT_EQ(zcrpc__hello_encode(&in, buf, sizeof(buf)), size_t{ZCRPC_HELLO_AUTH_LEN});
	EXPECT_EQ(buf[6], ZCRPC_HELLO_AUTH_LEN); // length field
	EXPECT_EQ(buf[8] & ZCRPC_FEAT_AUTH, ZCRPC_FEAT_AUTH);
	EXPECT_EQ(std::memcmp(buf + ZCRPC_HELLO_LEN, in.nonce, ZCRPC_HELLO_NONCE_LEN), 0);
	EXPECT_EQ(buf[26], 0x10); // max_write (1 MiB), then the reserved word
	for (size_t i = 28; i < 32; i++)
		EXPECT_EQ(buf[i], 0) << "reserved byte " << i;
	// As the CM delivers it: padded with zeros to 196 bytes.
	ASSERT_EQ(zcrpc__hello_decode(buf, sizeof(buf), &out, nullptr, 0), ZCRPC_OK);
	EXPECT_EQ(out.features, in.features);
	EXPECT_EQ(out.recv_depth, uint32_t{ZCRPC_AUTH_RECV_INITIAL});
	EXPECT_EQ(std::memcmp(out.nonce, in.nonce, ZCRPC_HELLO_NONCE_LEN), 0);

	// Too small a buffer for the nonce: nothing encoded.
	uint8_t small[ZCRPC_HELLO_AUTH_LEN - 1];
	EXPECT_EQ(zcrpc__hello_encode(&in, small, sizeof(small)), 0u);
}

TEST(Auth, ConnectAndRejectNeverCarryANonce)
{
	zcrpc_hello in = AuthAccept(), out{};
	in.kind = ZCRPC_HELLO_CONNECT; // "this client has a key": still 32 bytes
	uint8_t buf[ZCRPC_HELLO_MAX_CONNECT] = {};
	ASSERT_EQ(zcrpc__hello_encode(&in, buf, sizeof(buf)), size_t{ZCRPC_HELLO_LEN});
	ASSERT_EQ(zcrpc__hello_decode(buf, sizeof(buf), &out, nullptr, 0), ZCRPC_OK);
	EXPECT_EQ(out.features & ZCRPC_FEAT_AUTH, ZCRPC_FEAT_AUTH);
	for (uint8_t b : out.nonce)
		EXPECT_EQ(b, 0);
	// A plain ACCEPT (server without a key) is the 32-byte version-1 hello.
	in.kind = ZCRPC_HELLO_ACCEPT;
	in.features = ZCRPC_FEAT_ALL;
	EXPECT_EQ(zcrpc__hello_encode(&in, buf, sizeof(buf)), size_t{ZCRPC_HELLO_LEN});
}

TEST(Auth, AcceptAskingForAuthWithoutRoomForTheNonceIsRejected)
{
	zcrpc_hello in = AuthAccept(), out{};
	uint8_t buf[ZCRPC_HELLO_MAX] = {};
	ASSERT_EQ(zcrpc__hello_encode(&in, buf, sizeof(buf)), size_t{ZCRPC_HELLO_AUTH_LEN});
	char why[160] = "";
	// Length field 32 with the AUTH bit: no nonce.
	buf[6] = ZCRPC_HELLO_LEN;
	EXPECT_EQ(zcrpc__hello_decode(buf, sizeof(buf), &out, why, sizeof(why)),
		  ZCRPC_INVALID_ARGUMENT);
	EXPECT_NE(std::strstr(why, "nonce"), nullptr) << why;
	// Length field 64 but only 40 bytes arrived.
	buf[6] = ZCRPC_HELLO_AUTH_LEN;
	EXPECT_EQ(zcrpc__hello_decode(buf, 40, &out, why, sizeof(why)), ZCRPC_INVALID_ARGUMENT);
	EXPECT_NE(std::strstr(why, "truncated"), nullptr) << why;
}

// T4: the private-data shapes a hostile or broken peer can send.
TEST(Auth, MalformedZeroEmptyAndOversizedPrivateDataAreRejected)
{
	zcrpc_hello out{};
	char why[160];
	uint8_t zeros[ZCRPC_HELLO_MAX] = {};
	EXPECT_EQ(zcrpc__hello_decode(zeros, sizeof(zeros), &out, why, sizeof(why)),
		  ZCRPC_INVALID_ARGUMENT) << "all zeros";
	EXPECT_EQ(zcrpc__hello_decode(zeros, 0, &out, why, sizeof(why)), ZCRPC_INVALID_ARGUMENT)
		<< "0 bytes";
	EXPECT_EQ(zcrpc__hello_decode(nullptr, 0, &out, why, sizeof(why)), ZCRPC_INVALID_ARGUMENT);

	zcrpc_hello in = AuthAccept();
	uint8_t buf[ZCRPC_HELLO_MAX] = {};
	ASSERT_EQ(zcrpc__hello_encode(&in, buf, sizeof(buf)), size_t{ZCRPC_HELLO_AUTH_LEN});
	std::vector<uint8_t> bad(buf, buf + sizeof(buf));
	bad[6] = ZCRPC_HELLO_MAX + 1; // oversized length field
	EXPECT_EQ(zcrpc__hello_decode(bad.data(), bad.size(), &out, why, sizeof(why)),
		  ZCRPC_INVALID_ARGUMENT);
	EXPECT_NE(std::strstr(why, "oversized"), nullptr) << why;
	bad.assign(buf, buf + sizeof(buf));
	bad[4] = 2; // version
	EXPECT_EQ(zcrpc__hello_decode(bad.data(), bad.size(), &out, why, sizeof(why)),
		  ZCRPC_FAILED_PRECONDITION);
	bad.assign(buf, buf + sizeof(buf));
	bad[3] = 'x'; // magic
	EXPECT_EQ(zcrpc__hello_decode(bad.data(), bad.size(), &out, why, sizeof(why)),
		  ZCRPC_INVALID_ARGUMENT);
	// The longest legal hello (196) still decodes, nonce intact.
	bad.assign(buf, buf + sizeof(buf));
	bad[6] = ZCRPC_HELLO_MAX;
	ASSERT_EQ(zcrpc__hello_decode(bad.data(), bad.size(), &out, why, sizeof(why)), ZCRPC_OK);
	EXPECT_EQ(std::memcmp(out.nonce, in.nonce, ZCRPC_HELLO_NONCE_LEN), 0);
}

TEST(Auth, ListenDefaultsBoundHandshakes)
{
	zcrpc_listen_opts lo;
	zcrpc_listen_opts_init(&lo);
	EXPECT_EQ(lo.max_handshakes, 128u);
	EXPECT_EQ(lo.handshake_timeout_ms, 10000);
	EXPECT_EQ(lo.psk, nullptr);
	zcrpc_connect_opts co;
	zcrpc_connect_opts_init(&co);
	EXPECT_EQ(co.psk, nullptr);
	EXPECT_EQ(co.identity, nullptr);
}
