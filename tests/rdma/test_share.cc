// Connections shared between target channels and the process's connection
// cap (zcrpc/balance.h, "connections shared and capped"), over rxe with
// servers on threads of the test process. Target channels on one worker
// whose connection options match hold one connection per server between
// them, whatever their balancing options; another window or no_sharing
// makes connections of their own, and a plain channel is never shared.
// Destroying one sharer completes its own calls CANCELLED inside the
// destroy (the server is told), also calls still queued for the
// connection, and leaves the connection and the other channel's calls
// alone. At the cap (zcrpc_set_conn_cap) a new connection closes the least
// recently used idle one in order (a shared one too: every sharer gets it
// back), also one of another worker (once that worker is progressed); with
// none idle (a call or an open stream on it) it is refused
// RESOURCE_EXHAUSTED "connection cap", for a plain channel's call and a
// target channel's (pick_first and round_robin) alike. The idle timeout
// closes an idle connection in order (never one with a call or stream on
// it), and the next call makes a new one; a round_robin target channel's
// backends closed so come back at its next calls, not before. A server's
// GOAWAY gives its connections' places back; two threads at a cap of one
// taking turns evict each other every call, and racing freely never go
// over the cap nor end a call otherwise than OK or refused. The
// process-wide counters (zcrpc_get_conn_cap_stats) are checked as deltas
// from each test's start, and every test resets the cap when it ends.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "rdma_env.h"
#include "zcrpc/balance.h"
#include "zcrpc/rpc.h"
#include "zcrpc/stream.h"

using namespace std::chrono;
using namespace std::chrono_literals;

namespace
{

const char *kEcho = "/zcrpc.test.Share/Echo";
// Answered only once the server's hold is lifted: keeps calls in flight.
const char *kHold = "/zcrpc.test.Share/Hold";
// A bidirectional stream: each message echoed, finished OK at the
// client's half-close.
const char *kStream = "/zcrpc.test.Share/Stream";

int64_t ScaledUs(int ms)
{
	return static_cast<int64_t>(Scaled(ms).count()) * 1000;
}

// An RPC server on its own worker and thread: Echo, and Hold, which keeps
// its calls while @hold is set and answers them (and every later one) once
// it is cleared. Counts connections (and which ended in order) and calls.
class CapServer
{
      public:
	std::atomic<int> connects{0}, disconnects{0}, orderly{0};
	std::atomic<int> calls{0};
	// Hold calls waiting now, and of those the ones the client cancelled.
	std::atomic<int> held{0}, held_cancelled{0};
	// Hold calls answered: accepted (OK), and refused as cancelled.
	std::atomic<int> released_ok{0}, released_cancelled{0};
	std::atomic<bool> hold{false};

	bool Start(const std::string &addr)
	{
		zcrpc_server_opts o;
		zcrpc_server_opts_init(&o);
		o.on_connect = [](zcrpc_server *, zcrpc_conn *, void *a) {
			static_cast<CapServer *>(a)->connects++;
		};
		o.on_disconnect = [](zcrpc_server *, zcrpc_conn *,
				     zcrpc_status why, void *a) {
			auto *self = static_cast<CapServer *>(a);
			if (why == ZCRPC_OK)
				self->orderly++;
			self->disconnects++;
		};
		o.arg = this;
		zcrpc_stream_handlers sh{};
		sh.size = sizeof(sh);
		sh.on_open = [](zcrpc_stream *, const zcrpc_stream_open *,
				void *) {};
		sh.on_message = [](zcrpc_stream *st, const void *d, size_t n,
				   void *) { zcrpc_stream_write(st, d, n); };
		sh.on_half_close = [](zcrpc_stream *st, void *) {
			zcrpc_stream_finish(st, ZCRPC_OK, nullptr, nullptr, 0);
		};
		sh.on_finish = [](zcrpc_stream *, const zcrpc_stream_end *,
				  void *) {};
		if (zcrpc_worker_create(nullptr, &w_) != ZCRPC_OK ||
		    zcrpc_server_create(w_, &o, &s_) != ZCRPC_OK ||
		    zcrpc_server_register(s_, kEcho, Echo, this) != ZCRPC_OK ||
		    zcrpc_server_register(s_, kHold, Hold, this) != ZCRPC_OK ||
		    zcrpc_server_register_stream(s_, kStream, &sh) != ZCRPC_OK ||
		    zcrpc_server_listen(s_, addr.c_str(), "0") != ZCRPC_OK)
			return false;
		port_ = std::to_string(zcrpc_server_get_port(s_));
		thread_ = std::thread([this] { Loop(); });
		return true;
	}
	const std::string &port() const { return port_; }

	// A graceful shutdown (zcrpc_server_shutdown with @grace_ms) on the
	// server's thread, progressing the client's worker @cw meanwhile (it
	// answers the GOAWAY) until it returned.
	void Shutdown(int grace_ms, zcrpc_worker *cw)
	{
		shutdown_ms_ = grace_ms;
		ProgressUntil(cw, [&] { return shut_.load(); },
			      milliseconds(grace_ms) + Scaled(5000));
	}

	~CapServer()
	{
		stop_ = true;
		if (thread_.joinable())
			thread_.join();
		zcrpc_server_destroy(s_); // releases calls still held
		zcrpc_worker_destroy(w_);
	}

      private:
	static void Echo(zcrpc_server_call *c, const zcrpc_request *r, void *a)
	{
		static_cast<CapServer *>(a)->calls++;
		zcrpc_server_call_reply(c, ZCRPC_OK, nullptr, r->data, r->len,
					nullptr);
	}
	static void Hold(zcrpc_server_call *c, const zcrpc_request *r, void *a)
	{
		auto *self = static_cast<CapServer *>(a);
		self->calls++;
		if (!self->hold.load()) {
			zcrpc_server_call_reply(c, ZCRPC_OK, nullptr, r->data,
						r->len, nullptr);
			return;
		}
		self->holding_.push_back(c);
		self->held = static_cast<int>(self->holding_.size());
	}
	void Loop()
	{
		while (!stop_.load()) {
			if (int ms = shutdown_ms_.exchange(0)) {
				zcrpc_server_shutdown(s_, ms);
				shut_ = true;
			}
			zcrpc_worker_progress(w_, 1);
			int cancelled = 0;
			for (zcrpc_server_call *c : holding_)
				cancelled += zcrpc_server_call_cancelled(c) != 0;
			held_cancelled = cancelled;
			if (hold.load() || holding_.empty())
				continue;
			for (zcrpc_server_call *c : holding_) {
				zcrpc_status st = zcrpc_server_call_reply(
					c, ZCRPC_OK, nullptr, "held", 4, nullptr);
				if (st == ZCRPC_OK)
					released_ok++;
				else if (st == ZCRPC_CANCELLED)
					released_cancelled++;
			}
			holding_.clear();
			held = 0;
			held_cancelled = 0;
		}
	}

	zcrpc_worker *w_ = nullptr;
	zcrpc_server *s_ = nullptr;
	std::string port_;
	std::atomic<bool> stop_{false}, shut_{false};
	std::atomic<int> shutdown_ms_{0};
	std::thread thread_;
	std::vector<zcrpc_server_call *> holding_; // the server's thread only
};

// Asynchronous calls and what became of each (the records never move, so
// each call's callback gets its own as its argument).
struct Calls {
	struct One {
		Calls *owner = nullptr;
		int completions = 0;
		bool in_destroy = false; // completed while *destroying was set
		zcrpc_status status = ZCRPC_OK;
		std::string message, data;
	};
	std::deque<One> v;
	const bool *destroying = nullptr;
	int live = 0;

