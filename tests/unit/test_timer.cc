// The worker's one timer mechanism (src/transport/timer.c), on the host.
#include <gtest/gtest.h>

#include "timer_heap.h"

TEST(Timer, HeapRunsEachOnceInDueOrder)
{
	char err[256] = "";
	EXPECT_EQ(zcrpc_test_timer_heap(err, sizeof(err)), 0) << err;
}

TEST(Timer, BatchMatesStoppedOrReArmedFromACallback)
{
	char err[256] = "";
	EXPECT_EQ(zcrpc_test_timer_batch(err, sizeof(err)), 0) << err;
}
