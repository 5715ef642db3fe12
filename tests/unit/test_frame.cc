// The RPC frame header codec, the metadata codec and the method-id hash.
#include <cstdint>
#include <cstdio>

#include <dirent.h>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "rpc/frame.h"

namespace {

// A frame of @type with sensible fields for that type and no body.
zcrpc_frame Sample(uint8_t type)
{
	zcrpc_frame f{};
	f.type = type;
	f.call_id = 0x01020304;
	switch (type) {
	case ZCRPC_FRAME_REQUEST:
		f.method_id = zcrpc__fnv1a("/pkg.Svc/Echo");
		f.deadline_us = 250000;
		break;
	case ZCRPC_FRAME_REPLY:
		f.status = ZCRPC_NOT_FOUND;
		break;
	case ZCRPC_FRAME_BULK_GRANT:
		f.bulk_addr = 0x00007f0012340000ULL;
		f.bulk_len = 1 << 20;
		f.bulk_rkey = 0xabcdef01;
		f.bulk_token = 77;
		break;
	default:
		break;
	}
	return f;
}

// Header of @f followed by @md and @payload; md_len and payload_len are
// taken from @f as given (so a test can make them lie).
std::vector<uint8_t> Build(const zcrpc_frame &f, const std::vector<uint8_t> &md = {},
			   const std::vector<uint8_t> &payload = {})
{
	std::vector<uint8_t> buf(ZCRPC_FRAME_HDR_LEN);
	zcrpc__frame_encode(&f, buf.data());
	buf.insert(buf.end(), md.begin(), md.end());
	buf.insert(buf.end(), payload.begin(), payload.end());
	return buf;
}

// A frame whose lengths match its body.
std::vector<uint8_t> BuildFitting(zcrpc_frame f, const std::vector<uint8_t> &md = {},
				  const std::vector<uint8_t> &payload = {})
{
	f.md_len = static_cast<uint16_t>(md.size());
	f.payload_len = static_cast<uint32_t>(payload.size());
	return Build(f, md, payload);
}

std::vector<uint8_t> EncodeMd(const std::vector<std::pair<std::string, std::string>> &kv)
{
	std::vector<zcrpc_md_view> v;
	for (const auto &p : kv)
		v.push_back({reinterpret_cast<const uint8_t *>(p.first.data()), p.first.size(),
			     reinterpret_cast<const uint8_t *>(p.second.data()), p.second.size()});
	size_t n = zcrpc__md_size(v.data(), v.size());
	std::vector<uint8_t> out(n);
	if (n)
		zcrpc__md_encode(v.data(), v.size(), out.data());
	return out;
}

// Decodes @buf; expects a rejection whose reason contains @needle.
void ExpectReject(const std::vector<uint8_t> &buf, const char *needle, size_t len = SIZE_MAX)
{
	zcrpc_frame out{};
	char why[256] = "";
	if (len == SIZE_MAX)
		len = buf.size();
	EXPECT_EQ(zcrpc__frame_decode(buf.data(), len, &out, why, sizeof(why)),
		  ZCRPC_INVALID_ARGUMENT)
		<< "expected a rejection mentioning \"" << needle << "\"";
	EXPECT_NE(std::strstr(why, needle), nullptr) << "reason: \"" << why << "\"";
}

zcrpc_status Decode(const std::vector<uint8_t> &buf, zcrpc_frame *out = nullptr)
{
	zcrpc_frame tmp{};
	return zcrpc__frame_decode(buf.data(), buf.size(), out ? out : &tmp, nullptr, 0);
}

const uint8_t kAllTypes[] = {ZCRPC_FRAME_REQUEST, ZCRPC_FRAME_REPLY, ZCRPC_FRAME_CANCEL,
			     ZCRPC_FRAME_GOAWAY, ZCRPC_FRAME_BULK_GRANT};

} // namespace

// ---- layout and round trips ------------------------------------------------

TEST(Frame, HeaderIsLittleEndianAtTheDocumentedOffsets)
{
	zcrpc_frame f{};
	f.type = ZCRPC_FRAME_REQUEST;
	f.flags = ZCRPC_FRAME_F_BULK;
	f.md_len = 0x0203;
	f.call_id = 0x04050607;
	f.method_id = 0x08090a0b;
	f.status = 0x0c0d0e0f;
	f.payload_len = 0x10111213;
	f.deadline_us = 0x14151617;
	f.bulk_addr = 0x18191a1b1c1d1e1fULL;
	f.bulk_len = 0x2021222324252627ULL;
	f.bulk_rkey = 0x28292a2b;
	f.bulk_token = 0x2c2d2e2f;
	std::vector<uint8_t> b(ZCRPC_FRAME_HDR_LEN, 0xee);
	zcrpc__frame_encode(&f, b.data());
	const uint8_t want[ZCRPC_FRAME_HDR_LEN] = {
		'z', 'r', ZCRPC_FRAME_VERSION, ZCRPC_FRAME_REQUEST, 0x01, 0x00, 0x03, 0x02,
		0x07, 0x06, 0x05, 0x04, 0, 0, 0, 0,
		0x0b, 0x0a, 0x09, 0x08, 0x0f, 0x0e, 0x0d, 0x0c,
		0x13, 0x12, 0x11, 0x10, 0x17, 0x16, 0x15, 0x14,
		0x1f, 0x1e, 0x1d, 0x1c, 0x1b, 0x1a, 0x19, 0x18,
		0x27, 0x26, 0x25, 0x24, 0x23, 0x22, 0x21, 0x20,
		0x2b, 0x2a, 0x29, 0x28, 0x2f, 0x2e, 0x2d, 0x2c,
		0, 0, 0, 0, 0, 0, 0, 0};
	for (size_t i = 0; i < sizeof(want); i++)
		EXPECT_EQ(b[i], want[i]) << "byte " << i;
}

