// The one ABI rule (docs/abi.md, src/core/abi.h), on the host: the copy
// helpers on a struct that grew between two "releases", and the public
// entry points that need no device (option checks, counters of NULL
// handles) with older and newer layouts. The guest half is
// tests/rdma/test_abi.cc.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "core/abi.h"
#include "zcrpc/rpc.h"
#include "zcrpc/transport.h"

namespace
{

// Release 1 of an options struct, and release 2, which appended a field.
struct OptsV1 {
	size_t size;
	uint32_t a;
	uint32_t b;
};
struct OptsV2 {
	size_t size;
	uint32_t a;
	uint32_t b;
	uint64_t c; // new in release 2; 0 = as in release 1
};

OptsV2 Defaults()
{
	OptsV2 d{sizeof(OptsV2), 10, 20, 30};
	return d;
}

constexpr unsigned char kGuard = 0xA5;

// A caller's struct of @size bytes followed by guard bytes.
struct Guarded {
	explicit Guarded(size_t size) : size_(size), buf_(size + 64, kGuard)
	{
	}
	void *data()
	{
		return buf_.data();
	}
	bool GuardIntact() const
	{
		for (size_t i = size_; i < buf_.size(); i++)
			if (buf_[i] != kGuard)
				return false;
		return true;
	}
	size_t size_;
	std::vector<unsigned char> buf_;
};

} // namespace

TEST(Abi, AnOlderSmallerInStructKeepsTheDefaultsOfNewerFields)
{
	OptsV1 old{sizeof(OptsV1), 1, 2};
	OptsV2 lib = Defaults();
	ASSERT_EQ(zcrpc__abi_in(&lib, sizeof(lib), &old, sizeof(OptsV1)),
		  ZCRPC_OK);
	EXPECT_EQ(lib.size,
		  sizeof(OptsV2)); // the library's own size from now on
	EXPECT_EQ(lib.a, 1u);
	EXPECT_EQ(lib.b, 2u);
	EXPECT_EQ(lib.c, 30u); // not in the caller's struct: the default
}

TEST(Abi, ASizeBelowTheMinimumIsRefusedAndNothingIsCopied)
{
	OptsV2 caller{offsetof(OptsV2, b), 1, 2, 3};
	OptsV2 lib = Defaults();
	EXPECT_EQ(zcrpc__abi_in(&lib, sizeof(lib), &caller, sizeof(OptsV1)),
		  ZCRPC_INVALID_ARGUMENT);
	EXPECT_EQ(lib.a, 10u);
	caller.size = 0; // zero-initialised, never passed through _init()
	EXPECT_EQ(zcrpc__abi_in(&lib, sizeof(lib), &caller, 0),
		  ZCRPC_INVALID_ARGUMENT);
	caller.size = 1u << 20; // garbage
	EXPECT_EQ(zcrpc__abi_in(&lib, sizeof(lib), &caller, 0),
		  ZCRPC_INVALID_ARGUMENT);
	EXPECT_EQ(lib.a, 10u);
	EXPECT_EQ(lib.size, sizeof(OptsV2));
}

TEST(Abi, ANewerCallerIsAcceptedOnlyWhileItsNewFieldsAreZero)
{
	// A release-1 library reading a release-2 caller's struct.
	OptsV2 caller{sizeof(OptsV2), 1, 2, 0};
	OptsV1 lib{sizeof(OptsV1), 10, 20};
	ASSERT_EQ(zcrpc__abi_in(&lib, sizeof(lib), &caller, sizeof(OptsV1)),
		  ZCRPC_OK);
	EXPECT_EQ(lib.size, sizeof(OptsV1));
	EXPECT_EQ(lib.a, 1u);
	EXPECT_EQ(lib.b, 2u);
	caller.c = 7; // asks for something the old library cannot do
	lib = OptsV1{sizeof(OptsV1), 10, 20};
	EXPECT_EQ(zcrpc__abi_in(&lib, sizeof(lib), &caller, sizeof(OptsV1)),
		  ZCRPC_INVALID_ARGUMENT);
	EXPECT_EQ(lib.a, 10u);
}

TEST(Abi, AnOutStructGetsAtMostTheBytesTheCallerGave)
{
	OptsV2 lib{sizeof(OptsV2), 1, 2, 3};
	Guarded old(sizeof(OptsV1));
	EXPECT_EQ(zcrpc__abi_out(old.data(), sizeof(OptsV1), &lib, sizeof(lib)),
		  sizeof(OptsV1));
	EXPECT_TRUE(old.GuardIntact());
	OptsV1 got;
	memcpy(&got, old.data(), sizeof(got));
	EXPECT_EQ(got.a, 1u);
	EXPECT_EQ(got.b, 2u);
	// A newer caller's larger struct: only what the library has is written.
	Guarded big(sizeof(OptsV2) + 8);
	EXPECT_EQ(zcrpc__abi_out(big.data(), sizeof(OptsV2) + 8, &lib,
				 sizeof(lib)),
		  sizeof(OptsV2));
	EXPECT_EQ(big.buf_[sizeof(OptsV2)], kGuard);
	EXPECT_EQ(zcrpc__abi_out(nullptr, 64, &lib, sizeof(lib)), 0u);
	EXPECT_EQ(zcrpc__abi_sized_init(big.data(), 12, sizeof(OptsV2)), 12u);
	size_t sz;
	memcpy(&sz, big.data(), sizeof(sz));
	EXPECT_EQ(sz, 12u);
	EXPECT_EQ(big.buf_[8], 0u);  // inside the 12 bytes: zeroed
	EXPECT_EQ(big.buf_[12], 2u); // past them (lib.b): untouched
}

