// Keepalive and handoff options and arguments, checked on the host (no
// device needed).
#include <cstddef>

#include <gtest/gtest.h>

#include "zcrpc/transport.h"

TEST(KeepaliveOpts, DefaultIsOneSecondAndAppendedLast)
{
	zcrpc_worker_opts o;
	zcrpc_worker_opts_init(&o);
	EXPECT_EQ(o.keepalive_ms, 1000u);
	EXPECT_EQ(o.size, sizeof(o));
	// Appended: older, smaller structs end before it and keep the default.
	EXPECT_GT(offsetof(zcrpc_worker_opts, keepalive_ms),
		  offsetof(zcrpc_worker_opts, context));
	EXPECT_GT(offsetof(zcrpc_conn_stats, keepalives_sent),
		  offsetof(zcrpc_conn_stats, max_inline));
	EXPECT_GT(offsetof(zcrpc_worker_stats, keepalives_sent),
		  offsetof(zcrpc_worker_stats, pool_bad_frees));
}

TEST(KeepaliveOpts, AnOlderOptionsStructWithoutKeepaliveIsAccepted)
{
	zcrpc_worker_opts o;
	zcrpc_worker *w = nullptr;
	zcrpc_worker_opts_init(&o);
	o.size = offsetof(zcrpc_worker_opts, keepalive_ms);
	o.retry_count = 7; // still checked: the options were read
	EXPECT_EQ(zcrpc_worker_create(&o, &w), ZCRPC_INVALID_ARGUMENT);
	o.retry_count = 6;
	zcrpc_status st = zcrpc_worker_create(&o, &w);
	// No device on the host: UNAVAILABLE; but never a bad option.
	EXPECT_NE(st, ZCRPC_INVALID_ARGUMENT);
	zcrpc_worker_destroy(w);
}

TEST(HandoffArgs, NullWorkerIsRefused)
{
	auto fn = [](zcrpc_worker *, void *) {};
	EXPECT_EQ(zcrpc_worker_post(nullptr, fn, nullptr), ZCRPC_INVALID_ARGUMENT);
}