	static void Done(zcrpc_channel *, const zcrpc_reply *r, void *arg)
	{
		auto *one = static_cast<One *>(arg);
		one->completions++;
		one->status = r->status;
		one->message = r->message ? r->message : "";
		one->data.assign(static_cast<const char *>(r->data), r->len);
		if (one->owner->destroying && *one->owner->destroying)
			one->in_destroy = true;
		one->owner->live--;
	}

	zcrpc_status Start(zcrpc_channel *ch, const char *method)
	{
		zcrpc_call_opts co;
		zcrpc_call_opts_init(&co);
		co.timeout_us = ScaledUs(10000);
		v.emplace_back();
		One *one = &v.back();
		one->owner = this;
		zcrpc_status st = zcrpc_call_async(ch, zcrpc_method_id(method),
						   "ping", 4, &co, Done, one,
						   nullptr);
		if (st != ZCRPC_OK)
			v.pop_back();
		else
			live++;
		return st;
	}

	int Count(zcrpc_status st) const
	{
		int n = 0;
		for (const One &o : v)
			n += o.completions > 0 && o.status == st;
		return n;
	}
	int NotOnce() const
	{
		int n = 0;
		for (const One &o : v)
			n += o.completions != 1;
		return n;
	}
	int InDestroy() const
	{
		int n = 0;
		for (const One &o : v)
			n += o.in_destroy;
		return n;
	}
	std::string FirstNotOk() const
	{
		for (const One &o : v)
			if (o.completions && o.status != ZCRPC_OK)
				return std::string(zcrpc_status_str(o.status)) +
				       ": " + o.message;
		return "";
	}
};

// A synchronous call of @method; the status, and the message in *@msg.
zcrpc_status Call(zcrpc_channel *ch, const char *method,
		  std::string *msg = nullptr)
{
	zcrpc_call_opts co;
	zcrpc_call_opts_init(&co);
	co.timeout_us = ScaledUs(10000);
	zcrpc_result r{};
	zcrpc_status st = zcrpc_call(ch, zcrpc_method_id(method), "ping", 4,
				     &co, &r, sizeof(r));
	if (msg)
		*msg = r.message ? r.message : "";
	if (st == ZCRPC_OK &&
	    std::string(static_cast<const char *>(r.data), r.len) != "ping")
		st = ZCRPC_INTERNAL; // not our echo
	zcrpc_result_free(&r);
	return st;
}

zcrpc_conn_cap_stats CapStats()
{
	zcrpc_conn_cap_stats s{};
	zcrpc_get_conn_cap_stats(&s, sizeof(s));
	return s;
}

zcrpc_channel_opts ChannelOpts(const char *policy = nullptr)
{
	zcrpc_channel_opts o;
	zcrpc_channel_opts_init(&o);
	o.lb_policy = policy;
	o.connect_timeout_ms = static_cast<int>(Scaled(5000).count());
	o.backoff_initial_ms = 50;
	o.backoff_max_ms = 400;
	return o;
}

class Share : public RdmaTest
{
      protected:
	zcrpc_conn_cap_stats base_{};

	void SetUp() override
	{
		RdmaTest::SetUp();
		zcrpc_set_conn_cap(nullptr);
		base_ = CapStats();
	}
	void TearDown() override { zcrpc_set_conn_cap(nullptr); }

	// The counters' moves since the test began.
	int64_t DOpen() { return int64_t(CapStats().open) - base_.open; }
	int64_t DEvicted() { return int64_t(CapStats().evicted - base_.evicted); }
	int64_t DIdleClosed()
	{
		return int64_t(CapStats().idle_closed - base_.idle_closed);
	}
	int64_t DRefused() { return int64_t(CapStats().refused - base_.refused); }
	int64_t DSubs()
	{
		return int64_t(CapStats().subchannels) - base_.subchannels;
	}
	int64_t DShares() { return int64_t(CapStats().shares) - base_.shares; }

	// Sets the cap to @extra connections above those open at the start
	// (none, unless an earlier test of the process leaked one).
	void SetCap(uint32_t extra, int64_t idle_ms = 0)
	{
		zcrpc_conn_cap_opts o;
		zcrpc_conn_cap_opts_init(&o);
		o.max_conns = extra ? base_.open + extra : 0;
		o.idle_timeout_ms = idle_ms;
		ASSERT_EQ(zcrpc_set_conn_cap(&o), ZCRPC_OK);
		ASSERT_EQ(CapStats().max_conns, o.max_conns);
	}

	std::string Target(const std::vector<CapServer *> &s)
	{
		std::string t = "ipv4:";
		for (size_t i = 0; i < s.size(); i++)
			t += (i ? "," : "") + env_.addr0 + ":" + s[i]->port();
		return t;
	}
};

// Makes @n calls of Echo on @ch and waits for them: all must be OK.
void CallsOk(zcrpc_worker *w, zcrpc_channel *ch, int n, const char *what)
{
	Calls c;
	for (int i = 0; i < n; i++)
		ASSERT_EQ(c.Start(ch, kEcho), ZCRPC_OK) << what;
	ASSERT_TRUE(ProgressUntil(w, [&] { return c.live == 0; }, Scaled(10000)))
		<< what << ": " << c.live << " calls did not complete";
	EXPECT_EQ(c.Count(ZCRPC_OK), n) << what << ": " << c.FirstNotOk();
	EXPECT_EQ(c.NotOnce(), 0) << what;
}

// Progresses @w for @t (nothing expected to happen meanwhile).
void ProgressFor(zcrpc_worker *w, milliseconds t)
{
	ProgressUntil(w, [] { return false; }, t);
}

} // namespace

