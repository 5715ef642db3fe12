// The status message limit of an error REPLY (docs/protocol.md §7): at most
// ZCRPC_STATUS_MSG_MAX bytes, cut at a UTF-8 character boundary.
#include <cstring>
#include <string>

#include <gtest/gtest.h>

#include "rpc/frame.h"

namespace {

size_t Cut(const std::string &s)
{
	return zcrpc__status_msg_len(s.c_str());
}

} // namespace

TEST(StatusMessage, ShortMessagesAreKeptWhole)
{
	EXPECT_EQ(zcrpc__status_msg_len(nullptr), 0u);
	EXPECT_EQ(Cut(""), 0u);
	EXPECT_EQ(Cut("not found"), 9u);
	EXPECT_EQ(Cut(std::string(ZCRPC_STATUS_MSG_MAX, 'a')), size_t{ZCRPC_STATUS_MSG_MAX});
	// Exactly the limit, ending in a 2-byte character.
	EXPECT_EQ(Cut(std::string(ZCRPC_STATUS_MSG_MAX - 2, 'a') + "\xc3\xa9"),
		  size_t{ZCRPC_STATUS_MSG_MAX});
}

TEST(StatusMessage, LongMessagesAreCutBeforeTheCharacterThatCrossesTheLimit)
{
	const size_t max = ZCRPC_STATUS_MSG_MAX;
	EXPECT_EQ(Cut(std::string(max + 100, 'b')), max);
	// A 2-, 3- and 4-byte character starting 1, 2 or 3 bytes before the limit.
	EXPECT_EQ(Cut(std::string(max - 1, 'a') + "\xc3\xa9" + "tail"), max - 1);
	EXPECT_EQ(Cut(std::string(max - 2, 'a') + "\xe2\x82\xac" + "tail"), max - 2);
	EXPECT_EQ(Cut(std::string(max - 3, 'a') + "\xf0\x9f\x98\x80" + "tail"), max - 3);
	EXPECT_EQ(Cut(std::string(max - 1, 'a') + "\xf0\x9f\x98\x80"), max - 1);
	EXPECT_EQ(Cut(std::string(max - 2, 'a') + "\xf0\x9f\x98\x80"), max - 2);
	// A character that ends exactly at the limit is kept.
	EXPECT_EQ(Cut(std::string(max - 4, 'a') + "\xf0\x9f\x98\x80" + "tail"), max);
	EXPECT_EQ(Cut(std::string(max - 3, 'a') + "\xe2\x82\xac" + "tail"), max);
	// Multi-byte text all the way: the cut lands on a character start.
	std::string euros;
	while (euros.size() < 2 * max)
		euros += "\xe2\x82\xac";
	size_t n = Cut(euros);
	EXPECT_LE(n, max);
	EXPECT_EQ(n % 3, 0u);
	EXPECT_GT(n, max - 3);
}

TEST(StatusMessage, InvalidUtf8IsCutAtTheLimitWithoutLookingFurtherBack)
{
	const size_t max = ZCRPC_STATUS_MSG_MAX;
	// Continuation bytes only: no character start within 3 bytes.
	EXPECT_EQ(Cut(std::string(max + 10, '\x80')), max);
}
