// The host has no RDMA device (docs/testing.md): creating a worker or a
// context there fails UNAVAILABLE, and zcrpc_last_error() tells a new user
// what is missing and how to add Soft-RoCE (issue 11, item 15).
#include <cstdio>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "zcrpc/transport.h"

namespace {
void ExpectNoDeviceMessage(const std::string &e)
{
	EXPECT_NE(e.find("no RDMA device found"), std::string::npos) << e;
	EXPECT_NE(e.find("rdma link add rxe0 type rxe netdev"), std::string::npos) << e;
}
} // namespace

TEST(NoDevice, WorkerCreateSaysNoRdmaDeviceAndHowToAddSoftRoce)
{
	zcrpc_worker *w = nullptr;
	zcrpc_status st = zcrpc_worker_create(nullptr, &w);
	std::string e = zcrpc_last_error();
	std::printf("zcrpc_worker_create: %s: %s\n", zcrpc_status_str(st), e.c_str());
	ASSERT_EQ(st, ZCRPC_UNAVAILABLE) << "the unit tests expect a host without RDMA";
	EXPECT_EQ(w, nullptr);
	ExpectNoDeviceMessage(e);
	// A later create that fails for another reason says nothing stale.
	zcrpc_worker_opts o;
	zcrpc_worker_opts_init(&o);
	o.retry_count = 7;
	EXPECT_EQ(zcrpc_worker_create(&o, &w), ZCRPC_INVALID_ARGUMENT);
	EXPECT_STREQ(zcrpc_last_error(), "");
}

TEST(NoDevice, ContextCreateSaysTheSameAndTheMessageIsPerThread)
{
	zcrpc_context *ctx = nullptr;
	zcrpc_status st = zcrpc_context_create(&ctx);
	std::string e = zcrpc_last_error();
	std::printf("zcrpc_context_create: %s: %s\n", zcrpc_status_str(st), e.c_str());
	ASSERT_EQ(st, ZCRPC_UNAVAILABLE);
	ExpectNoDeviceMessage(e);
	std::string other = "unset";
	std::thread([&] { other = zcrpc_last_error(); }).join();
	EXPECT_EQ(other, "");
	EXPECT_EQ(std::string(zcrpc_last_error()), e);
}

TEST(NoDevice, WorkerErrorOfNullIsEmpty)
{
	EXPECT_STREQ(zcrpc_worker_get_error(nullptr), "");
}