TEST_F(Share, TwoTargetChannelsOnOneWorkerShareOneConnectionPerServer)
{
	CapServer s0, s1;
	ASSERT_TRUE(s0.Start(env_.addr0));
	ASSERT_TRUE(s1.Start(env_.addr0));
	zcrpc_worker *w = nullptr;
	ASSERT_EQ(zcrpc_worker_create(nullptr, &w), ZCRPC_OK);
	const std::string target = Target({&s0, &s1});
	auto conns = [&](int n) {
		return s0.connects.load() == n && s1.connects.load() == n;
	};

	// A and B: the same connection options, round_robin over both.
	zcrpc_channel_opts o = ChannelOpts("round_robin");
	zcrpc_channel *a = nullptr, *b = nullptr;
	ASSERT_EQ(zcrpc_channel_create_target(w, target.c_str(), &o, &a), ZCRPC_OK);
	ASSERT_EQ(zcrpc_channel_create_target(w, target.c_str(), &o, &b), ZCRPC_OK);
	CallsOk(w, a, 8, "A");
	CallsOk(w, b, 8, "B");
	EXPECT_EQ(DSubs(), 2);
	EXPECT_EQ(DShares(), 2);
	ASSERT_TRUE(ProgressUntil(w, [&] { return conns(1); }, Scaled(5000)));
	ProgressFor(w, Scaled(300)); // no second connection comes
	EXPECT_EQ(s0.connects.load(), 1);
	EXPECT_EQ(s1.connects.load(), 1);
	EXPECT_GT(s0.calls.load(), 0);
	EXPECT_GT(s1.calls.load(), 0);
	EXPECT_EQ(DOpen(), 2);

	// C: another window, so connections of its own.
	zcrpc_channel_opts oc = o;
	oc.window = 512;
	zcrpc_channel *c = nullptr;
	ASSERT_EQ(zcrpc_channel_create_target(w, target.c_str(), &oc, &c), ZCRPC_OK);
	CallsOk(w, c, 8, "C (window 512)");
	EXPECT_TRUE(ProgressUntil(w, [&] { return conns(2); }, Scaled(5000)))
		<< s0.connects << " " << s1.connects;
	EXPECT_EQ(DSubs(), 4);
	EXPECT_EQ(DShares(), 2);

	// D: A's options with no_sharing.
	zcrpc_channel_opts od = o;
	od.no_sharing = 1;
	zcrpc_channel *d = nullptr;
	ASSERT_EQ(zcrpc_channel_create_target(w, target.c_str(), &od, &d), ZCRPC_OK);
	CallsOk(w, d, 8, "D (no_sharing)");
	EXPECT_TRUE(ProgressUntil(w, [&] { return conns(3); }, Scaled(5000)))
		<< s0.connects << " " << s1.connects;
	EXPECT_EQ(DSubs(), 6);
	EXPECT_EQ(DShares(), 2);

	// E: other balancing options only (policy, default deadline, retry
	// buffer): it shares A's connections.
	zcrpc_channel_opts oe = o;
	oe.lb_policy = "pick_first";
	oe.default_timeout_us = ScaledUs(7000);
	oe.retry_buffer = 1024;
	zcrpc_channel *e = nullptr;
	ASSERT_EQ(zcrpc_channel_create_target(w, target.c_str(), &oe, &e), ZCRPC_OK);
	CallsOk(w, e, 8, "E (other balancing options)");
	EXPECT_EQ(DSubs(), 6);
	EXPECT_EQ(DShares(), 4);

	// P: a plain channel to s0 with A's options is never shared.
	zcrpc_channel_opts op = ChannelOpts();
	zcrpc_channel *p = nullptr;
	ASSERT_EQ(zcrpc_channel_create(w, env_.addr0.c_str(), s0.port().c_str(),
				       &op, &p),
		  ZCRPC_OK);
	EXPECT_EQ(Call(p, kEcho), ZCRPC_OK);
	ProgressFor(w, Scaled(300));
	EXPECT_EQ(s0.connects.load(), 4);
	EXPECT_EQ(s1.connects.load(), 3);
	EXPECT_EQ(DSubs(), 6);
	EXPECT_EQ(DShares(), 4);
	EXPECT_EQ(DOpen(), 7);

	// A goes: its sharers keep the connections and their calls work.
	zcrpc_channel_destroy(a);
	EXPECT_EQ(DSubs(), 6);
	EXPECT_EQ(DShares(), 2);
	CallsOk(w, b, 8, "B after A went");
	CallsOk(w, e, 8, "E after A went");
	ProgressFor(w, Scaled(300));
	EXPECT_EQ(s0.disconnects.load(), 0);
	EXPECT_EQ(s1.disconnects.load(), 0);
	EXPECT_EQ(s0.connects.load(), 4);
	EXPECT_EQ(s1.connects.load(), 3);

	zcrpc_channel_destroy(b);
	zcrpc_channel_destroy(c);
	zcrpc_channel_destroy(d);
	zcrpc_channel_destroy(e);
	zcrpc_channel_destroy(p);
	EXPECT_EQ(DSubs(), 0);
	EXPECT_EQ(DShares(), 0);
	EXPECT_EQ(DOpen(), 0);
	EXPECT_TRUE(ProgressUntil(
		w,
		[&] { return s0.disconnects.load() == 4 && s1.disconnects.load() == 3; },
		Scaled(5000)))
		<< s0.disconnects << " " << s1.disconnects;
	EXPECT_EQ(s0.orderly.load(), 4);
	EXPECT_EQ(s1.orderly.load(), 3);
	zcrpc_worker_destroy(w);
}

// The set of a test's resolver ("sharetest:"): what the test reports.
zcrpc_resolver *g_test_resolver = nullptr;

void RegisterTestResolver()
{
	zcrpc_resolver_ops ops{};
	ops.size = sizeof(ops);
	ops.scheme = "sharetest";
	ops.start = [](zcrpc_resolver *r, const char *, void **, void *) {
		g_test_resolver = r;
		return ZCRPC_OK;
	};
	ops.stop = [](void *, void *) { g_test_resolver = nullptr; };
	zcrpc_status st = zcrpc_resolver_register(&ops);
	ASSERT_TRUE(st == ZCRPC_OK || st == ZCRPC_ALREADY_EXISTS) << zcrpc_status_str(st);
}

// A backend that leaves the set with no call on it goes at once; the
// calls in flight on the others are not touched (they end OK, not
// CANCELLED: the backend's going takes back only its own attempts).
TEST_F(Share, ABackendLeavingTheSetLeavesTheCallsOnTheOthersAlone)
{
	constexpr int kN = 4;
	CapServer s1, s2;
	ASSERT_TRUE(s1.Start(env_.addr0));
	ASSERT_TRUE(s2.Start(env_.addr0));
	RegisterTestResolver();
	zcrpc_worker *w = nullptr;
	ASSERT_EQ(zcrpc_worker_create(nullptr, &w), ZCRPC_OK);
	zcrpc_channel_opts o = ChannelOpts(); // pick_first: s1 takes the calls
	zcrpc_channel *ch = nullptr;
	ASSERT_EQ(zcrpc_channel_create_target(w, "sharetest:x", &o, &ch), ZCRPC_OK);
	ASSERT_NE(g_test_resolver, nullptr);
	const std::string p1 = s1.port(), p2 = s2.port();
	zcrpc_address a[2] = {{env_.addr0.c_str(), p1.c_str()}, {env_.addr0.c_str(), p2.c_str()}};
	ASSERT_EQ(zcrpc_resolver_set(g_test_resolver, a, 2, ZCRPC_OK, nullptr), ZCRPC_OK);
	ASSERT_TRUE(ProgressUntil(
		w, [&] { return zcrpc_channel_get_backends(ch, nullptr, 0, 0) == 2; },
		Scaled(5000)));

	s1.hold = true;
	Calls c;
	for (int i = 0; i < kN; i++)
		ASSERT_EQ(c.Start(ch, kHold), ZCRPC_OK);
	ASSERT_TRUE(ProgressUntil(w, [&] { return s1.held.load() == kN; }, Scaled(10000)))
		<< s1.held << " calls held";
	ASSERT_EQ(zcrpc_resolver_set(g_test_resolver, a, 1, ZCRPC_OK, nullptr), ZCRPC_OK);
	ASSERT_TRUE(ProgressUntil(
		w, [&] { return zcrpc_channel_get_backends(ch, nullptr, 0, 0) == 1; },
		Scaled(5000)));
	EXPECT_EQ(DSubs(), 1) << "s2's subchannel went with it";
	s1.hold = false;
	ASSERT_TRUE(ProgressUntil(w, [&] { return c.live == 0; }, Scaled(10000)))
		<< c.live << " calls did not complete";
	EXPECT_EQ(c.Count(ZCRPC_OK), kN) << c.FirstNotOk();
	EXPECT_EQ(c.NotOnce(), 0);
	zcrpc_channel_destroy(ch);
	zcrpc_worker_destroy(w);
}

