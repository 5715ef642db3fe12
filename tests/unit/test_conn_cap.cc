// The process's connection cap (src/rpc/conn_cap.c), on the host with fake
// holders: units are counted as connections are made and leave; at the cap
// a new one takes over the unit of the holder idle the longest, which is
// told (and is then the only one to give it up, once), busy holders are
// never chosen, a holder that went busy before hearing of its eviction
// learns it then; with none idle the new connection is refused with a
// reason; the idle timeout returns a unit; a holder that leaves returns
// what it holds. And the sharing key of subchannels (subchannel.c): every
// connection option counts, the balancing ones do not.
#include <cstring>
#include <string>

#include <gtest/gtest.h>

#include "conn_cap_driver.h"
#include "zcrpc/balance.h"

namespace
{

zcrpc_conn_cap_stats Stats()
{
	zcrpc_conn_cap_stats s;
	zcrpc_get_conn_cap_stats(&s, sizeof(s));
	return s;
}

void SetCap(uint32_t max, int64_t idle_ms = 0)
{
	zcrpc_conn_cap_opts o;
	zcrpc_conn_cap_opts_init(&o);
	o.max_conns = max;
	o.idle_timeout_ms = idle_ms;
	ASSERT_EQ(zcrpc_set_conn_cap(&o), ZCRPC_OK);
}

class ConnCap : public ::testing::Test
{
      protected:
	void SetUp() override
	{
		base_ = Stats();
	}
	void TearDown() override
	{
		EXPECT_EQ(zcrpc_set_conn_cap(nullptr), ZCRPC_OK);
	}
	// Open units now, beyond the test's start.
	uint32_t Open()
	{
		return Stats().open - base_.open;
	}
	zcrpc_conn_cap_stats base_;
	char why_[200] = {0};
};

} // namespace

TEST_F(ConnCap, UnitsAreCountedAsConnectionsAreMadeAndLeave)
{
	cap_fake *a = cap_fake_new(), *b = cap_fake_new();
	ASSERT_EQ(cap_fake_take(a, why_, sizeof(why_)), ZCRPC_OK);
	ASSERT_EQ(cap_fake_take(a, why_, sizeof(why_)), ZCRPC_OK);
	ASSERT_EQ(cap_fake_take(b, why_, sizeof(why_)), ZCRPC_OK);
	EXPECT_EQ(Open(), 3u);
	EXPECT_EQ(cap_fake_held(a), 2u);
	cap_fake_put(a);
	EXPECT_EQ(Open(), 2u);
	EXPECT_TRUE(cap_fake_findable(a));
	cap_fake_leave(a); // returns the one it still held
	EXPECT_EQ(Open(), 1u);
	cap_fake_put(b);
	cap_fake_put(b); // nothing held: nothing returned
	EXPECT_EQ(Open(), 0u);
	cap_fake_leave(b);
	EXPECT_EQ(Stats().evicted, base_.evicted);
}

TEST_F(ConnCap, AtTheCapTheHolderIdleTheLongestIsEvictedAndToldOnce)
{
	SetCap(3);
	cap_fake *h[4];
	for (auto &f : h)
		f = cap_fake_new();
	for (int i = 0; i < 3; i++)
		ASSERT_EQ(cap_fake_take(h[i], why_, sizeof(why_)), ZCRPC_OK);
	cap_fake_idle(h[0], 300);
	cap_fake_idle(h[1], 100); // idle the longest
	cap_fake_idle(h[2], 200);
	ASSERT_EQ(cap_fake_busy(h[2]), 0); // busy again: not a candidate
	ASSERT_EQ(cap_fake_take(h[3], why_, sizeof(why_)), ZCRPC_OK);
	EXPECT_EQ(cap_fake_told(h[1]), 1);
	EXPECT_EQ(cap_fake_told(h[0]) + cap_fake_told(h[2]), 0);
	EXPECT_EQ(Open(), 3u); // h[1]'s unit is h[3]'s now
	EXPECT_EQ(Stats().evicted - base_.evicted, 1u);
	// the post: h[1] closes its connection without returning a unit
	EXPECT_EQ(cap_fake_evicted(h[1]), 1);
	EXPECT_EQ(cap_fake_held(h[1]), 0u);
	EXPECT_EQ(cap_fake_evicted(h[1]), 0); // once
	cap_fake_put(h[1]);		      // nothing left to return
	EXPECT_EQ(Open(), 3u);
	// next: h[0] (idle since 300) is the only idle one
	ASSERT_EQ(cap_fake_take(h[1], why_, sizeof(why_)), ZCRPC_OK);
	EXPECT_EQ(cap_fake_told(h[0]), 1);
	EXPECT_EQ(Open(), 3u);
	for (auto &f : h)
		cap_fake_leave(f);
	EXPECT_EQ(Open(), 0u);
}