TEST(Frame, EveryTypeRoundTripsWithMetadataAndPayload)
{
	const auto md = EncodeMd({{"authorization", "Bearer x"}, {"trace-id", "0af7651916cd43dd"}});
	ASSERT_FALSE(md.empty());
	const std::vector<uint8_t> payload = {1, 2, 3, 4, 5, 0, 0xff};
	for (uint8_t type : kAllTypes) {
		SCOPED_TRACE("type " + std::to_string(type));
		zcrpc_frame in = Sample(type);
		// A grant carries no body; every other type carries both.
		const bool body = type != ZCRPC_FRAME_BULK_GRANT;
		auto buf = BuildFitting(in, body ? md : std::vector<uint8_t>{},
					body ? payload : std::vector<uint8_t>{});
		zcrpc_frame out;
		std::memset(&out, 0x5a, sizeof(out));
		char why[128] = "";
		ASSERT_EQ(zcrpc__frame_decode(buf.data(), buf.size(), &out, why, sizeof(why)),
			  ZCRPC_OK)
			<< why;
		EXPECT_EQ(out.type, type);
		EXPECT_EQ(out.flags, 0);
		EXPECT_EQ(out.call_id, in.call_id);
		EXPECT_EQ(out.method_id, in.method_id);
		EXPECT_EQ(out.status, in.status);
		EXPECT_EQ(out.deadline_us, in.deadline_us);
		EXPECT_EQ(out.bulk_addr, in.bulk_addr);
		EXPECT_EQ(out.bulk_len, in.bulk_len);
		EXPECT_EQ(out.bulk_rkey, in.bulk_rkey);
		EXPECT_EQ(out.bulk_token, in.bulk_token);
		EXPECT_EQ(out.md_len, body ? md.size() : 0u);
		EXPECT_EQ(out.payload_len, body ? payload.size() : 0u);
		EXPECT_EQ(out.md, buf.data() + ZCRPC_FRAME_HDR_LEN);
		EXPECT_EQ(out.payload, out.md + out.md_len);
		if (body) {
			EXPECT_EQ(std::memcmp(out.md, md.data(), md.size()), 0);
			EXPECT_EQ(std::memcmp(out.payload, payload.data(), payload.size()), 0);
		}
		// Encoding the decoded header gives back the same bytes.
		std::vector<uint8_t> again(ZCRPC_FRAME_HDR_LEN);
		zcrpc__frame_encode(&out, again.data());
		EXPECT_EQ(std::memcmp(again.data(), buf.data(), ZCRPC_FRAME_HDR_LEN), 0);
	}
}

TEST(Frame, BulkRequestAndReplyRoundTrip)
{
	for (uint8_t type : {ZCRPC_FRAME_REQUEST, ZCRPC_FRAME_REPLY}) {
		zcrpc_frame in = Sample(type);
		in.flags = ZCRPC_FRAME_F_BULK;
		in.bulk_len = 12345;
		if (type == ZCRPC_FRAME_REPLY)
			in.bulk_token = 10; /* the server's call reference */
		auto buf = BuildFitting(in, {}, {42});
		zcrpc_frame out{};
		ASSERT_EQ(Decode(buf, &out), ZCRPC_OK) << "type " << int(type);
		EXPECT_EQ(out.flags, ZCRPC_FRAME_F_BULK);
		EXPECT_EQ(out.bulk_len, 12345u);
		EXPECT_EQ(out.bulk_token, type == ZCRPC_FRAME_REPLY ? 10u : 0u);
		EXPECT_EQ(out.payload[0], 42);
	}
}

TEST(Frame, EmptyBodyAndPayloadOnlyFramesDecode)
{
	zcrpc_frame out{};
	auto buf = BuildFitting(Sample(ZCRPC_FRAME_CANCEL));
	ASSERT_EQ(buf.size(), size_t{ZCRPC_FRAME_HDR_LEN});
	ASSERT_EQ(Decode(buf, &out), ZCRPC_OK);
	EXPECT_EQ(out.md_len, 0);
	EXPECT_EQ(out.payload_len, 0u);

	buf = BuildFitting(Sample(ZCRPC_FRAME_REQUEST), {}, std::vector<uint8_t>(1000, 7));
	ASSERT_EQ(Decode(buf, &out), ZCRPC_OK);
	EXPECT_EQ(out.md_len, 0);
	EXPECT_EQ(out.payload_len, 1000u);
	EXPECT_EQ(out.payload, buf.data() + ZCRPC_FRAME_HDR_LEN);
}

TEST(Frame, ReplyStatusesWithinTheEnumAreAccepted)
{
	zcrpc_frame f = Sample(ZCRPC_FRAME_REPLY);
	for (uint32_t s = 0; s < ZCRPC_STATUS_COUNT; s++) {
		f.status = s;
		zcrpc_frame out{};
		ASSERT_EQ(Decode(BuildFitting(f), &out), ZCRPC_OK) << "status " << s;
		EXPECT_EQ(out.status, s);
	}
}

TEST(Frame, MetadataAtTheLimitIsAccepted)
{
	// One pair of exactly ZCRPC_MD_MAX_LEN bytes: 3 + 1 + value.
	const auto md = EncodeMd({{"k", std::string(ZCRPC_MD_MAX_LEN - 4, 'v')}});
	ASSERT_EQ(md.size(), size_t{ZCRPC_MD_MAX_LEN});
	zcrpc_frame out{};
	ASSERT_EQ(Decode(BuildFitting(Sample(ZCRPC_FRAME_REQUEST), md, {1}), &out), ZCRPC_OK);
	EXPECT_EQ(out.md_len, ZCRPC_MD_MAX_LEN);
}

TEST(Frame, ReasonIsOptionalAndTruncatedSafely)
{
	auto buf = BuildFitting(Sample(ZCRPC_FRAME_REQUEST));
	buf[0] = 'x';
	zcrpc_frame out{};
	EXPECT_EQ(zcrpc__frame_decode(buf.data(), buf.size(), &out, nullptr, 0),
		  ZCRPC_INVALID_ARGUMENT);
	char why[8];
	std::memset(why, 'Z', sizeof(why));
	EXPECT_EQ(zcrpc__frame_decode(buf.data(), buf.size(), &out, why, 4),
		  ZCRPC_INVALID_ARGUMENT);
	EXPECT_EQ(why[3], '\0');
	EXPECT_EQ(why[4], 'Z') << "wrote past why_len";
	EXPECT_EQ(zcrpc__frame_decode(buf.data(), buf.size(), &out, why, 0),
		  ZCRPC_INVALID_ARGUMENT);
}

// ---- rejections -------------------------------------------------------------

TEST(FrameReject, EveryTruncationBelowTheHeader)
{
	auto buf = BuildFitting(Sample(ZCRPC_FRAME_REQUEST));
	for (size_t len = 0; len < ZCRPC_FRAME_HDR_LEN; len++) {
		SCOPED_TRACE("length " + std::to_string(len));
		// Copy to an exact-size heap buffer so a sanitizer sees over-reads.
		std::vector<uint8_t> cut(buf.begin(), buf.begin() + len);
		ExpectReject(cut, "shorter than its header");
	}
	zcrpc_frame out{};
	EXPECT_EQ(zcrpc__frame_decode(nullptr, 64, &out, nullptr, 0), ZCRPC_INVALID_ARGUMENT);
}