TEST_F(Share, DestroyingOneSharerCancelsOnlyItsCalls)
{
	constexpr int kN = 8;
	CapServer s;
	ASSERT_TRUE(s.Start(env_.addr0));
	zcrpc_worker *w = nullptr;
	ASSERT_EQ(zcrpc_worker_create(nullptr, &w), ZCRPC_OK);
	const std::string target = Target({&s});
	zcrpc_channel_opts o = ChannelOpts();
	zcrpc_channel *a = nullptr, *b = nullptr;
	ASSERT_EQ(zcrpc_channel_create_target(w, target.c_str(), &o, &a), ZCRPC_OK);
	ASSERT_EQ(zcrpc_channel_create_target(w, target.c_str(), &o, &b), ZCRPC_OK);

	s.hold = true;
	bool destroying = false;
	Calls ca, cb;
	ca.destroying = &destroying;
	for (int i = 0; i < kN; i++) {
		ASSERT_EQ(ca.Start(a, kHold), ZCRPC_OK);
		ASSERT_EQ(cb.Start(b, kHold), ZCRPC_OK);
	}
	ASSERT_TRUE(ProgressUntil(w, [&] { return s.held.load() == 2 * kN; },
				  Scaled(10000)))
		<< s.held << " calls held";
	EXPECT_EQ(s.connects.load(), 1);
	EXPECT_EQ(DSubs(), 1);
	EXPECT_EQ(DShares(), 1);
	EXPECT_EQ(ca.live, kN);
	EXPECT_EQ(cb.live, kN);

	destroying = true;
	zcrpc_channel_destroy(a);
	destroying = false;
	EXPECT_EQ(ca.live, 0);
	EXPECT_EQ(ca.InDestroy(), kN) << "callbacks ran inside the destroy";
	EXPECT_EQ(ca.Count(ZCRPC_CANCELLED), kN) << ca.FirstNotOk();
	EXPECT_EQ(ca.NotOnce(), 0);
	EXPECT_EQ(DSubs(), 1);
	EXPECT_EQ(DShares(), 0);

	// The server hears A's cancels, and only A's.
	EXPECT_TRUE(ProgressUntil(
		w, [&] { return s.held_cancelled.load() == kN; }, Scaled(5000)))
		<< s.held_cancelled << " held calls cancelled";
	ProgressFor(w, Scaled(200));
	EXPECT_EQ(s.held_cancelled.load(), kN);
	EXPECT_EQ(cb.live, kN) << "B's calls are untouched";

	s.hold = false;
	ASSERT_TRUE(ProgressUntil(w, [&] { return cb.live == 0; }, Scaled(10000)))
		<< cb.live << " of B's calls did not complete";
	EXPECT_EQ(cb.Count(ZCRPC_OK), kN) << cb.FirstNotOk();
	EXPECT_EQ(cb.NotOnce(), 0);
	for (const Calls::One &one : cb.v)
		EXPECT_EQ(one.data, "held");
	// (the server's thread counts each reply after making it)
	EXPECT_TRUE(ProgressUntil(
		w,
		[&] {
			return s.released_ok.load() + s.released_cancelled.load() ==
			       2 * kN;
		},
		Scaled(5000)));
	EXPECT_EQ(s.released_ok.load(), kN);
	EXPECT_EQ(s.released_cancelled.load(), kN);
	EXPECT_EQ(ca.NotOnce(), 0) << "a callback of A ran again";

	// The shared connection stayed.
	EXPECT_EQ(Call(b, kEcho), ZCRPC_OK);
	EXPECT_EQ(s.connects.load(), 1);
	EXPECT_EQ(s.disconnects.load(), 0);
	EXPECT_EQ(DOpen(), 1);

	zcrpc_channel_destroy(b);
	EXPECT_EQ(DSubs(), 0);
	EXPECT_EQ(DOpen(), 0);
	EXPECT_TRUE(ProgressUntil(w, [&] { return s.orderly.load() == 1; },
				  Scaled(5000)));
	zcrpc_worker_destroy(w);
}

TEST_F(Share, AtTheCapANewConnectionEvictsTheLeastRecentlyUsedIdleOne)
{
	CapServer s;
	ASSERT_TRUE(s.Start(env_.addr0));
	SetCap(2);
	zcrpc_worker *w = nullptr;
	ASSERT_EQ(zcrpc_worker_create(nullptr, &w), ZCRPC_OK);
	zcrpc_channel_opts o = ChannelOpts();
	zcrpc_channel *ch[3] = {};
	for (auto &c : ch)
		ASSERT_EQ(zcrpc_channel_create(w, env_.addr0.c_str(),
					       s.port().c_str(), &o, &c),
			  ZCRPC_OK);

	EXPECT_EQ(Call(ch[0], kEcho), ZCRPC_OK);
	EXPECT_EQ(Call(ch[1], kEcho), ZCRPC_OK);
	EXPECT_EQ(DOpen(), 2);
	EXPECT_EQ(DEvicted(), 0);
	EXPECT_EQ(s.connects.load(), 2);

	// ch3 at the cap: ch1 (idle the longest) is closed in order.
	std::string msg;
	EXPECT_EQ(Call(ch[2], kEcho, &msg), ZCRPC_OK) << msg;
	EXPECT_EQ(DEvicted(), 1);
	EXPECT_EQ(DOpen(), 2);
	EXPECT_TRUE(ProgressUntil(w, [&] { return s.disconnects.load() == 1; },
				  Scaled(5000)));
	EXPECT_EQ(s.orderly.load(), 1);
	EXPECT_EQ(s.connects.load(), 3);

	// ch1 again: ch2 is the least recently used now.
	EXPECT_EQ(Call(ch[0], kEcho, &msg), ZCRPC_OK) << msg;
	EXPECT_EQ(DEvicted(), 2);
	EXPECT_EQ(DOpen(), 2);
	EXPECT_TRUE(ProgressUntil(w, [&] { return s.disconnects.load() == 2; },
				  Scaled(5000)));
	EXPECT_EQ(s.orderly.load(), 2);
	EXPECT_EQ(s.connects.load(), 4);
	// ch3 kept its connection: no new one, nothing evicted.
	EXPECT_EQ(Call(ch[2], kEcho, &msg), ZCRPC_OK) << msg;
	ProgressFor(w, Scaled(200));
	EXPECT_EQ(s.connects.load(), 4);
	EXPECT_EQ(s.disconnects.load(), 2);
	EXPECT_EQ(DEvicted(), 2);
	EXPECT_EQ(DRefused(), 0);

	for (auto &c : ch)
		zcrpc_channel_destroy(c);
	EXPECT_EQ(DOpen(), 0);
	EXPECT_TRUE(ProgressUntil(w, [&] { return s.disconnects.load() == 4; },
				  Scaled(5000)));
	EXPECT_EQ(s.orderly.load(), 4);
	zcrpc_worker_destroy(w);
}

TEST_F(Share, WithNoIdleConnectionANewOneIsRefused)
{
	CapServer s;
	ASSERT_TRUE(s.Start(env_.addr0));
	SetCap(1);
	zcrpc_worker *w = nullptr;
	ASSERT_EQ(zcrpc_worker_create(nullptr, &w), ZCRPC_OK);
	zcrpc_channel_opts o = ChannelOpts();
	zcrpc_channel *ch1 = nullptr, *ch2 = nullptr;
	ASSERT_EQ(zcrpc_channel_create(w, env_.addr0.c_str(), s.port().c_str(),
				       &o, &ch1),
		  ZCRPC_OK);
	ASSERT_EQ(zcrpc_channel_create(w, env_.addr0.c_str(), s.port().c_str(),
				       &o, &ch2),
		  ZCRPC_OK);

	s.hold = true;
	Calls c1;
	ASSERT_EQ(c1.Start(ch1, kHold), ZCRPC_OK);
	ASSERT_TRUE(ProgressUntil(w, [&] { return s.held.load() == 1; },
				  Scaled(10000)));
	EXPECT_EQ(DOpen(), 1);

	std::string msg;
	auto t0 = steady_clock::now();
	EXPECT_EQ(Call(ch2, kEcho, &msg), ZCRPC_RESOURCE_EXHAUSTED) << msg;
	auto took = duration_cast<milliseconds>(steady_clock::now() - t0);
	EXPECT_NE(msg.find("connection cap"), std::string::npos) << msg;
	EXPECT_LT(took, Scaled(1000)) << "refused at once, not after a connect";
	EXPECT_EQ(DRefused(), 1);
	EXPECT_EQ(DEvicted(), 0);
	EXPECT_EQ(DOpen(), 1);
	EXPECT_EQ(s.connects.load(), 1);
	EXPECT_EQ(c1.live, 1) << "the held call is untouched";

	s.hold = false;
	ASSERT_TRUE(ProgressUntil(w, [&] { return c1.live == 0; }, Scaled(10000)));
	EXPECT_EQ(c1.Count(ZCRPC_OK), 1) << c1.FirstNotOk();

	// ch1 is idle now: ch2's next call takes its place.
	EXPECT_EQ(Call(ch2, kEcho, &msg), ZCRPC_OK) << msg;
	EXPECT_EQ(DEvicted(), 1);
	EXPECT_EQ(DRefused(), 1);
	EXPECT_EQ(DOpen(), 1);
	EXPECT_TRUE(ProgressUntil(w, [&] { return s.disconnects.load() == 1; },
				  Scaled(5000)));
	EXPECT_EQ(s.orderly.load(), 1);
	EXPECT_EQ(s.connects.load(), 2);

	zcrpc_channel_destroy(ch1);
	zcrpc_channel_destroy(ch2);
	EXPECT_EQ(DOpen(), 0);
	zcrpc_worker_destroy(w);
}