TEST_F(ConnCap, WithNoneIdleTheNewConnectionIsRefusedWithTheReason)
{
	SetCap(2);
	cap_fake *a = cap_fake_new(), *b = cap_fake_new(), *c = cap_fake_new();
	ASSERT_EQ(cap_fake_take(a, why_, sizeof(why_)), ZCRPC_OK);
	ASSERT_EQ(cap_fake_take(b, why_, sizeof(why_)), ZCRPC_OK);
	EXPECT_EQ(cap_fake_take(c, why_, sizeof(why_)), ZCRPC_RESOURCE_EXHAUSTED);
	EXPECT_NE(std::string(why_).find("connection cap (2) is reached"),
		  std::string::npos)
		<< why_;
	EXPECT_EQ(Stats().refused - base_.refused, 1u);
	EXPECT_EQ(cap_fake_held(c), 0u);
	EXPECT_EQ(Open(), 2u);
	cap_fake_put(a); // room again
	EXPECT_EQ(cap_fake_take(c, why_, sizeof(why_)), ZCRPC_OK);
	EXPECT_EQ(cap_fake_told(a) + cap_fake_told(b), 0);
	cap_fake_leave(a);
	cap_fake_leave(b);
	cap_fake_leave(c);
	EXPECT_EQ(Open(), 0u);
}

TEST_F(ConnCap, AHolderThatGoesBusyBeforeHearingOfItsEvictionLearnsItThen)
{
	SetCap(1);
	cap_fake *a = cap_fake_new(), *b = cap_fake_new();
	ASSERT_EQ(cap_fake_take(a, why_, sizeof(why_)), ZCRPC_OK);
	cap_fake_idle(a, 50);
	ASSERT_EQ(cap_fake_take(b, why_, sizeof(why_)), ZCRPC_OK);
	// a call comes to a before the post: that connection is gone
	EXPECT_EQ(cap_fake_busy(a), 1);
	EXPECT_EQ(cap_fake_held(a), 0u);
	EXPECT_EQ(cap_fake_evicted(a), 0); // the post, later: nothing to do
	EXPECT_EQ(Open(), 1u);
	// a connects again: b is busy, so a is refused
	EXPECT_EQ(cap_fake_take(a, why_, sizeof(why_)), ZCRPC_RESOURCE_EXHAUSTED);
	cap_fake_leave(a);
	cap_fake_leave(b);
	EXPECT_EQ(Open(), 0u);
}

TEST_F(ConnCap, AnEvictedConnectionThatIsLostBeforeThePostIsNotCountedTwice)
{
	SetCap(1);
	cap_fake *a = cap_fake_new(), *b = cap_fake_new();
	ASSERT_EQ(cap_fake_take(a, why_, sizeof(why_)), ZCRPC_OK);
	cap_fake_idle(a, 10);
	ASSERT_EQ(cap_fake_take(b, why_, sizeof(why_)), ZCRPC_OK);
	cap_fake_put(a); // its connection failed first
	EXPECT_EQ(Open(), 1u);
	EXPECT_EQ(cap_fake_evicted(a), 0);
	// and one that leaves with the eviction unseen returns nothing either
	cap_fake_idle(b, 20);
	ASSERT_EQ(cap_fake_take(a, why_, sizeof(why_)), ZCRPC_OK);
	EXPECT_EQ(cap_fake_told(b), 1);
	cap_fake_leave(b);
	EXPECT_EQ(Open(), 1u);
	cap_fake_leave(a);
	EXPECT_EQ(Open(), 0u);
}

TEST_F(ConnCap, TheIdleTimeoutReturnsTheUnitOfAConnectionIdleLongEnough)
{
	SetCap(0, 100); // no cap, 100 ms
	cap_fake *a = cap_fake_new();
	ASSERT_EQ(cap_fake_take(a, why_, sizeof(why_)), ZCRPC_OK);
	const int64_t ms = 1000000;
	cap_fake_idle(a, 1000 * ms);
	EXPECT_EQ(cap_fake_expired(a, 1099 * ms), 0);
	EXPECT_EQ(Open(), 1u);
	EXPECT_EQ(cap_fake_expired(a, 1100 * ms), 1);
	EXPECT_EQ(Open(), 0u);
	EXPECT_EQ(cap_fake_held(a), 0u);
	EXPECT_EQ(Stats().idle_closed - base_.idle_closed, 1u);
	EXPECT_EQ(cap_fake_expired(a, 5000 * ms), 0); // once
	// busy holders never expire
	ASSERT_EQ(cap_fake_take(a, why_, sizeof(why_)), ZCRPC_OK);
	EXPECT_EQ(cap_fake_expired(a, 9000 * ms), 0);
	cap_fake_leave(a);
	EXPECT_EQ(Open(), 0u);
}