TEST(FrameReject, BadMagic)
{
	for (size_t i : {0, 1}) {
		auto buf = BuildFitting(Sample(ZCRPC_FRAME_REQUEST));
		buf[i] ^= 0x20; // 'z' -> 'Z', 'r' -> 'R'
		ExpectReject(buf, "magic");
	}
	auto buf = BuildFitting(Sample(ZCRPC_FRAME_REQUEST));
	std::swap(buf[0], buf[1]); // big-endian magic
	ExpectReject(buf, "magic");
}

TEST(FrameReject, BadVersion)
{
	for (uint8_t v : {0, ZCRPC_FRAME_VERSION + 1, 0xff}) {
		auto buf = BuildFitting(Sample(ZCRPC_FRAME_REQUEST));
		buf[2] = v;
		ExpectReject(buf, "version");
	}
}

TEST(FrameReject, UnknownType)
{
	for (uint8_t t : {0, ZCRPC_FRAME_TYPE_MAX + 1, 0x7f, 0xff}) {
		zcrpc_frame f = Sample(ZCRPC_FRAME_REQUEST);
		f.type = t;
		ExpectReject(BuildFitting(f), "unknown frame type");
	}
}

TEST(FrameReject, UnknownFlags)
{
	// Every single flag bit outside ZCRPC_FRAME_F_ALL, alone and with the
	// known ones, and all of them.
	int tried = 0;
	for (unsigned bit = 0; bit < 16; bit++) {
		const uint16_t fl = static_cast<uint16_t>(1u << bit);
		if (fl & ZCRPC_FRAME_F_ALL)
			continue;
		for (uint16_t with : {uint16_t{0}, static_cast<uint16_t>(ZCRPC_FRAME_F_ALL)}) {
			zcrpc_frame f = Sample(ZCRPC_FRAME_REQUEST);
			f.flags = static_cast<uint16_t>(fl | with);
			f.bulk_len = 10;
			SCOPED_TRACE("flags " + std::to_string(f.flags));
			ExpectReject(BuildFitting(f), "unknown frame flags");
		}
		tried++;
	}
	EXPECT_GE(tried, 8);
	zcrpc_frame f = Sample(ZCRPC_FRAME_REQUEST);
	f.flags = 0xffff;
	f.bulk_len = 10;
	ExpectReject(BuildFitting(f), "unknown frame flags");
}

TEST(Frame, PayloadInBulkNeedsABulkPartAndNoInlinePayload)
{
	for (uint8_t t : {ZCRPC_FRAME_REQUEST, ZCRPC_FRAME_REPLY}) {
		SCOPED_TRACE("type " + std::to_string(t));
		zcrpc_frame f = Sample(t);
		f.flags = ZCRPC_FRAME_F_BULK | ZCRPC_FRAME_F_PAYLOAD_IN_BULK;
		f.bulk_len = 1 << 24;
		zcrpc_frame out{};
		ASSERT_EQ(Decode(BuildFitting(f, EncodeMd({{"k", "v"}})), &out), ZCRPC_OK);
		EXPECT_EQ(out.flags, ZCRPC_FRAME_F_BULK | ZCRPC_FRAME_F_PAYLOAD_IN_BULK);
		EXPECT_EQ(out.payload_len, 0u);
		// With an inline payload as well.
		ExpectReject(BuildFitting(f, {}, {1}), "payload-in-bulk");
		// Without the bulk flag.
		f.flags = ZCRPC_FRAME_F_PAYLOAD_IN_BULK;
		ExpectReject(BuildFitting(f), "payload-in-bulk");
	}
	zcrpc_frame f = Sample(ZCRPC_FRAME_CANCEL);
	f.flags = ZCRPC_FRAME_F_PAYLOAD_IN_BULK;
	ExpectReject(BuildFitting(f), "payload-in-bulk");
}

TEST(FrameReject, NonZeroReservedFields)
{
	// The 64-bit field at 56, every byte; the 32-bit field at 12 is the
	// window increment, zero on every type but WINDOW.
	for (size_t off : {56, 57, 58, 59, 60, 61, 62, 63}) {
		auto buf = BuildFitting(Sample(ZCRPC_FRAME_REQUEST));
		buf[off] = 1;
		SCOPED_TRACE("offset " + std::to_string(off));
		ExpectReject(buf, "reserved");
	}
	for (uint8_t t = ZCRPC_FRAME_REQUEST; t <= ZCRPC_FRAME_TYPE_MAX; t++) {
		if (t == ZCRPC_FRAME_WINDOW || t == ZCRPC_FRAME_REPLY)
			continue;
		for (size_t off : {12, 13, 14, 15}) {
			auto buf = BuildFitting(Sample(t));
			buf[off] = 1;
			SCOPED_TRACE("type " + std::to_string(t) + " offset " + std::to_string(off));
			ExpectReject(buf, "count field on a frame");
		}
	}
}

// A unary REPLY's count names its first metadata pairs as the server's
// initial metadata: at most all of them, never on a stream's end.
TEST(FrameReply, InitialMetadataCountIsWithinItsPairs)
{
	const auto md = EncodeMd({{"i", "1"}, {"t", "2"}});
	zcrpc_frame f = Sample(ZCRPC_FRAME_REPLY);
	f.status = 0;
	for (uint32_t c : {0u, 1u, 2u}) {
		f.count = c;
		auto buf = BuildFitting(f, md);
		zcrpc_frame out{};
		char why[256] = "";
		ASSERT_EQ(zcrpc__frame_decode(buf.data(), buf.size(), &out, why, sizeof(why)), ZCRPC_OK)
			<< why;
		EXPECT_EQ(out.count, c);
	}
	f.count = 3;
	ExpectReject(BuildFitting(f, md), "reply names 3 initial metadata pairs of 2");
	f.count = 1;
	ExpectReject(BuildFitting(f), "reply names 1 initial metadata pairs of 0");
	f.flags = ZCRPC_FRAME_F_STREAM;
	ExpectReject(BuildFitting(f, md), "count field on a frame of type 2");
}