TEST_F(Share, AnIdleConnectionIsClosedAfterTheIdleTimeoutAndRemadeAtTheNextCall)
{
	const int idle_ms = static_cast<int>(Scaled(300).count());
	CapServer s;
	ASSERT_TRUE(s.Start(env_.addr0));
	SetCap(0, idle_ms);
	zcrpc_worker *w = nullptr;
	ASSERT_EQ(zcrpc_worker_create(nullptr, &w), ZCRPC_OK);
	zcrpc_channel_opts o = ChannelOpts();
	zcrpc_channel *ch = nullptr;
	ASSERT_EQ(zcrpc_channel_create(w, env_.addr0.c_str(), s.port().c_str(),
				       &o, &ch),
		  ZCRPC_OK);

	// A call in flight for twice the timeout: the connection stays.
	s.hold = true;
	Calls c;
	ASSERT_EQ(c.Start(ch, kHold), ZCRPC_OK);
	ASSERT_TRUE(ProgressUntil(w, [&] { return s.held.load() == 1; },
				  Scaled(10000)));
	ProgressFor(w, milliseconds(3 * idle_ms / 2));
	EXPECT_EQ(DIdleClosed(), 0);
	EXPECT_EQ(s.disconnects.load(), 0);
	s.hold = false;
	ASSERT_TRUE(ProgressUntil(w, [&] { return c.live == 0; }, Scaled(10000)));
	EXPECT_EQ(c.Count(ZCRPC_OK), 1) << c.FirstNotOk();
	EXPECT_EQ(DOpen(), 1);

	// Idle from here on: closed in order after the timeout.
	auto t0 = steady_clock::now();
	EXPECT_TRUE(ProgressUntil(w, [&] { return DIdleClosed() == 1; },
				  milliseconds(idle_ms) + Scaled(3000)));
	auto took = duration_cast<milliseconds>(steady_clock::now() - t0);
	EXPECT_GE(took.count(), idle_ms / 2) << "closed long before the timeout";
	EXPECT_EQ(DOpen(), 0);
	EXPECT_TRUE(ProgressUntil(w, [&] { return s.disconnects.load() == 1; },
				  Scaled(5000)));
	EXPECT_EQ(s.orderly.load(), 1);
	EXPECT_EQ(s.connects.load(), 1);

	// The next call makes a new connection.
	std::string msg;
	EXPECT_EQ(Call(ch, kEcho, &msg), ZCRPC_OK) << msg;
	EXPECT_EQ(s.connects.load(), 2);
	EXPECT_EQ(DOpen(), 1);
	EXPECT_EQ(DEvicted(), 0);

	zcrpc_channel_destroy(ch);
	EXPECT_EQ(DOpen(), 0);
	EXPECT_TRUE(ProgressUntil(w, [&] { return s.orderly.load() == 2; },
				  Scaled(5000)));
	EXPECT_EQ(DIdleClosed(), 1);
	zcrpc_worker_destroy(w);
}

TEST_F(Share, EvictionReachesAnIdleConnectionOfAnotherWorker)
{
	CapServer s;
	ASSERT_TRUE(s.Start(env_.addr0));
	SetCap(1);
	zcrpc_worker *wa = nullptr, *wb = nullptr;
	ASSERT_EQ(zcrpc_worker_create(nullptr, &wa), ZCRPC_OK);
	ASSERT_EQ(zcrpc_worker_create(nullptr, &wb), ZCRPC_OK);
	zcrpc_channel_opts o = ChannelOpts();
	zcrpc_channel *cha = nullptr, *chb = nullptr;
	ASSERT_EQ(zcrpc_channel_create(wa, env_.addr0.c_str(), s.port().c_str(),
				       &o, &cha),
		  ZCRPC_OK);
	ASSERT_EQ(zcrpc_channel_create(wb, env_.addr0.c_str(), s.port().c_str(),
				       &o, &chb),
		  ZCRPC_OK);

	std::string msg;
	EXPECT_EQ(Call(cha, kEcho, &msg), ZCRPC_OK) << msg;
	EXPECT_EQ(DOpen(), 1);

	// B at the cap: A's idle connection is taken over; it closes only
	// when A's worker runs.
	EXPECT_EQ(Call(chb, kEcho, &msg), ZCRPC_OK) << msg;
	EXPECT_EQ(DEvicted(), 1);
	EXPECT_EQ(DRefused(), 0);
	EXPECT_EQ(DOpen(), 1);
	ProgressFor(wb, Scaled(300));
	EXPECT_EQ(s.connects.load(), 2);
	EXPECT_EQ(s.disconnects.load(), 0) << "closed without A's worker running";
	EXPECT_TRUE(ProgressUntil(wa, [&] { return s.disconnects.load() == 1; },
				  Scaled(5000)));
	EXPECT_EQ(s.orderly.load(), 1);

	// And back: A's next call evicts B's connection.
	EXPECT_EQ(Call(cha, kEcho, &msg), ZCRPC_OK) << msg;
	EXPECT_EQ(DEvicted(), 2);
	EXPECT_EQ(DOpen(), 1);
	EXPECT_EQ(s.connects.load(), 3);
	EXPECT_TRUE(ProgressUntil(wb, [&] { return s.disconnects.load() == 2; },
				  Scaled(5000)));
	EXPECT_EQ(s.orderly.load(), 2);

	zcrpc_channel_destroy(cha);
	zcrpc_channel_destroy(chb);
	EXPECT_EQ(DOpen(), 0);
	zcrpc_worker_destroy(wa);
	zcrpc_worker_destroy(wb);
}

TEST_F(Share, ATargetChannelsIdleClosedBackendsComeBackAtItsNextCalls)
{
	const int idle_ms = static_cast<int>(Scaled(300).count());
	CapServer s0, s1;
	ASSERT_TRUE(s0.Start(env_.addr0));
	ASSERT_TRUE(s1.Start(env_.addr0));
	SetCap(0, idle_ms);
	zcrpc_worker *w = nullptr;
	ASSERT_EQ(zcrpc_worker_create(nullptr, &w), ZCRPC_OK);
	const std::string target = Target({&s0, &s1});
	zcrpc_channel_opts o = ChannelOpts("round_robin");
	zcrpc_channel *ch = nullptr;
	ASSERT_EQ(zcrpc_channel_create_target(w, target.c_str(), &o, &ch), ZCRPC_OK);

	CallsOk(w, ch, 10, "first calls");
	EXPECT_GT(s0.calls.load(), 0);
	EXPECT_GT(s1.calls.load(), 0);
	EXPECT_EQ(s0.connects.load(), 1);
	EXPECT_EQ(s1.connects.load(), 1);

	// Both idle out, in order; the subchannels stay.
	EXPECT_TRUE(ProgressUntil(w, [&] { return DIdleClosed() == 2; },
				  milliseconds(idle_ms) + Scaled(3000)))
		<< DIdleClosed();
	EXPECT_EQ(DOpen(), 0);
	EXPECT_EQ(DSubs(), 1 + 1);
	EXPECT_TRUE(ProgressUntil(
		w,
		[&] { return s0.disconnects.load() == 1 && s1.disconnects.load() == 1; },
		Scaled(5000)));
	EXPECT_EQ(s0.orderly.load(), 1);
	EXPECT_EQ(s1.orderly.load(), 1);
	// Nothing connects them again before a call.
	ProgressFor(w, milliseconds(3 * idle_ms / 2));
	EXPECT_EQ(s0.connects.load(), 1);
	EXPECT_EQ(s1.connects.load(), 1);
	EXPECT_EQ(DOpen(), 0);

	// The next calls bring both back.
	int calls0 = s0.calls.load(), calls1 = s1.calls.load();
	int rounds = 0;
	while (rounds < 10 &&
	       (s0.calls.load() == calls0 || s1.calls.load() == calls1)) {
		CallsOk(w, ch, 4, "calls after the idle close");
		rounds++;
	}
	EXPECT_GT(s0.calls.load(), calls0) << rounds << " rounds";
	EXPECT_GT(s1.calls.load(), calls1) << rounds << " rounds";
	EXPECT_EQ(s0.connects.load(), 2);
	EXPECT_EQ(s1.connects.load(), 2);

	zcrpc_channel_destroy(ch);
	EXPECT_EQ(DOpen(), 0);
	EXPECT_EQ(DSubs(), 0);
	zcrpc_worker_destroy(w);
}

