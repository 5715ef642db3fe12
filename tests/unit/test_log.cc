// The log hook (include/zcrpc/log.h): levels, off by default and with
// NULL, messages delivered whole and cut at the line limit.
#include <gtest/gtest.h>

#include <string>
#include <vector>

extern "C" {
#include "core/log.h"
}

namespace {

struct Seen {
	std::vector<std::pair<zcrpc_log_level, std::string>> lines;
};

void Hook(zcrpc_log_level level, const char *msg, void *arg)
{
	static_cast<Seen *>(arg)->lines.emplace_back(level, msg);
}

TEST(Log, OffByDefaultAndAfterNull)
{
	EXPECT_FALSE(zcrpc__log_on(ZCRPC_LOG_ERROR));
	Seen seen;
	zcrpc_log_set(Hook, &seen, ZCRPC_LOG_DEBUG);
	zcrpc__log(ZCRPC_LOG_ERROR, "one %d", 1);
	zcrpc_log_set(nullptr, &seen, ZCRPC_LOG_DEBUG);
	EXPECT_FALSE(zcrpc__log_on(ZCRPC_LOG_ERROR));
	zcrpc__log(ZCRPC_LOG_ERROR, "two");
	ASSERT_EQ(seen.lines.size(), 1u);
	EXPECT_EQ(seen.lines[0].first, ZCRPC_LOG_ERROR);
	EXPECT_EQ(seen.lines[0].second, "one 1");
}

TEST(Log, HookGetsItsLevelAndMoreImportantOnly)
{
	Seen seen;
	zcrpc_log_set(Hook, &seen, ZCRPC_LOG_WARN);
	EXPECT_TRUE(zcrpc__log_on(ZCRPC_LOG_WARN));
	EXPECT_FALSE(zcrpc__log_on(ZCRPC_LOG_INFO));
	zcrpc__log(ZCRPC_LOG_DEBUG, "debug");
	zcrpc__log(ZCRPC_LOG_INFO, "info");
	zcrpc__log(ZCRPC_LOG_WARN, "warn");
	zcrpc__log(ZCRPC_LOG_ERROR, "error");
	zcrpc_log_set(nullptr, nullptr, ZCRPC_LOG_ERROR);
	ASSERT_EQ(seen.lines.size(), 2u);
	EXPECT_EQ(seen.lines[0].second, "warn");
	EXPECT_EQ(seen.lines[1].second, "error");
}

TEST(Log, LongMessagesAreCutNotOverrun)
{
	Seen seen;
	zcrpc_log_set(Hook, &seen, ZCRPC_LOG_ERROR);
	std::string big(4000, 'x');
	zcrpc__log(ZCRPC_LOG_ERROR, "%s", big.c_str());
	zcrpc_log_set(nullptr, nullptr, ZCRPC_LOG_ERROR);
	ASSERT_EQ(seen.lines.size(), 1u);
	EXPECT_EQ(seen.lines[0].second, std::string(511, 'x'));
}

TEST(Log, LevelNames)
{
	EXPECT_STREQ(zcrpc_log_level_name(ZCRPC_LOG_ERROR), "error");
	EXPECT_STREQ(zcrpc_log_level_name(ZCRPC_LOG_WARN), "warn");
	EXPECT_STREQ(zcrpc_log_level_name(ZCRPC_LOG_INFO), "info");
	EXPECT_STREQ(zcrpc_log_level_name(ZCRPC_LOG_DEBUG), "debug");
	EXPECT_STREQ(zcrpc_log_level_name(static_cast<zcrpc_log_level>(9)),
		     "unknown");
}

} // namespace