// Streams (docs/protocol.md §8): what each of their frames may carry.
TEST(FrameStream, EachStreamFrameDecodesWithWhatItMayCarry)
{
	const auto md = EncodeMd({{"k", "v"}});
	const std::vector<uint8_t> body = {1, 2, 3};
	struct Case {
		uint8_t type;
		uint16_t flags;
		bool md, payload;
	} ok[] = {
		{ZCRPC_FRAME_REQUEST, ZCRPC_FRAME_F_STREAM, true, false},
		{ZCRPC_FRAME_REPLY, ZCRPC_FRAME_F_STREAM, true, true},
		{ZCRPC_FRAME_CANCEL, ZCRPC_FRAME_F_STREAM, false, false},
		{ZCRPC_FRAME_MESSAGE, 0, false, true},
		{ZCRPC_FRAME_MESSAGE, 0, false, false}, // an empty message
		{ZCRPC_FRAME_HEADERS, 0, true, false},
		{ZCRPC_FRAME_HALF_CLOSE, 0, false, false},
	};
	for (const auto &c : ok) {
		zcrpc_frame f = Sample(c.type);
		f.flags = c.flags;
		auto buf = BuildFitting(f, c.md ? md : std::vector<uint8_t>{},
					c.payload ? body : std::vector<uint8_t>{});
		zcrpc_frame out{};
		char why[256] = "";
		SCOPED_TRACE("type " + std::to_string(c.type));
		ASSERT_EQ(zcrpc__frame_decode(buf.data(), buf.size(), &out, why, sizeof(why)),
			  ZCRPC_OK)
			<< why;
		EXPECT_EQ(out.type, c.type);
		EXPECT_EQ(out.flags, c.flags);
		EXPECT_EQ(out.call_id, 0x01020304u);
		EXPECT_EQ(out.md_len, c.md ? md.size() : 0u);
		EXPECT_EQ(out.payload_len, c.payload ? body.size() : 0u);
	}
	zcrpc_frame w = Sample(ZCRPC_FRAME_WINDOW);
	w.count = 8;
	auto buf = BuildFitting(w);
	zcrpc_frame out{};
	char why[256] = "";
	ASSERT_EQ(zcrpc__frame_decode(buf.data(), buf.size(), &out, why, sizeof(why)), ZCRPC_OK)
		<< why;
	EXPECT_EQ(out.count, 8u);
}

TEST(FrameStream, BrokenStreamFramesAreRefusedWithTheirReason)
{
	const auto md = EncodeMd({{"k", "v"}});
	const std::vector<uint8_t> body = {1};
	zcrpc_frame f;

	f = Sample(ZCRPC_FRAME_WINDOW); // adds nothing
	ExpectReject(BuildFitting(f), "window frame adding no messages");
	f = Sample(ZCRPC_FRAME_WINDOW);
	f.count = 1;
	ExpectReject(BuildFitting(f, {}, body), "body on a frame");
	f = Sample(ZCRPC_FRAME_HALF_CLOSE);
	ExpectReject(BuildFitting(f, md), "body on a frame");
	f = Sample(ZCRPC_FRAME_MESSAGE);
	ExpectReject(BuildFitting(f, md, body), "metadata on a stream message");
	f = Sample(ZCRPC_FRAME_HEADERS);
	ExpectReject(BuildFitting(f, md, body), "payload on a headers frame");
	f = Sample(ZCRPC_FRAME_REQUEST);
	f.flags = ZCRPC_FRAME_F_STREAM;
	ExpectReject(BuildFitting(f, {}, body), "opening request carries a payload");
	f = Sample(ZCRPC_FRAME_REQUEST);
	f.flags = ZCRPC_FRAME_F_STREAM | ZCRPC_FRAME_F_BULK;
	f.bulk_len = 4096;
	ExpectReject(BuildFitting(f), "bulk part on a stream's frame");
	for (uint8_t t : {ZCRPC_FRAME_GOAWAY, ZCRPC_FRAME_MESSAGE, ZCRPC_FRAME_WINDOW,
			  ZCRPC_FRAME_HEADERS, ZCRPC_FRAME_HALF_CLOSE}) {
		f = Sample(t);
		f.flags = ZCRPC_FRAME_F_STREAM;
		if (t == ZCRPC_FRAME_WINDOW) // (its count must not be what fails it)
			f.count = 1;
		SCOPED_TRACE("type " + std::to_string(t));
		ExpectReject(BuildFitting(f), "stream flag on frame type");
	}
	// A client's large message by RDMA WRITE: MESSAGE with BULK and its
	// length, no inline payload, not a piece; its grant carries STREAM.
	f = Sample(ZCRPC_FRAME_MESSAGE);
	f.flags = ZCRPC_FRAME_F_BULK;
	f.bulk_len = 1 << 20;
	{
		auto ok = BuildFitting(f);
		zcrpc_frame o{};
		char w[256] = "";
		EXPECT_EQ(zcrpc__frame_decode(ok.data(), ok.size(), &o, w, sizeof(w)), ZCRPC_OK) << w;
		EXPECT_EQ(o.bulk_len, uint64_t(1) << 20);
		// A server's names its record in the bulk token (the client's
		// grant names it back), as a bulk reply does.
		f.bulk_token = 77;
		ok = BuildFitting(f);
		EXPECT_EQ(zcrpc__frame_decode(ok.data(), ok.size(), &o, w, sizeof(w)), ZCRPC_OK) << w;
		EXPECT_EQ(o.bulk_token, 77u);
		f = Sample(ZCRPC_FRAME_BULK_GRANT);
		f.flags = ZCRPC_FRAME_F_STREAM;
		ok = BuildFitting(f);
		EXPECT_EQ(zcrpc__frame_decode(ok.data(), ok.size(), &o, w, sizeof(w)), ZCRPC_OK) << w;
		EXPECT_EQ(o.flags, ZCRPC_FRAME_F_STREAM);
	}
	f = Sample(ZCRPC_FRAME_MESSAGE);
	f.bulk_token = 5; // a token without a bulk part names nothing
	ExpectReject(BuildFitting(f), "bulk token outside");
	f = Sample(ZCRPC_FRAME_MESSAGE);
	f.flags = ZCRPC_FRAME_F_BULK;
	f.bulk_len = 4096;
	ExpectReject(BuildFitting(f, {}, body), "by RDMA WRITE with an inline payload");
	f.flags = ZCRPC_FRAME_F_BULK | ZCRPC_FRAME_F_MORE;
	ExpectReject(BuildFitting(f), "by RDMA WRITE with an inline payload or a piece flag");
	f.flags = ZCRPC_FRAME_F_BULK;
	f.bulk_len = 0;
	ExpectReject(BuildFitting(f), "bulk length 0 out of range");
	for (uint8_t t : {ZCRPC_FRAME_WINDOW, ZCRPC_FRAME_HEADERS, ZCRPC_FRAME_HALF_CLOSE}) {
		f = Sample(t);
		f.count = t == ZCRPC_FRAME_WINDOW ? 1 : 0;
		f.flags = ZCRPC_FRAME_F_BULK;
		f.bulk_len = 4096;
		SCOPED_TRACE("bulk on type " + std::to_string(t));
		ExpectReject(BuildFitting(f), "bulk flag on frame type");
	}
	// A piece of a large message (MORE): on a MESSAGE only, never empty.
	f = Sample(ZCRPC_FRAME_MESSAGE);
	f.flags = ZCRPC_FRAME_F_MORE;
	ExpectReject(BuildFitting(f), "an empty piece of a message");
	auto piece = BuildFitting(f, {}, body);
	zcrpc_frame out{};
	char why[256] = "";
	EXPECT_EQ(zcrpc__frame_decode(piece.data(), piece.size(), &out, why, sizeof(why)), ZCRPC_OK)
		<< why;
	EXPECT_EQ(out.flags, ZCRPC_FRAME_F_MORE);
	for (uint8_t t : {ZCRPC_FRAME_REQUEST, ZCRPC_FRAME_REPLY, ZCRPC_FRAME_HEADERS}) {
		f = Sample(t);
		f.flags = ZCRPC_FRAME_F_MORE;
		SCOPED_TRACE("type " + std::to_string(t));
		ExpectReject(BuildFitting(f), "more flag on frame type");
	}
}