TEST(Abi, EveryInStructStartsWithTheSizeItsInitSets)
{
	zcrpc_worker_opts wo;
	zcrpc_connect_opts co;
	zcrpc_listen_opts lo;
	zcrpc_conn_handlers h;
	zcrpc_channel_opts cho;
	zcrpc_call_opts cao;
	zcrpc_server_opts so;
	zcrpc_worker_opts_init(&wo);
	zcrpc_connect_opts_init(&co);
	zcrpc_listen_opts_init(&lo);
	zcrpc_conn_handlers_init(&h);
	zcrpc_channel_opts_init(&cho);
	zcrpc_call_opts_init(&cao);
	zcrpc_server_opts_init(&so);
	EXPECT_EQ(wo.size, sizeof(wo));
	EXPECT_EQ(co.size, sizeof(co));
	EXPECT_EQ(lo.size, sizeof(lo));
	EXPECT_EQ(h.size, sizeof(h));
	EXPECT_EQ(cho.size, sizeof(cho));
	EXPECT_EQ(cao.size, sizeof(cao));
	EXPECT_EQ(so.size, sizeof(so));
	EXPECT_EQ(lo.conn_handlers,
		  nullptr); // a pointer: no callbacks by default
	EXPECT_EQ(h.on_state, nullptr);
	EXPECT_EQ(offsetof(zcrpc_worker_opts, size), 0u);
	EXPECT_EQ(offsetof(zcrpc_reply_opts, size), 0u);
	EXPECT_EQ(offsetof(zcrpc_result, size), 0u);
	EXPECT_EQ(offsetof(zcrpc_reply, size), 0u);
	EXPECT_EQ(offsetof(zcrpc_request, size), 0u);
	// Growing the handlers no longer moves what follows them.
	EXPECT_EQ(sizeof(lo.conn_handlers), sizeof(void *));
}

TEST(Abi, WorkerOptionsOlderNewerAndUninitialised)
{
	zcrpc_worker *w = nullptr;
	// An older caller: the layout before keepalive_ms was appended. The
	// options are read (a bad one is still refused), the rest defaults.
	zcrpc_worker_opts o;
	zcrpc_worker_opts_init(&o);
	o.size = offsetof(zcrpc_worker_opts, keepalive_ms);
	o.max_msg = 0;
	EXPECT_EQ(zcrpc_worker_create(&o, &w), ZCRPC_INVALID_ARGUMENT);
	o.max_msg = 4096;
	zcrpc_status st = zcrpc_worker_create(&o, &w);
	EXPECT_NE(st,
		  ZCRPC_INVALID_ARGUMENT); // no device on the host: UNAVAILABLE
	zcrpc_worker_destroy(w);
	w = nullptr;
	// Below the oldest layout: refused before any device is opened.
	o.size = ZCRPC__MIN_WORKER_OPTS - 1;
	EXPECT_EQ(zcrpc_worker_create(&o, &w), ZCRPC_INVALID_ARGUMENT);
	// A newer caller whose new fields are zero: accepted...
	struct {
		zcrpc_worker_opts o;
		uint64_t newer[2];
	} n;
	memset(&n, 0, sizeof(n));
	zcrpc_worker_opts_init(&n.o);
	n.o.size = sizeof(n);
	st = zcrpc_worker_create(&n.o, &w);
	EXPECT_NE(st, ZCRPC_INVALID_ARGUMENT);
	zcrpc_worker_destroy(w);
	w = nullptr;
	// ...and refused when it set one this library does not know.
	n.newer[1] = 1;
	EXPECT_EQ(zcrpc_worker_create(&n.o, &w), ZCRPC_INVALID_ARGUMENT);
	EXPECT_EQ(w, nullptr);
}