TEST_F(Share, DestroyingASharerWhileTheConnectionIsMadeLeavesTheOthersQueuedCallsToGo)
{
	constexpr int kN = 8;
	CapServer s;
	ASSERT_TRUE(s.Start(env_.addr0));
	zcrpc_worker *w = nullptr;
	ASSERT_EQ(zcrpc_worker_create(nullptr, &w), ZCRPC_OK);
	const std::string target = Target({&s});
	zcrpc_channel_opts o = ChannelOpts();
	zcrpc_channel *a = nullptr, *b = nullptr;
	ASSERT_EQ(zcrpc_channel_create_target(w, target.c_str(), &o, &a), ZCRPC_OK);
	ASSERT_EQ(zcrpc_channel_create_target(w, target.c_str(), &o, &b), ZCRPC_OK);

	// Both channels' calls wait for the connection: no progress yet.
	bool destroying = false;
	Calls ca, cb;
	ca.destroying = &destroying;
	for (int i = 0; i < kN; i++) {
		ASSERT_EQ(ca.Start(a, kEcho), ZCRPC_OK);
		ASSERT_EQ(cb.Start(b, kEcho), ZCRPC_OK);
	}
	EXPECT_EQ(s.connects.load(), 0);
	destroying = true;
	zcrpc_channel_destroy(a);
	destroying = false;
	EXPECT_EQ(ca.live, 0);
	EXPECT_EQ(ca.InDestroy(), kN);
	EXPECT_EQ(ca.Count(ZCRPC_CANCELLED), kN) << ca.FirstNotOk();

	ASSERT_TRUE(ProgressUntil(w, [&] { return cb.live == 0; }, Scaled(10000)))
		<< cb.live << " of B's calls did not complete";
	EXPECT_EQ(cb.Count(ZCRPC_OK), kN) << cb.FirstNotOk();
	EXPECT_EQ(cb.NotOnce(), 0);
	EXPECT_EQ(ca.NotOnce(), 0);
	ProgressFor(w, Scaled(200));
	EXPECT_EQ(s.calls.load(), kN) << "A's queued calls never went out";
	EXPECT_EQ(s.connects.load(), 1);
	EXPECT_EQ(s.disconnects.load(), 0);
	EXPECT_EQ(DSubs(), 1);
	EXPECT_EQ(DShares(), 0);

	zcrpc_channel_destroy(b);
	EXPECT_EQ(DSubs(), 0);
	EXPECT_EQ(DOpen(), 0);
	zcrpc_worker_destroy(w);
}

TEST_F(Share, AnEvictedSharedConnectionComesBackForEverySharer)
{
	CapServer s0, s1;
	ASSERT_TRUE(s0.Start(env_.addr0));
	ASSERT_TRUE(s1.Start(env_.addr0));
	SetCap(1);
	zcrpc_worker *w = nullptr;
	ASSERT_EQ(zcrpc_worker_create(nullptr, &w), ZCRPC_OK);
	const std::string target = Target({&s0});
	zcrpc_channel_opts o = ChannelOpts();
	zcrpc_channel *a = nullptr, *b = nullptr, *p = nullptr;
	ASSERT_EQ(zcrpc_channel_create_target(w, target.c_str(), &o, &a), ZCRPC_OK);
	ASSERT_EQ(zcrpc_channel_create_target(w, target.c_str(), &o, &b), ZCRPC_OK);
	ASSERT_EQ(zcrpc_channel_create(w, env_.addr0.c_str(), s1.port().c_str(),
				       &o, &p),
		  ZCRPC_OK);

	std::string msg;
	EXPECT_EQ(Call(a, kEcho, &msg), ZCRPC_OK) << msg;
	EXPECT_EQ(Call(b, kEcho, &msg), ZCRPC_OK) << msg;
	EXPECT_EQ(s0.connects.load(), 1);
	EXPECT_EQ(DOpen(), 1);
	EXPECT_EQ(DSubs(), 1);
	EXPECT_EQ(DShares(), 1);

	// The plain channel takes the shared connection's place.
	EXPECT_EQ(Call(p, kEcho, &msg), ZCRPC_OK) << msg;
	EXPECT_EQ(DEvicted(), 1);
	EXPECT_EQ(DOpen(), 1);
	EXPECT_TRUE(ProgressUntil(w, [&] { return s0.disconnects.load() == 1; },
				  Scaled(5000)));
	EXPECT_EQ(s0.orderly.load(), 1);
	EXPECT_EQ(DSubs(), 1) << "the subchannel stays, without its connection";
	EXPECT_EQ(DShares(), 1);

	// B's call makes it again (evicting P's); A uses it as it is.
	EXPECT_EQ(Call(b, kEcho, &msg), ZCRPC_OK) << msg;
	EXPECT_EQ(DEvicted(), 2);
	EXPECT_EQ(s0.connects.load(), 2);
	EXPECT_TRUE(ProgressUntil(w, [&] { return s1.disconnects.load() == 1; },
				  Scaled(5000)));
	EXPECT_EQ(s1.orderly.load(), 1);
	EXPECT_EQ(Call(a, kEcho, &msg), ZCRPC_OK) << msg;
	ProgressFor(w, Scaled(200));
	EXPECT_EQ(s0.connects.load(), 2);
	EXPECT_EQ(DEvicted(), 2);
	EXPECT_EQ(DOpen(), 1);
	EXPECT_EQ(DRefused(), 0);

	zcrpc_channel_destroy(a);
	zcrpc_channel_destroy(b);
	zcrpc_channel_destroy(p);
	EXPECT_EQ(DOpen(), 0);
	EXPECT_EQ(DSubs(), 0);
	EXPECT_EQ(DShares(), 0);
	zcrpc_worker_destroy(w);
}