TEST(FrameReject, LengthsBeyondTheSlot)
{
	// The header claims more body than the buffer holds: metadata, payload
	// or both reach past the end.
	const auto md = EncodeMd({{"a", "b"}});
	zcrpc_frame f = Sample(ZCRPC_FRAME_REQUEST);
	f.md_len = static_cast<uint16_t>(md.size());
	f.payload_len = 10;
	auto buf = Build(f, md, std::vector<uint8_t>(9)); // one byte short
	ExpectReject(buf, "disagree");

	f.md_len = static_cast<uint16_t>(md.size() + 1);
	f.payload_len = 0;
	ExpectReject(Build(f, md), "disagree");

	f.md_len = 0;
	f.payload_len = 0xffffffff;
	ExpectReject(Build(f, {}, {1, 2, 3}), "disagree");

	f.md_len = 0xffff;
	f.payload_len = 0xffffffff;
	ExpectReject(Build(f), "disagree");

	// Same bytes, a shorter len: the frame is cut mid-payload.
	auto good = BuildFitting(Sample(ZCRPC_FRAME_REQUEST), md, {1, 2, 3, 4});
	ExpectReject(good, "disagree", good.size() - 1);
	ExpectReject(good, "disagree", ZCRPC_FRAME_HDR_LEN);
}

TEST(FrameReject, LengthsShorterThanTheBuffer)
{
	// Trailing bytes the header does not account for.
	const auto md = EncodeMd({{"a", "b"}});
	zcrpc_frame f = Sample(ZCRPC_FRAME_REPLY);
	f.md_len = static_cast<uint16_t>(md.size());
	f.payload_len = 3;
	ExpectReject(Build(f, md, {1, 2, 3, 4}), "disagree");
	f.md_len = 0;
	f.payload_len = 0;
	ExpectReject(Build(f, {}, {0}), "disagree");
}

TEST(FrameReject, MetadataOverTheLimit)
{
	// Well formed, but one byte over ZCRPC_MD_MAX_LEN.
	std::vector<uint8_t> md(ZCRPC_MD_MAX_LEN + 1);
	md[0] = 1;
	md[1] = static_cast<uint8_t>((ZCRPC_MD_MAX_LEN + 1 - 4) & 0xff);
	md[2] = static_cast<uint8_t>((ZCRPC_MD_MAX_LEN + 1 - 4) >> 8);
	md[3] = 'k';
	ExpectReject(BuildFitting(Sample(ZCRPC_FRAME_REQUEST), md), "exceeds");
	std::vector<uint8_t> big(0xffff, 0);
	ExpectReject(BuildFitting(Sample(ZCRPC_FRAME_REQUEST), big), "exceeds");
}

TEST(FrameReject, MalformedMetadata)
{
	const zcrpc_frame f = Sample(ZCRPC_FRAME_REQUEST);
	// Zero key length.
	ExpectReject(BuildFitting(f, {0, 1, 0, 'v'}), "malformed metadata");
	// Value running past the end of the metadata (into the payload).
	ExpectReject(BuildFitting(f, {1, 5, 0, 'k', 'v'}, {1, 2, 3, 4}), "malformed metadata");
	// ... by less than the key's length: value bound must count the key.
	ExpectReject(BuildFitting(f, {3, 2, 0, 'a', 'b', 'c', 'd'}, {9, 9}), "malformed metadata");
	// Key running past the end.
	ExpectReject(BuildFitting(f, {9, 0, 0, 'k'}), "malformed metadata");
	// A pair header cut short (fewer than 3 bytes left).
	ExpectReject(BuildFitting(f, {1, 0, 0, 'k', 1, 0}), "malformed metadata");
	// 17 pairs of "k" -> "".
	std::vector<uint8_t> md;
	for (int i = 0; i < ZCRPC_MD_MAX_PAIRS + 1; i++)
		md.insert(md.end(), {1, 0, 0, 'k'});
	ExpectReject(BuildFitting(f, md), "malformed metadata");
	// ... while 16 are fine.
	md.resize(md.size() - 4);
	EXPECT_EQ(Decode(BuildFitting(f, md)), ZCRPC_OK);
}

TEST(FrameReject, ReplyStatusOutsideTheEnum)
{
	for (uint32_t s : {uint32_t{ZCRPC_STATUS_COUNT}, 18u, 0x80000000u, 0xffffffffu}) {
		zcrpc_frame f = Sample(ZCRPC_FRAME_REPLY);
		f.status = s;
		ExpectReject(BuildFitting(f), "not a status code");
	}
}

TEST(FrameReject, BulkFlagOnCancelGoawayAndGrant)
{
	for (uint8_t t : {ZCRPC_FRAME_CANCEL, ZCRPC_FRAME_GOAWAY, ZCRPC_FRAME_BULK_GRANT}) {
		zcrpc_frame f = Sample(t);
		f.flags = ZCRPC_FRAME_F_BULK;
		f.bulk_len = 4096;
		f.bulk_addr = 0x10000;
		ExpectReject(BuildFitting(f), "bulk flag on frame type");
	}
}