TEST_F(ConnCap, BadOptionsAreRefusedAndNullResets)
{
	zcrpc_conn_cap_opts o;
	zcrpc_conn_cap_opts_init(&o);
	o.idle_timeout_ms = -1;
	EXPECT_EQ(zcrpc_set_conn_cap(&o), ZCRPC_INVALID_ARGUMENT);
	o.idle_timeout_ms = 0;
	o.size = 4;
	EXPECT_EQ(zcrpc_set_conn_cap(&o), ZCRPC_INVALID_ARGUMENT);
	SetCap(7);
	EXPECT_EQ(Stats().max_conns, 7u);
	EXPECT_EQ(zcrpc_set_conn_cap(nullptr), ZCRPC_OK);
	EXPECT_EQ(Stats().max_conns, 0u);
}

TEST(SubchannelKey, EveryConnectionOptionCountsAndTheBalancingOnesDoNot)
{
	zcrpc_channel_opts a, b;
	static const char key1[] = "0123456789abcdef0123", key2[] = "0123456789abcdef0124";
	zcrpc_channel_opts_init(&a);
	zcrpc_channel_opts_init(&b);
	EXPECT_EQ(conn_opts_same(&a, &b), 1);
	// the target channel's own: ignored
	b.lb_policy = "ring_hash";
	b.retry_buffer = 1;
	b.health_check_ms = 100;
	b.health_service = "kv";
	b.default_timeout_us = 5;
	b.no_sharing = 1;
	EXPECT_EQ(conn_opts_same(&a, &b), 1);
	auto differs = [&](auto set) {
		zcrpc_channel_opts c = a;
		set(c);
		return conn_opts_same(&a, &c) == 0 && conn_opts_same(&c, &a) == 0;
	};
	EXPECT_TRUE(differs([](zcrpc_channel_opts &c) { c.window = 64; }));
	EXPECT_TRUE(differs([](zcrpc_channel_opts &c) { c.send_depth = 128; }));
	EXPECT_TRUE(differs([](zcrpc_channel_opts &c) { c.tos = 32; }));
	EXPECT_TRUE(differs([](zcrpc_channel_opts &c) { c.connect_timeout_ms = 5; }));
	EXPECT_TRUE(differs([](zcrpc_channel_opts &c) { c.max_pending = 8; }));
	EXPECT_TRUE(differs([](zcrpc_channel_opts &c) { c.max_calls = 8; }));
	EXPECT_TRUE(differs([](zcrpc_channel_opts &c) { c.backoff_initial_ms = 7; }));
	EXPECT_TRUE(differs([](zcrpc_channel_opts &c) { c.backoff_max_ms = 7000; }));
	EXPECT_TRUE(differs([](zcrpc_channel_opts &c) { c.bulk_threshold = 1; }));
	EXPECT_TRUE(differs([](zcrpc_channel_opts &c) { c.src_addr = "10.0.0.1"; }));
	EXPECT_TRUE(differs([](zcrpc_channel_opts &c) { c.device = "rxe0"; }));
	EXPECT_TRUE(differs([](zcrpc_channel_opts &c) { c.port = 2; }));
	EXPECT_TRUE(differs([](zcrpc_channel_opts &c) { c.gid_index = 1; }));
	EXPECT_TRUE(differs([&](zcrpc_channel_opts &c) {
		c.psk = key1;
		c.psk_len = 20;
	}));
	// keys: the bytes count, not where they lie
	zcrpc_channel_opts k1 = a, k2 = a;
	std::string copy(key1);
	k1.psk = key1;
	k1.psk_len = 20;
	k2.psk = copy.data();
	k2.psk_len = 20;
	EXPECT_EQ(conn_opts_same(&k1, &k2), 1);
	k2.psk = key2;
	EXPECT_EQ(conn_opts_same(&k1, &k2), 0);
	k2.psk = key1;
	k2.identity = "client-7";
	EXPECT_EQ(conn_opts_same(&k1, &k2), 0);
	k1.identity = "client-7";
	EXPECT_EQ(conn_opts_same(&k1, &k2), 1);
	std::string dev("rxe0");
	zcrpc_channel_opts d1 = a, d2 = a;
	d1.device = "rxe0";
	d2.device = dev.c_str();
	EXPECT_EQ(conn_opts_same(&d1, &d2), 1);
}
