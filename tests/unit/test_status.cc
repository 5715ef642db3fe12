// Status codes: gRPC's values and names, and the errno mapping.
#include <cerrno>
#include <cstring>
#include <set>
#include <string>

#include <gtest/gtest.h>

#include "zcrpc/status.h"
#include "zcrpc/version.h"

TEST(Status, ValuesAreGrpcs)
{
	EXPECT_EQ(ZCRPC_OK, 0);
	EXPECT_EQ(ZCRPC_CANCELLED, 1);
	EXPECT_EQ(ZCRPC_UNKNOWN, 2);
	EXPECT_EQ(ZCRPC_INVALID_ARGUMENT, 3);
	EXPECT_EQ(ZCRPC_DEADLINE_EXCEEDED, 4);
	EXPECT_EQ(ZCRPC_NOT_FOUND, 5);
	EXPECT_EQ(ZCRPC_ALREADY_EXISTS, 6);
	EXPECT_EQ(ZCRPC_PERMISSION_DENIED, 7);
	EXPECT_EQ(ZCRPC_RESOURCE_EXHAUSTED, 8);
	EXPECT_EQ(ZCRPC_FAILED_PRECONDITION, 9);
	EXPECT_EQ(ZCRPC_ABORTED, 10);
	EXPECT_EQ(ZCRPC_OUT_OF_RANGE, 11);
	EXPECT_EQ(ZCRPC_UNIMPLEMENTED, 12);
	EXPECT_EQ(ZCRPC_INTERNAL, 13);
	EXPECT_EQ(ZCRPC_UNAVAILABLE, 14);
	EXPECT_EQ(ZCRPC_DATA_LOSS, 15);
	EXPECT_EQ(ZCRPC_UNAUTHENTICATED, 16);
}

TEST(Status, StringsAreGrpcNames)
{
	EXPECT_STREQ(zcrpc_status_str(ZCRPC_OK), "OK");
	EXPECT_STREQ(zcrpc_status_str(ZCRPC_DEADLINE_EXCEEDED), "DEADLINE_EXCEEDED");
	EXPECT_STREQ(zcrpc_status_str(ZCRPC_RESOURCE_EXHAUSTED), "RESOURCE_EXHAUSTED");
	EXPECT_STREQ(zcrpc_status_str(ZCRPC_UNAVAILABLE), "UNAVAILABLE");
	EXPECT_STREQ(zcrpc_status_str(ZCRPC_UNAUTHENTICATED), "UNAUTHENTICATED");
}

TEST(Status, EveryCodeHasADistinctUpperCaseName)
{
	std::set<std::string> seen;
	for (int i = 0; i < ZCRPC_STATUS_COUNT; i++) {
		const char *s = zcrpc_status_str(static_cast<zcrpc_status>(i));
		ASSERT_NE(s, nullptr);
		ASSERT_GT(std::strlen(s), 1u);
		for (const char *p = s; *p; p++)
			EXPECT_TRUE((*p >= 'A' && *p <= 'Z') || *p == '_') << s;
		EXPECT_TRUE(seen.insert(s).second) << "duplicate name " << s;
	}
}

TEST(Status, OutOfRangeValuesAreNamedInvalid)
{
	EXPECT_STREQ(zcrpc_status_str(static_cast<zcrpc_status>(17)), "INVALID_STATUS");
	EXPECT_STREQ(zcrpc_status_str(static_cast<zcrpc_status>(-1)), "INVALID_STATUS");
	EXPECT_STREQ(zcrpc_status_str(static_cast<zcrpc_status>(1000)), "INVALID_STATUS");
}

TEST(Status, ErrnoMapsAsDesignSays)
{
	EXPECT_EQ(zcrpc_status_from_errno(0), ZCRPC_OK);
	EXPECT_EQ(zcrpc_status_from_errno(ECONNREFUSED), ZCRPC_UNAVAILABLE);
	EXPECT_EQ(zcrpc_status_from_errno(ECONNRESET), ZCRPC_UNAVAILABLE);
	EXPECT_EQ(zcrpc_status_from_errno(ETIMEDOUT), ZCRPC_DEADLINE_EXCEEDED);
	EXPECT_EQ(zcrpc_status_from_errno(EAGAIN), ZCRPC_RESOURCE_EXHAUSTED);
	EXPECT_EQ(zcrpc_status_from_errno(ECANCELED), ZCRPC_CANCELLED);
	EXPECT_EQ(zcrpc_status_from_errno(EINVAL), ZCRPC_INVALID_ARGUMENT);
	EXPECT_EQ(zcrpc_status_from_errno(EDOM), ZCRPC_UNKNOWN);
}

TEST(Version, MatchesTheHeader)
{
	char want[32];
	std::snprintf(want, sizeof(want), "%d.%d.%d", ZCRPC_VERSION_MAJOR,
		      ZCRPC_VERSION_MINOR, ZCRPC_VERSION_PATCH);
	EXPECT_STREQ(zcrpc_version(), want);
}