TEST(FrameReject, BulkLengthZeroOrOverFourGiB)
{
	for (uint8_t t : {ZCRPC_FRAME_REQUEST, ZCRPC_FRAME_REPLY}) {
		SCOPED_TRACE("type " + std::to_string(t));
		zcrpc_frame f = Sample(t);
		f.flags = ZCRPC_FRAME_F_BULK;
		for (uint64_t len : {uint64_t{0}, uint64_t{ZCRPC_BULK_MAX + 1}, uint64_t{1} << 40,
				     ~uint64_t{0}}) {
			f.bulk_len = len;
			ExpectReject(BuildFitting(f), "bulk length");
		}
		f.bulk_len = ZCRPC_BULK_MAX; // exactly 4 GiB is allowed
		EXPECT_EQ(Decode(BuildFitting(f)), ZCRPC_OK);
		f.bulk_len = 1;
		EXPECT_EQ(Decode(BuildFitting(f)), ZCRPC_OK);
	}
}

TEST(FrameReject, GrantWithABadRegion)
{
	zcrpc_frame f = Sample(ZCRPC_FRAME_BULK_GRANT);
	// Wraps around 2^64.
	f.bulk_addr = ~uint64_t{0} - 100;
	f.bulk_len = 4096;
	ExpectReject(BuildFitting(f), "grant of a bad region");
	f.bulk_addr = ~uint64_t{0};
	f.bulk_len = 2;
	ExpectReject(BuildFitting(f), "grant of a bad region");
	// Empty, or over 4 GiB.
	f.bulk_addr = 0x1000;
	f.bulk_len = 0;
	ExpectReject(BuildFitting(f), "grant of a bad region");
	f.bulk_len = ZCRPC_BULK_MAX + 1;
	ExpectReject(BuildFitting(f), "grant of a bad region");
	// Up to the last byte below 2^64 is fine, and so is 4 GiB.
	f.bulk_len = 4096;
	f.bulk_addr = ~uint64_t{0} - 4096;
	EXPECT_EQ(Decode(BuildFitting(f)), ZCRPC_OK);
	f.bulk_addr = 0x1000;
	f.bulk_len = ZCRPC_BULK_MAX;
	EXPECT_EQ(Decode(BuildFitting(f)), ZCRPC_OK);
}

TEST(FrameReject, GrantWithABody)
{
	const zcrpc_frame f = Sample(ZCRPC_FRAME_BULK_GRANT);
	ExpectReject(BuildFitting(f, {}, {1}), "grant with a body");
	ExpectReject(BuildFitting(f, EncodeMd({{"k", "v"}})), "grant with a body");
	EXPECT_EQ(Decode(BuildFitting(f)), ZCRPC_OK);
}

TEST(FrameReject, DecodeNeverAcceptsAByteFlipOfTheFixedFields)
{
	// Every single-bit flip of magic, version and reserved bytes is refused.
	auto good = BuildFitting(Sample(ZCRPC_FRAME_REQUEST));
	for (size_t off : {0, 1, 2, 12, 13, 14, 15, 56, 57, 58, 59, 60, 61, 62, 63})
		for (int bit = 0; bit < 8; bit++) {
			auto buf = good;
			buf[off] ^= static_cast<uint8_t>(1u << bit);
			EXPECT_EQ(Decode(buf), ZCRPC_INVALID_ARGUMENT)
				<< "offset " << off << " bit " << bit;
		}
}

// ---- metadata codec ---------------------------------------------------------

TEST(Metadata, EncodeDecodeRoundTrip)
{
	const std::vector<std::pair<std::string, std::string>> kv = {
		{"k", ""}, {"content-type", "application/x-protobuf"},
		{std::string(255, 'K'), std::string(300, '\0')}, {"x", "y"}};
	auto buf = EncodeMd(kv);
	size_t want = 0;
	for (const auto &p : kv)
		want += 3 + p.first.size() + p.second.size();
	ASSERT_EQ(buf.size(), want);
	EXPECT_EQ(buf[0], 1);     // key length
	EXPECT_EQ(buf[1], 0);     // value length, LE
	EXPECT_EQ(buf[2], 0);
	EXPECT_EQ(buf[3], 'k');
	EXPECT_EQ(buf[4], 12);
	EXPECT_EQ(buf[5], 22);
	EXPECT_EQ(buf[6], 0);

	zcrpc_md_view out[ZCRPC_MD_MAX_PAIRS];
	ASSERT_EQ(zcrpc__md_decode(buf.data(), buf.size(), out), static_cast<int>(kv.size()));
	for (size_t i = 0; i < kv.size(); i++) {
		SCOPED_TRACE("pair " + std::to_string(i));
		EXPECT_EQ(std::string(reinterpret_cast<const char *>(out[i].key), out[i].key_len),
			  kv[i].first);
		EXPECT_EQ(std::string(reinterpret_cast<const char *>(out[i].value),
				      out[i].value_len),
			  kv[i].second);
		EXPECT_GE(out[i].key, buf.data());
		EXPECT_LE(out[i].value + out[i].value_len, buf.data() + buf.size());
	}
}

TEST(Metadata, EmptyDecodesToNoPairs)
{
	zcrpc_md_view out[ZCRPC_MD_MAX_PAIRS];
	uint8_t dummy = 0;
	EXPECT_EQ(zcrpc__md_decode(&dummy, 0, out), 0);
}

TEST(Metadata, DecodeRejectsMalformedInput)
{
	zcrpc_md_view out[ZCRPC_MD_MAX_PAIRS];
	const std::vector<std::vector<uint8_t>> bad = {
		{1},                 // cut in the pair header
		{1, 0},              // likewise
		{0, 0, 0},           // zero key length
		{0, 1, 0, 'v'},      // zero key length with a value
		{2, 0, 0, 'k'},      // key past the end
		{1, 2, 0, 'k', 'v'}, // value past the end
		{1, 0xff, 0xff, 'k'},
		{3, 2, 0, 'a', 'b', 'c', 'd'}, // value past the end by < key length
		{1, 0, 0, 'k', 0},   // trailing garbage after a good pair
	};
	for (size_t i = 0; i < bad.size(); i++)
		EXPECT_EQ(zcrpc__md_decode(bad[i].data(), bad[i].size(), out), -1) << "case " << i;
	std::vector<uint8_t> many;
	for (int i = 0; i < ZCRPC_MD_MAX_PAIRS; i++)
		many.insert(many.end(), {1, 0, 0, 'k'});
	EXPECT_EQ(zcrpc__md_decode(many.data(), many.size(), out), ZCRPC_MD_MAX_PAIRS);
	many.insert(many.end(), {1, 0, 0, 'k'});
	EXPECT_EQ(zcrpc__md_decode(many.data(), many.size(), out), -1);
}