TEST(Abi, StatsOfNullHandlesWriteNoMoreThanTheCallerGave)
{
	// One counter shorter than this build's structs, as an older caller's.
	{
		size_t n = offsetof(zcrpc_worker_stats, unflushed_wrs);
		Guarded g(n);
		zcrpc_worker_get_stats(
			nullptr, static_cast<zcrpc_worker_stats *>(g.data()),
			n);
		EXPECT_TRUE(g.GuardIntact());
		EXPECT_EQ(g.buf_[0], 0u); // zeroed inside
	}
	{
		size_t n = offsetof(zcrpc_channel_stats, protocol_errors);
		Guarded g(n);
		zcrpc_channel_get_stats(
			nullptr, static_cast<zcrpc_channel_stats *>(g.data()),
			n);
		EXPECT_TRUE(g.GuardIntact());
		EXPECT_EQ(g.buf_[n - 1], 0u);
	}
	{
		size_t n = offsetof(zcrpc_server_stats, pool_pinned);
		Guarded g(n);
		zcrpc_server_get_stats(
			nullptr, static_cast<zcrpc_server_stats *>(g.data()),
			n);
		EXPECT_TRUE(g.GuardIntact());
		EXPECT_EQ(g.buf_[n - 1], 0u);
	}
	{
		Guarded g(sizeof(zcrpc_conn_stats));
		zcrpc_conn_get_stats(nullptr,
				     static_cast<zcrpc_conn_stats *>(g.data()),
				     sizeof(zcrpc_conn_stats));
		EXPECT_EQ(g.buf_[0],
			  kGuard); // nothing written for no connection
	}
	// A size of 0 writes nothing at all.
	Guarded z(0);
	zcrpc_worker_get_stats(nullptr,
			       static_cast<zcrpc_worker_stats *>(z.data()), 0);
	EXPECT_TRUE(z.GuardIntact());
}

TEST(Abi, SyncCallRefusesAResultTooSmallForTheFirstRelease)
{
	Guarded g(ZCRPC__MIN_RESULT - 1);
	EXPECT_EQ(zcrpc_call(nullptr, 1, "x", 1, nullptr,
			     static_cast<zcrpc_result *>(g.data()),
			     ZCRPC__MIN_RESULT - 1),
		  ZCRPC_INVALID_ARGUMENT);
	EXPECT_EQ(g.buf_[0], kGuard);
	// zcrpc_result_free() clears only what the result's size covers.
	Guarded r(sizeof(zcrpc_result));
	memset(r.data(), 0, sizeof(zcrpc_result));
	auto *res = static_cast<zcrpc_result *>(r.data());
	res->size = sizeof(zcrpc_result);
	zcrpc_result_free(res);
	EXPECT_TRUE(r.GuardIntact());
	EXPECT_EQ(res->size, sizeof(zcrpc_result));
}

TEST(Abi, InitWritesNoMoreThanTheCallersStructAndZeroesANewerOnesFields)
{
	// An older caller's worker options (ending before keepalive_ms): its
	// header's inline _init passes that size; the guard after it stays.
	size_t n = offsetof(zcrpc_worker_opts, keepalive_ms);
	Guarded old(n);
	zcrpc_worker_opts_init_sized(
		static_cast<zcrpc_worker_opts *>(old.data()), n);
	EXPECT_TRUE(old.GuardIntact());
	auto *o = static_cast<zcrpc_worker_opts *>(old.data());
	EXPECT_EQ(o->size, n);
	EXPECT_EQ(o->recv_depth, 64u);
	// The same for every init, one byte short of this build's struct.
	Guarded h(sizeof(zcrpc_conn_handlers) - sizeof(void *));
	zcrpc_conn_handlers_init_sized(
		static_cast<zcrpc_conn_handlers *>(h.data()), h.size_);
	EXPECT_TRUE(h.GuardIntact());
	Guarded co(offsetof(zcrpc_connect_opts, identity));
	zcrpc_connect_opts_init_sized(
		static_cast<zcrpc_connect_opts *>(co.data()), co.size_);
	EXPECT_TRUE(co.GuardIntact());
	Guarded lo(offsetof(zcrpc_listen_opts, handshake_timeout_ms));
	zcrpc_listen_opts_init_sized(
		static_cast<zcrpc_listen_opts *>(lo.data()), lo.size_);
	EXPECT_TRUE(lo.GuardIntact());
	Guarded cho(offsetof(zcrpc_channel_opts, identity));
	zcrpc_channel_opts_init_sized(
		static_cast<zcrpc_channel_opts *>(cho.data()), cho.size_);
	EXPECT_TRUE(cho.GuardIntact());
	Guarded cao(offsetof(zcrpc_call_opts, max_reply));
	zcrpc_call_opts_init_sized(static_cast<zcrpc_call_opts *>(cao.data()),
				   cao.size_);
	EXPECT_TRUE(cao.GuardIntact());
	Guarded so(offsetof(zcrpc_server_opts, idle_release_ms));
	zcrpc_server_opts_init_sized(
		static_cast<zcrpc_server_opts *>(so.data()), so.size_);
	EXPECT_TRUE(so.GuardIntact());

	// A newer caller's larger struct: this library's defaults, then zeros
	// for the fields it does not know, and the caller's size.
	struct {
		zcrpc_worker_opts o;
		uint64_t newer[2];
	} big;
	memset(&big, 0xff, sizeof(big));
	zcrpc_worker_opts_init_sized(&big.o, sizeof(big));
	EXPECT_EQ(big.o.size, sizeof(big));
	EXPECT_EQ(big.o.keepalive_ms, 1000u);
	EXPECT_EQ(big.newer[0], 0u);
	EXPECT_EQ(big.newer[1], 0u);
}
