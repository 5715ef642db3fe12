// The method-id hash (src/core/fnv.c), part of the wire format: the known
// FNV-1a-32 vectors, hashing in pieces, and one hash for the library
// (zcrpc_method_id), the protobuf-c dispatch (zcrpc__pb_method_id) and
// zcrpc-gen (the *_ZCRPC_ID it wrote into echo.zcrpc.h for idl/echo.proto).
#include <gtest/gtest.h>

#include <cstring>

#include "echo.zcrpc.h"
#include "zcrpc/rpc.h"

extern "C" {
#include "core/fnv.h"
#include "pb/pb_internal.h"
}

TEST(Fnv1a, KnownVectors)
{
	EXPECT_EQ(zcrpc__fnv1a(""), 0x811c9dc5u);
	EXPECT_EQ(zcrpc__fnv1a("a"), 0xe40c292cu);
	EXPECT_EQ(zcrpc__fnv1a("foobar"), 0xbf9cf968u);
	// Bytes >= 0x80 are hashed unsigned.
	EXPECT_EQ(zcrpc__fnv1a("\xff"), (0x811c9dc5u ^ 0xffu) * 16777619u);
}

TEST(Fnv1a, MethodNamesDiffer)
{
	EXPECT_NE(zcrpc__fnv1a("/pkg.Svc/A"), zcrpc__fnv1a("/pkg.Svc/B"));
	EXPECT_NE(zcrpc__fnv1a("/pkg.Svc/A"), zcrpc__fnv1a("/pkg.Svc/a"));
	EXPECT_EQ(zcrpc__fnv1a("/pkg.Svc/A"), zcrpc__fnv1a("/pkg.Svc/A"));
}

TEST(Fnv1a, InPiecesIsTheHashOfTheWhole)
{
	EXPECT_EQ(ZCRPC__FNV1A_BASIS, zcrpc__fnv1a(""));
	EXPECT_EQ(zcrpc__fnv1a_more(ZCRPC__FNV1A_BASIS, "foobar"), 0xbf9cf968u);
	EXPECT_EQ(zcrpc__fnv1a_more(zcrpc__fnv1a("foo"), "bar"), 0xbf9cf968u);
	EXPECT_EQ(zcrpc__fnv1a_more(zcrpc__fnv1a("foobar"), ""), 0xbf9cf968u);
}

TEST(Fnv1a, LibraryPbDispatchAndZcrpcGenAgree)
{
	const ProtobufCServiceDescriptor *d = &zcrpc__echo__echo__descriptor;
	struct {
		const char *name;
		uint32_t gen_id; // what zcrpc-gen wrote
		uint32_t wire;	 // the FNV-1a-32 of the name, computed by hand
	} m[] = {
		{ZCRPC__ECHO__ECHO__PING__ZCRPC_NAME, ZCRPC__ECHO__ECHO__PING__ZCRPC_ID,
		 0x8e40e2abu},
		{ZCRPC__ECHO__ECHO__REVERSE__ZCRPC_NAME,
		 ZCRPC__ECHO__ECHO__REVERSE__ZCRPC_ID, 0x1a85cee3u},
	};
	EXPECT_STREQ(m[0].name, "/zcrpc.echo.Echo/Ping");
	EXPECT_STREQ(m[1].name, "/zcrpc.echo.Echo/Reverse");
	ASSERT_EQ(d->n_methods, 2u);
	for (unsigned i = 0; i < 2; i++) {
		SCOPED_TRACE(m[i].name);
		ASSERT_STREQ(std::strrchr(m[i].name, '/') + 1, d->methods[i].name);
		EXPECT_EQ(m[i].gen_id, m[i].wire);
		EXPECT_EQ(zcrpc__fnv1a(m[i].name), m[i].wire);
		EXPECT_EQ(zcrpc_method_id(m[i].name), m[i].wire);
		EXPECT_EQ(zcrpc__pb_method_id(d, i), m[i].wire);
	}
}