TEST(Metadata, SizeLimits)
{
	const uint8_t key[256] = {'k'};
	static const uint8_t value[0x10000] = {};
	zcrpc_md_view p[ZCRPC_MD_MAX_PAIRS + 1] = {};
	for (auto &v : p)
		v = {key, 1, value, 0};

	EXPECT_EQ(zcrpc__md_size(p, 0), 0u) << "no pairs, no metadata";
	EXPECT_EQ(zcrpc__md_size(p, 1), 4u);
	EXPECT_EQ(zcrpc__md_size(p, ZCRPC_MD_MAX_PAIRS), 4u * ZCRPC_MD_MAX_PAIRS);
	EXPECT_EQ(zcrpc__md_size(p, ZCRPC_MD_MAX_PAIRS + 1), 0u) << "17 pairs";

	p[0].key_len = 0;
	EXPECT_EQ(zcrpc__md_size(p, 1), 0u) << "empty key";
	p[0].key_len = 255;
	EXPECT_EQ(zcrpc__md_size(p, 1), 258u);
	p[0].key_len = 256;
	EXPECT_EQ(zcrpc__md_size(p, 1), 0u) << "key over 255 bytes";
	p[0].key_len = 1;

	// Total exactly ZCRPC_MD_MAX_LEN, then one over.
	p[0].value_len = ZCRPC_MD_MAX_LEN - 4;
	EXPECT_EQ(zcrpc__md_size(p, 1), size_t{ZCRPC_MD_MAX_LEN});
	p[0].value_len++;
	EXPECT_EQ(zcrpc__md_size(p, 1), 0u) << "over ZCRPC_MD_MAX_LEN";
	p[0].value_len = ZCRPC_MD_MAX_LEN - 8;
	EXPECT_EQ(zcrpc__md_size(p, 2), size_t{ZCRPC_MD_MAX_LEN});
	p[1].value_len = 1;
	EXPECT_EQ(zcrpc__md_size(p, 2), 0u) << "two pairs over ZCRPC_MD_MAX_LEN";
	p[1].value_len = 0;

	// A value of 64 KiB cannot be encoded at all (its length is a u16).
	p[0].value_len = 0x10000;
	EXPECT_EQ(zcrpc__md_size(p, 1), 0u);
	p[0].value_len = 0xffff; // encodable length, but over the total limit
	EXPECT_EQ(zcrpc__md_size(p, 1), 0u);
}

TEST(Metadata, EncodeWritesExactlyTheComputedSize)
{
	const uint8_t k[] = {'a', 'b'}, v[] = {'c', 'd', 'e'};
	zcrpc_md_view p[2] = {{k, 2, v, 3}, {k, 1, nullptr, 0}};
	size_t n = zcrpc__md_size(p, 2);
	ASSERT_EQ(n, 3u + 2 + 3 + 3 + 1);
	std::vector<uint8_t> buf(n + 4, 0xcc);
	zcrpc__md_encode(p, 2, buf.data());
	const uint8_t want[] = {2, 3, 0, 'a', 'b', 'c', 'd', 'e', 1, 0, 0, 'a'};
	ASSERT_EQ(n, sizeof(want));
	EXPECT_EQ(std::memcmp(buf.data(), want, sizeof(want)), 0);
	for (size_t i = n; i < buf.size(); i++)
		EXPECT_EQ(buf[i], 0xcc) << "wrote past the size at " << i;
}

// (The method id hash, FNV-1a: test_fnv.cc.)

TEST(FrameReject, FieldsATypeDoesNotUse)
{
	zcrpc_frame f = Sample(ZCRPC_FRAME_CANCEL);
	f.status = 3;
	ExpectReject(BuildFitting(f), "status on a frame");
	f = Sample(ZCRPC_FRAME_GOAWAY);
	f.deadline_us = 5;
	ExpectReject(BuildFitting(f), "deadline or method");
	f = Sample(ZCRPC_FRAME_REPLY);
	f.method_id = 7;
	ExpectReject(BuildFitting(f), "deadline or method");
	f = Sample(ZCRPC_FRAME_REQUEST);
	f.bulk_addr = 0x1000;
	f.flags = ZCRPC_FRAME_F_BULK;
	f.bulk_len = 10;
	ExpectReject(BuildFitting(f), "bulk address or key");
	f = Sample(ZCRPC_FRAME_REQUEST);
	f.bulk_len = 10; /* no bulk flag */
	ExpectReject(BuildFitting(f), "bulk length without");
	f = Sample(ZCRPC_FRAME_REQUEST);
	f.flags = ZCRPC_FRAME_F_BULK;
	f.bulk_len = 10;
	f.bulk_token = 4; /* only a grant or a bulk reply carries one */
	ExpectReject(BuildFitting(f), "bulk token");
}

// The frame fuzzer's seeds (tests/fuzz/make_corpus.py) are named for what
// the decoder does with them: "ok-*" decode, "bad-*" are refused (the
// "md-raw-*" seeds are bare metadata, refused as frames).
TEST(FrameCorpus, EverySeedDecodesAsItsNameSays)
{
	DIR *d = opendir(ZCRPC_FRAME_CORPUS);
	ASSERT_NE(d, nullptr) << ZCRPC_FRAME_CORPUS;
	int ok = 0, bad = 0, batches = 0;
	while (struct dirent *e = readdir(d)) {
		std::string name = e->d_name;
		if (name[0] == '.')
			continue;
		FILE *f = std::fopen((std::string(ZCRPC_FRAME_CORPUS) + "/" + name).c_str(), "rb");
		ASSERT_NE(f, nullptr) << name;
		std::vector<uint8_t> buf(1 << 16);
		size_t n = std::fread(buf.data(), 1, buf.size(), f);
		std::fclose(f);
		zcrpc_frame out{};
		char why[256] = "";
		zcrpc_status st = zcrpc__frame_decode(buf.data(), n, &out, why, sizeof(why));
		if (name.rfind("ok-", 0) == 0) {
			EXPECT_EQ(st, ZCRPC_OK) << name << ": " << why;
			ok++;
		} else if (name.rfind("batch-", 0) == 0) {
			// A batch: refused whole, walked frame by frame.
			EXPECT_NE(st, ZCRPC_OK) << name;
			size_t off = 0, used = 0;
			zcrpc_status bst = ZCRPC_OK;
			while (off < n && bst == ZCRPC_OK) {
				bst = zcrpc__frame_decode_next(buf.data() + off, n - off, &out,
							       &used, why, sizeof(why));
				off += bst == ZCRPC_OK ? used : 0;
			}
			if (name.rfind("batch-ok-", 0) == 0)
				EXPECT_EQ(bst, ZCRPC_OK) << name << ": " << why;
			else
				EXPECT_NE(bst, ZCRPC_OK) << name;
			batches++;
		} else {
			EXPECT_NE(st, ZCRPC_OK) << name;
			bad++;
		}
	}
	closedir(d);
	EXPECT_GE(ok, 30);
	EXPECT_GE(bad, 40);
	EXPECT_GE(batches, 7);
}