TEST_F(Share, ATargetChannelsCallAtTheCapWithNoneIdleIsRefusedResourceExhausted)
{
	CapServer s;
	ASSERT_TRUE(s.Start(env_.addr0));
	SetCap(1);
	zcrpc_worker *w = nullptr;
	ASSERT_EQ(zcrpc_worker_create(nullptr, &w), ZCRPC_OK);
	zcrpc_channel_opts o = ChannelOpts();
	zcrpc_channel *p = nullptr, *t = nullptr;
	ASSERT_EQ(zcrpc_channel_create(w, env_.addr0.c_str(), s.port().c_str(),
				       &o, &p),
		  ZCRPC_OK);
	s.hold = true;
	Calls cp;
	ASSERT_EQ(cp.Start(p, kHold), ZCRPC_OK);
	ASSERT_TRUE(ProgressUntil(w, [&] { return s.held.load() == 1; },
				  Scaled(10000)));

	// pick_first: the call's own attempt is refused.
	const std::string target = Target({&s});
	ASSERT_EQ(zcrpc_channel_create_target(w, target.c_str(), &o, &t), ZCRPC_OK);
	std::string msg;
	EXPECT_EQ(Call(t, kEcho, &msg), ZCRPC_RESOURCE_EXHAUSTED) << msg;
	EXPECT_NE(msg.find("connection cap"), std::string::npos) << msg;
	EXPECT_EQ(DRefused(), 1);
	EXPECT_EQ(DOpen(), 1);
	EXPECT_EQ(s.connects.load(), 1);

	// Once P's call is answered its connection is idle and gives way.
	s.hold = false;
	ASSERT_TRUE(ProgressUntil(w, [&] { return cp.live == 0; }, Scaled(10000)));
	EXPECT_EQ(cp.Count(ZCRPC_OK), 1) << cp.FirstNotOk();
	EXPECT_EQ(Call(t, kEcho, &msg), ZCRPC_OK) << msg;
	EXPECT_EQ(DEvicted(), 1);
	EXPECT_EQ(DOpen(), 1);
	EXPECT_TRUE(ProgressUntil(w, [&] { return s.disconnects.load() == 1; },
				  Scaled(5000)));
	EXPECT_EQ(s.orderly.load(), 1);

	zcrpc_channel_destroy(t);
	zcrpc_channel_destroy(p);
	EXPECT_EQ(DOpen(), 0);
	zcrpc_worker_destroy(w);
}

TEST_F(Share, ARoundRobinChannelsCallAtTheCapWithNoneIdleIsRefusedResourceExhaustedToo)
{
	CapServer s;
	ASSERT_TRUE(s.Start(env_.addr0));
	SetCap(1);
	zcrpc_worker *w = nullptr;
	ASSERT_EQ(zcrpc_worker_create(nullptr, &w), ZCRPC_OK);
	zcrpc_channel_opts o = ChannelOpts();
	zcrpc_channel *p = nullptr, *t = nullptr;
	ASSERT_EQ(zcrpc_channel_create(w, env_.addr0.c_str(), s.port().c_str(),
				       &o, &p),
		  ZCRPC_OK);
	s.hold = true;
	Calls cp;
	ASSERT_EQ(cp.Start(p, kHold), ZCRPC_OK);
	ASSERT_TRUE(ProgressUntil(w, [&] { return s.held.load() == 1; },
				  Scaled(10000)));

	// round_robin connects its backends from its timer too; those
	// connections are refused, and so is the call, for the same reason.
	zcrpc_channel_opts orr = ChannelOpts("round_robin");
	const std::string target = Target({&s});
	ASSERT_EQ(zcrpc_channel_create_target(w, target.c_str(), &orr, &t),
		  ZCRPC_OK);
	ProgressFor(w, Scaled(200));
	std::string msg;
	zcrpc_status st = Call(t, kEcho, &msg);
	EXPECT_EQ(st, ZCRPC_RESOURCE_EXHAUSTED)
		<< zcrpc_status_str(st) << ": " << msg;
	EXPECT_NE(msg.find("connection cap"), std::string::npos) << msg;
	EXPECT_GE(DRefused(), 1);
	EXPECT_EQ(DOpen(), 1);
	EXPECT_EQ(s.connects.load(), 1);
	// Refused, the backend stays IDLE (no backoff) and is not connected
	// again until the channel makes another call: no refusals meanwhile.
	const int64_t refused = DRefused();
	ProgressFor(w, Scaled(500));
	EXPECT_EQ(DRefused(), refused);

	// Once P's call is answered its connection is idle: the next call
	// gets through, as a plain channel's does.
	s.hold = false;
	ASSERT_TRUE(ProgressUntil(w, [&] { return cp.live == 0; }, Scaled(10000)));
	st = Call(t, kEcho, &msg);
	EXPECT_EQ(st, ZCRPC_OK) << zcrpc_status_str(st) << ": " << msg;
	EXPECT_TRUE(ProgressUntil(w, [&] { return DEvicted() == 1; }, Scaled(3000)));
	EXPECT_EQ(DOpen(), 1);
	std::printf("round_robin at the cap: %lld connections refused\n",
		    static_cast<long long>(DRefused()));

	zcrpc_channel_destroy(t);
	zcrpc_channel_destroy(p);
	EXPECT_EQ(DOpen(), 0);
	zcrpc_worker_destroy(w);
}

TEST_F(Share, AServerGoingAwayGivesItsConnectionsPlaceBackUnderTheCap)
{
	auto s = std::make_unique<CapServer>();
	CapServer s2;
	ASSERT_TRUE(s->Start(env_.addr0));
	ASSERT_TRUE(s2.Start(env_.addr0));
	SetCap(1);
	zcrpc_worker *w = nullptr;
	ASSERT_EQ(zcrpc_worker_create(nullptr, &w), ZCRPC_OK);
	zcrpc_channel_opts o = ChannelOpts();
	zcrpc_channel *ch1 = nullptr, *ch2 = nullptr;
	ASSERT_EQ(zcrpc_channel_create(w, env_.addr0.c_str(),
				       s->port().c_str(), &o, &ch1),
		  ZCRPC_OK);
	ASSERT_EQ(zcrpc_channel_create(w, env_.addr0.c_str(),
				       s2.port().c_str(), &o, &ch2),
		  ZCRPC_OK);
	std::string msg;
	EXPECT_EQ(Call(ch1, kEcho, &msg), ZCRPC_OK) << msg;
	EXPECT_EQ(DOpen(), 1);

	// A graceful shutdown (GOAWAY, then the close) of ch1's idle
	// connection: its place is free again.
	s->Shutdown(static_cast<int>(Scaled(1000).count()), w);
	EXPECT_TRUE(ProgressUntil(w, [&] { return DOpen() == 0; }, Scaled(5000)))
		<< DOpen();
	s.reset();
	EXPECT_EQ(Call(ch2, kEcho, &msg), ZCRPC_OK) << msg;
	EXPECT_EQ(DEvicted(), 0);
	EXPECT_EQ(DRefused(), 0);
	EXPECT_EQ(DOpen(), 1);

	zcrpc_channel_destroy(ch1);
	zcrpc_channel_destroy(ch2);
	EXPECT_EQ(DOpen(), 0);
	zcrpc_worker_destroy(w);
}

