// The protobuf-c glue's metadata, context and error-reply calls refuse what
// names no call or no client before anything touches a device; and the
// metadata copy they (and zcrpc_call()'s results) rely on is deep.
#include <cstring>
#include <string>

#include <gtest/gtest.h>

#include "../../src/core/md.h"
#include "zcrpc/pb.h"
#include "zcrpc/rpc.h"

namespace {

// A closure_data the glue never handed out (generation 7, slot 5).
void *Bogus()
{
	return reinterpret_cast<void *>((uintptr_t(7) << 32) | 5);
}

} // namespace

TEST(PbApi, MetadataCopyIsDeepAndInOneAllocation)
{
	char k0[] = "x-key", v0[] = "value", k1[] = "x-bin";
	const unsigned char v1[3] = {0, 0xff, 0};
	zcrpc_md md[3] = {{k0, 5, v0, 5}, {k1, 5, v1, 3}, {k0, 5, "", 0}};

	EXPECT_EQ(zcrpc__md_dup(md, 0), nullptr);
	zcrpc_md *c = zcrpc__md_dup(md, 3);
	ASSERT_NE(c, nullptr);
	std::memset(k0, 'z', 5); // the copy keeps the bytes of the call time
	std::memset(v0, 'z', 5);
	EXPECT_EQ(std::string(static_cast<const char *>(c[0].key), c[0].key_len), "x-key");
	EXPECT_EQ(std::string(static_cast<const char *>(c[0].value), c[0].value_len), "value");
	ASSERT_EQ(c[1].value_len, 3u);
	EXPECT_EQ(std::memcmp(c[1].value, v1, 3), 0);
	EXPECT_EQ(c[2].value_len, 0u);
	EXPECT_EQ(std::string(static_cast<const char *>(c[2].key), c[2].key_len), "x-key");
	// Keys and values lie inside the one block after the pairs.
	const char *lo = reinterpret_cast<const char *>(c + 3);
	EXPECT_GE(static_cast<const char *>(c[0].key), lo);
	EXPECT_GE(static_cast<const char *>(c[1].value), lo);
	free(c);
}

TEST(PbApi, MetadataThatFitsOneFrameIsTellableBeforeTheReply)
{
	static char big[2048];
	zcrpc_md one = {"x-k", 3, "v", 1}, many[17];
	for (auto &m : many)
		m = one;
	EXPECT_TRUE(zcrpc__md_fits(nullptr, 0, nullptr, 0));
	EXPECT_TRUE(zcrpc__md_fits(many, 8, many, 8));  // 16 pairs in all
	EXPECT_FALSE(zcrpc__md_fits(many, 9, many, 8)); // 17
	EXPECT_FALSE(zcrpc__md_fits(many, 17, nullptr, 0));
	EXPECT_FALSE(zcrpc__md_fits(nullptr, 1, nullptr, 0)); // count, no list
	zcrpc_md bad = one;
	bad.key_len = 0;
	EXPECT_FALSE(zcrpc__md_fits(&bad, 1, nullptr, 0));
	bad = one;
	bad.value = nullptr;
	EXPECT_FALSE(zcrpc__md_fits(nullptr, 0, &bad, 1));
	// 2 KiB encoded in all: 3 bytes of lengths per pair, key, value.
	zcrpc_md a = {"x-a", 3, big, 1000}, b = {"x-b", 3, big, 1000 + 2048 - 2012};
	EXPECT_TRUE(zcrpc__md_fits(&a, 1, &b, 1));	// 1006 + 1042 = 2048
	b.value_len++;
	EXPECT_FALSE(zcrpc__md_fits(&a, 1, &b, 1));
	zcrpc_md huge = {"x-h", 3, big, 0x10000};
	EXPECT_FALSE(zcrpc__md_fits(&huge, 1, nullptr, 0));
}

TEST(PbApi, HandlerCallsOnAHandleThatNamesNoCallAreRefused)
{
	zcrpc_md md{"k", 1, "v", 1};

	EXPECT_EQ(zcrpc_pb_set_reply_md(Bogus(), &md, 1, nullptr, 0), ZCRPC_INVALID_ARGUMENT);
	EXPECT_EQ(zcrpc_pb_set_reply_md(nullptr, nullptr, 0, nullptr, 0), ZCRPC_INVALID_ARGUMENT);
	EXPECT_EQ(zcrpc_pb_server_get_ctx(Bogus()), nullptr);
	EXPECT_EQ(zcrpc_pb_server_get_ctx(nullptr), nullptr);
	// An error reply on it is a closure that names no call: ignored, counted.
	uint64_t before = zcrpc_pb_server_get_closures_ignored();
	zcrpc_pb_reply_error(Bogus(), ZCRPC_NOT_FOUND, "x");
	zcrpc_pb_reply_error(nullptr, ZCRPC_NOT_FOUND, nullptr);
	EXPECT_EQ(zcrpc_pb_server_get_closures_ignored(), before + 2);
}

TEST(PbApi, RegisterOptsRefusesNoOptsAnOlderSizeAndNoService)
{
	zcrpc_pb_server_opts o;

	std::memset(&o, 0, sizeof(o));
	o.size = sizeof(o);
	EXPECT_EQ(zcrpc_pb_server_register_opts(nullptr, nullptr), ZCRPC_INVALID_ARGUMENT);
	// No server, no service: refused before either is touched.
	EXPECT_EQ(zcrpc_pb_server_register_opts(nullptr, &o), ZCRPC_INVALID_ARGUMENT);
	o.size = offsetof(zcrpc_pb_server_opts, n_methods); // cut before a field
	EXPECT_EQ(zcrpc_pb_server_register_opts(nullptr, &o), ZCRPC_INVALID_ARGUMENT);
}

TEST(PbApi, ReplyMetadataOutsideACompletionReadsNone)
{
	const zcrpc_md *i = reinterpret_cast<const zcrpc_md *>(Bogus());
	const zcrpc_md *t = i;
	size_t ni = 9, nt = 9;

	EXPECT_EQ(zcrpc_pb_get_reply_md(&i, &ni, &t, &nt), ZCRPC_FAILED_PRECONDITION);
	EXPECT_EQ(i, nullptr);
	EXPECT_EQ(t, nullptr);
	EXPECT_EQ(ni, 0u);
	EXPECT_EQ(nt, 0u);
	EXPECT_EQ(zcrpc_pb_get_reply_md(nullptr, nullptr, nullptr, nullptr),
		  ZCRPC_FAILED_PRECONDITION);

	// Not a client made by zcrpc_pb_client_create().
	ProtobufCService other{};
	i = t = reinterpret_cast<const zcrpc_md *>(Bogus());
	ni = nt = 9;
	EXPECT_EQ(zcrpc_pb_get_last_md(&other, &i, &ni, &t, &nt), ZCRPC_INVALID_ARGUMENT);
	EXPECT_EQ(i, nullptr);
	EXPECT_EQ(ni, 0u);
	EXPECT_EQ(nt, 0u);
	EXPECT_EQ(zcrpc_pb_get_last_md(nullptr, nullptr, nullptr, nullptr, nullptr),
		  ZCRPC_INVALID_ARGUMENT);
}

TEST(PbApi, AnyThreadReplyWithOptionsRefusesANullCall)
{
	zcrpc_reply_opts o;

	zcrpc_reply_opts_init(&o);
	EXPECT_EQ(zcrpc_server_call_reply_any_thread_opts(nullptr, ZCRPC_OK, nullptr,
							  nullptr, 0, &o),
		  ZCRPC_INVALID_ARGUMENT);
}