// ---- batches (docs/protocol.md §8, Batches) ---------------------------------

// Several frames back to back decode one after the other, each as long as
// its header says, the last of any type.
TEST(FrameBatch, FramesBackToBackDecodeInOrderWithTheirLengths)
{
	zcrpc_frame m = Sample(ZCRPC_FRAME_MESSAGE), w = Sample(ZCRPC_FRAME_WINDOW),
		    r = Sample(ZCRPC_FRAME_REPLY);
	w.count = 8;
	r.flags = ZCRPC_FRAME_F_STREAM;
	r.status = ZCRPC_OK;
	std::vector<uint8_t> a = BuildFitting(m, {}, {1, 2, 3}), b = BuildFitting(w),
			     c = BuildFitting(m, {}, {}), d = BuildFitting(r, EncodeMd({{"k", "v"}}));
	std::vector<uint8_t> all;
	for (const auto *p : {&a, &b, &c, &d})
		all.insert(all.end(), p->begin(), p->end());
	const uint8_t *at = all.data();
	size_t left = all.size(), used = 0;
	const size_t want[] = {a.size(), b.size(), c.size(), d.size()};
	const uint8_t types[] = {ZCRPC_FRAME_MESSAGE, ZCRPC_FRAME_WINDOW, ZCRPC_FRAME_MESSAGE,
				 ZCRPC_FRAME_REPLY};
	for (int i = 0; i < 4; i++) {
		zcrpc_frame f{};
		char why[128] = "";
		ASSERT_EQ(zcrpc__frame_decode_next(at, left, &f, &used, why, sizeof(why)), ZCRPC_OK)
			<< "frame " << i << ": " << why;
		EXPECT_EQ(used, want[i]);
		EXPECT_EQ(f.type, types[i]);
		at += used;
		left -= used;
	}
	EXPECT_EQ(left, 0u);
	zcrpc_frame f{};
	ASSERT_EQ(zcrpc__frame_decode_next(a.data(), 3 + ZCRPC_FRAME_HDR_LEN, &f, &used, nullptr, 0),
		  ZCRPC_OK);
	EXPECT_EQ(f.payload_len, 3u);
	EXPECT_EQ(f.payload[2], 3);
}

// Only a MESSAGE without a bulk part or a WINDOW may have a frame after it:
// the others keep their receive (a request, a reply with metadata) or
// start something a later frame of the same message could race.
TEST(FrameBatch, OnlyInlineMessagesAndWindowsMayHaveAFrameAfterThem)
{
	std::vector<uint8_t> tail = BuildFitting(Sample(ZCRPC_FRAME_MESSAGE));
	const uint8_t kept[] = {ZCRPC_FRAME_REQUEST, ZCRPC_FRAME_REPLY,	  ZCRPC_FRAME_CANCEL,
				ZCRPC_FRAME_GOAWAY,  ZCRPC_FRAME_BULK_GRANT, ZCRPC_FRAME_HEADERS,
				ZCRPC_FRAME_HALF_CLOSE};
	for (uint8_t t : kept) {
		std::vector<uint8_t> buf = BuildFitting(Sample(t));
		buf.insert(buf.end(), tail.begin(), tail.end());
		zcrpc_frame f{};
		size_t used = 0;
		char why[128] = "";
		EXPECT_EQ(zcrpc__frame_decode_next(buf.data(), buf.size(), &f, &used, why, sizeof(why)),
			  ZCRPC_INVALID_ARGUMENT)
			<< "type " << int(t);
		EXPECT_NE(std::strstr(why, "with another after it"), nullptr) << why;
	}
	zcrpc_frame bulk = Sample(ZCRPC_FRAME_MESSAGE);
	bulk.flags = ZCRPC_FRAME_F_BULK;
	bulk.bulk_len = 100000;
	std::vector<uint8_t> buf = BuildFitting(bulk);
	buf.insert(buf.end(), tail.begin(), tail.end());
	zcrpc_frame f{};
	size_t used = 0;
	EXPECT_EQ(zcrpc__frame_decode_next(buf.data(), buf.size(), &f, &used, nullptr, 0),
		  ZCRPC_INVALID_ARGUMENT);
	EXPECT_TRUE(zcrpc__frame_batchable(ZCRPC_FRAME_MESSAGE, ZCRPC_FRAME_F_MORE));
	EXPECT_TRUE(zcrpc__frame_batchable(ZCRPC_FRAME_WINDOW, 0));
}

// A frame whose lengths run past the message, a tail shorter than a
// header, and a broken second frame are refused, never read past the end.
TEST(FrameBatch, AFrameRunningPastItsMessageOrABrokenTailIsRefused)
{
	std::vector<uint8_t> a = BuildFitting(Sample(ZCRPC_FRAME_MESSAGE), {}, {9, 9, 9, 9});
	zcrpc_frame f{};
	size_t used = 0;
	char why[160] = "";
	EXPECT_EQ(zcrpc__frame_decode_next(a.data(), a.size() - 1, &f, &used, why, sizeof(why)),
		  ZCRPC_INVALID_ARGUMENT);
	EXPECT_NE(std::strstr(why, "runs past"), nullptr) << why;
	std::vector<uint8_t> two = a;
	two.insert(two.end(), a.begin(), a.begin() + 10); // a torn second frame
	ASSERT_EQ(zcrpc__frame_decode_next(two.data(), two.size(), &f, &used, why, sizeof(why)),
		  ZCRPC_OK);
	EXPECT_EQ(used, a.size());
	EXPECT_EQ(zcrpc__frame_decode_next(two.data() + used, two.size() - used, &f, &used, why,
					   sizeof(why)),
		  ZCRPC_INVALID_ARGUMENT);
	EXPECT_NE(std::strstr(why, "shorter than its header"), nullptr) << why;
}
