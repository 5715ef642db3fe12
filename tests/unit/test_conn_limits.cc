// A listener's connection limits (src/transport/conn_limits.c), on the host:
// the per-source table against a model.
#include <gtest/gtest.h>

#include "conn_limits_table.h"

TEST(ConnLimits, PerSourceCountsMatchAModelThroughRandomTakesAndReleases)
{
	char err[256] = "";
	// Few sources, a small limit: every source at its limit often.
	EXPECT_EQ(zcrpc_test_conn_limits(5, 3, 0, 20000, err, sizeof(err)), 0)
		<< err;
	// Many sources: the table grows, and deletions shift long probe runs.
	EXPECT_EQ(zcrpc_test_conn_limits(3000, 2, 0, 60000, err, sizeof(err)),
		  0)
		<< err;
}

TEST(ConnLimits, TheTotalLimitAloneAndBoth)
{
	char err[256] = "";
	EXPECT_EQ(zcrpc_test_conn_limits(50, 0, 40, 20000, err, sizeof(err)), 0)
		<< err;
	EXPECT_EQ(zcrpc_test_conn_limits(50, 4, 60, 20000, err, sizeof(err)), 0)
		<< err;
}