TEST_F(Share, AnOpenStreamKeepsItsConnectionFromEvictionAndTheIdleTimeout)
{
	const int idle_ms = static_cast<int>(Scaled(300).count());
	CapServer s;
	ASSERT_TRUE(s.Start(env_.addr0));
	SetCap(1);
	zcrpc_worker *w = nullptr;
	ASSERT_EQ(zcrpc_worker_create(nullptr, &w), ZCRPC_OK);
	zcrpc_channel_opts o = ChannelOpts();
	zcrpc_channel *ch1 = nullptr, *ch2 = nullptr;
	ASSERT_EQ(zcrpc_channel_create(w, env_.addr0.c_str(), s.port().c_str(),
				       &o, &ch1),
		  ZCRPC_OK);
	ASSERT_EQ(zcrpc_channel_create(w, env_.addr0.c_str(), s.port().c_str(),
				       &o, &ch2),
		  ZCRPC_OK);

	struct Echoes {
		int messages = 0, finished = 0;
		zcrpc_status status = ZCRPC_UNKNOWN;
	};
	zcrpc_stream_handlers h{};
	h.size = sizeof(h);
	h.on_message = [](zcrpc_stream *, const void *, size_t, void *a) {
		static_cast<Echoes *>(a)->messages++;
	};
	h.on_finish = [](zcrpc_stream *, const zcrpc_stream_end *e, void *a) {
		static_cast<Echoes *>(a)->finished++;
		static_cast<Echoes *>(a)->status = e->status;
	};
	// Opens a stream on ch1 and has one message echoed.
	auto open = [&](Echoes *e, zcrpc_stream **st) {
		h.arg = e;
		ASSERT_EQ(zcrpc_stream_start(ch1, zcrpc_method_id(kStream),
					     nullptr, &h, st),
			  ZCRPC_OK);
		ASSERT_EQ(zcrpc_stream_write(*st, "one", 3), ZCRPC_OK);
		ASSERT_TRUE(ProgressUntil(w, [&] { return e->messages == 1; },
					  Scaled(10000)));
	};
	auto finish = [&](Echoes *e, zcrpc_stream *st) {
		ASSERT_EQ(zcrpc_stream_close_send(st), ZCRPC_OK);
		ASSERT_TRUE(ProgressUntil(w, [&] { return e->finished == 1; },
					  Scaled(10000)));
		EXPECT_EQ(e->status, ZCRPC_OK);
	};

	// At the cap with the stream open: nothing to evict.
	Echoes e1;
	zcrpc_stream *st = nullptr;
	open(&e1, &st);
	std::string msg;
	EXPECT_EQ(Call(ch2, kEcho, &msg), ZCRPC_RESOURCE_EXHAUSTED) << msg;
	EXPECT_NE(msg.find("connection cap"), std::string::npos) << msg;
	EXPECT_EQ(DRefused(), 1);
	EXPECT_EQ(DEvicted(), 0);
	finish(&e1, st);
	EXPECT_EQ(Call(ch2, kEcho, &msg), ZCRPC_OK) << msg;
	EXPECT_EQ(DEvicted(), 1);
	EXPECT_TRUE(ProgressUntil(w, [&] { return s.disconnects.load() == 1; },
				  Scaled(5000)));

	// No cap, an idle timeout: an open stream is not idle, however long
	// nothing moves on it.
	zcrpc_channel_destroy(ch2);
	SetCap(0, idle_ms);
	Echoes e2;
	open(&e2, &st);
	ProgressFor(w, milliseconds(3 * idle_ms / 2));
	EXPECT_EQ(DIdleClosed(), 0);
	EXPECT_EQ(s.disconnects.load(), 2); // ch2's, at its destroy
	finish(&e2, st);
	EXPECT_TRUE(ProgressUntil(w, [&] { return DIdleClosed() == 1; },
				  milliseconds(idle_ms) + Scaled(3000)));
	EXPECT_TRUE(ProgressUntil(w, [&] { return s.disconnects.load() == 3; },
				  Scaled(5000)));
	EXPECT_EQ(s.orderly.load(), 3);
	EXPECT_EQ(DOpen(), 0);

	zcrpc_channel_destroy(ch1);
	zcrpc_worker_destroy(w);
}

TEST_F(Share, TwoThreadsAtACapOfOneEvictEachOtherByTurnsAndRaceWithoutLoss)
{
	constexpr int kTurns = 6;
	CapServer s;
	ASSERT_TRUE(s.Start(env_.addr0));
	SetCap(1);
	const uint32_t cap = base_.open + 1;
	// Phase 1: the threads call by turns (each call finds the other's
	// connection idle and takes its place); phase 2: both call freely.
	std::atomic<int> ready{0}, turn{0}, running{2};
	std::atomic<uint32_t> max_open{0};
	zcrpc_conn_cap_stats before_free{}; // when phase 1 ended
	struct Tally {
		int ok[3] = {}, refused[3] = {}, other = 0;
		std::string other_why;
	} tally[2];
	auto client = [&](int me) {
		Tally *t = &tally[me];
		zcrpc_worker *w = nullptr;
		zcrpc_channel *ch = nullptr;
		zcrpc_channel_opts o = ChannelOpts();
		bool set = zcrpc_worker_create(nullptr, &w) == ZCRPC_OK &&
			   zcrpc_channel_create(w, env_.addr0.c_str(),
						s.port().c_str(), &o,
						&ch) == ZCRPC_OK;
		ready++;
		while (set && ready.load() < 2)
			std::this_thread::sleep_for(1ms);
		auto call = [&](int ph) {
			std::string msg;
			zcrpc_status st = Call(ch, kEcho, &msg);
			if (st == ZCRPC_OK)
				t->ok[ph]++;
			else if (st == ZCRPC_RESOURCE_EXHAUSTED &&
				 msg.find("connection cap") != std::string::npos)
				t->refused[ph]++;
			else if (t->other++ == 0)
				t->other_why = std::string(zcrpc_status_str(st)) +
					       ": " + msg;
		};
		auto end = steady_clock::now() + Scaled(20000);
		for (int i = 0; set && i < kTurns && steady_clock::now() < end;
		     i++) {
			// wait for my turn, the worker turning (an eviction's
			// post runs)
			ProgressUntil(w, [&] { return turn.load() % 2 == me; },
				      duration_cast<milliseconds>(
					      end - steady_clock::now()));
			call(1);
			if (turn.load() == 2 * kTurns - 1) // the last one
				before_free = CapStats();
			turn++;
		}
		// both done with phase 1, then free for a while
		ProgressUntil(w, [&] { return turn.load() >= 2 * kTurns; },
			      Scaled(5000));
		auto free_end = steady_clock::now() + Scaled(300);
		while (set && steady_clock::now() < free_end)
			call(2);
		zcrpc_channel_destroy(ch);
		zcrpc_worker_destroy(w);
		running--;
	};
	std::thread t0(client, 0), t1(client, 1);
	while (running.load() > 0) {
		uint32_t open = CapStats().open;
		if (open > max_open.load())
			max_open = open;
		std::this_thread::sleep_for(1ms);
	}
	t0.join();
	t1.join();

	for (int i = 0; i < 2; i++) {
		SCOPED_TRACE("thread " + std::to_string(i));
		EXPECT_EQ(tally[i].ok[1], kTurns) << "by turns, every call OK";
		EXPECT_EQ(tally[i].refused[1], 0);
		EXPECT_EQ(tally[i].other, 0) << tally[i].other_why;
	}
	EXPECT_GT(tally[0].ok[2] + tally[1].ok[2], 0);
	std::printf("by turns: ok %d+%d; freely: ok %d+%d refused %d+%d; "
		    "evicted %lld (by turns %lld), refused %lld, connects %d, "
		    "max open %u (cap %u)\n",
		    tally[0].ok[1], tally[1].ok[1], tally[0].ok[2],
		    tally[1].ok[2], tally[0].refused[2], tally[1].refused[2],
		    static_cast<long long>(DEvicted()),
		    static_cast<long long>(before_free.evicted - base_.evicted),
		    static_cast<long long>(DRefused()), s.connects.load(),
		    max_open.load(), cap);
	// By turns: each call but the first took the other's place.
	EXPECT_EQ(before_free.evicted - base_.evicted, 2u * kTurns - 1);
	EXPECT_LE(max_open.load(), cap);
	EXPECT_EQ(DRefused(), tally[0].refused[2] + tally[1].refused[2]);
	EXPECT_EQ(DOpen(), 0);
	// Each connection beyond the first took an idle one's place, but
	// one made after the other thread's channel went.
	EXPECT_GE(s.connects.load(), 1 + DEvicted());
	EXPECT_LE(s.connects.load(), 2 + DEvicted());
	auto end = steady_clock::now() + Scaled(5000);
	while (s.disconnects.load() < s.connects.load() &&
	       steady_clock::now() < end)
		std::this_thread::sleep_for(5ms);
	EXPECT_EQ(s.disconnects.load(), s.connects.load());
	EXPECT_EQ(s.orderly.load(), s.disconnects.load());
}
