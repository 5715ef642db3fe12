// Connection limits over rxe (issue 13, items 5 and 6; docs/design.md,
// Admission): a per-source connection limit, so one client holding idle
// connections cannot lock out the others; the idle timeout of connections
// that never made a call; max_connections; and the REJECT hello's status and
// reason, which the client reports, for each limit and for a connection the
// server's pool cannot take. The guest has two rxe devices with an address
// each: the "hostile" connections come from one (zcrpc_connect_opts.src_addr)
// and the legitimate client from the other.
#include <atomic>
#include <cstdio>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "call_load.h"
#include "rdma_env.h"
#include "server_thread.h"
#include "zcrpc/rpc.h"

using namespace std::chrono;
using namespace std::chrono_literals;

namespace
{

const char *kEcho = "/zcrpc.test.Limits/Echo";

uint8_t Pat(uint64_t seed, uint64_t k)
{
	return static_cast<uint8_t>(
		(seed * 0x9E3779B1u + k * 131u + (k >> 9)) >> 5);
}

// An RPC Echo server on its own worker and thread; what on_disconnect saw.
class Server
{
      public:
	zcrpc_worker *w = nullptr;
	zcrpc_server *s = nullptr;
	std::atomic<int> connects{0}, disconnects{0}, idle_closes{0};

	static zcrpc_server_opts Opts()
	{
		zcrpc_server_opts o;
		zcrpc_server_opts_init(&o);
		o.window = 64; // quick setups: the limits are under test, not
			       // the window
		return o;
	}
	bool Start(const std::string &addr, zcrpc_server_opts o,
		   const zcrpc_worker_opts *wo = nullptr)
	{
		o.on_connect = [](zcrpc_server *, zcrpc_conn *, void *a) {
			static_cast<Server *>(a)->connects++;
		};
		o.on_disconnect = [](zcrpc_server *, zcrpc_conn *,
				     zcrpc_status why, void *a) {
			auto *self = static_cast<Server *>(a);
			self->disconnects++;
			if (why == ZCRPC_DEADLINE_EXCEEDED)
				self->idle_closes++;
		};
		o.arg = this;
		if (zcrpc_worker_create(wo, &w) != ZCRPC_OK ||
		    zcrpc_server_create(w, &o, &s) != ZCRPC_OK ||
		    zcrpc_server_register(s, kEcho, Echo, this) != ZCRPC_OK ||
		    zcrpc_server_listen(s, addr.c_str(), "0") != ZCRPC_OK)
			return false;
		thread_ = std::thread([this] {
			while (!stop_.load(std::memory_order_relaxed))
				zcrpc_worker_progress(w, 1);
		});
		return true;
	}
	uint16_t port() const
	{
		return zcrpc_server_get_port(s);
	}
	std::string port_str() const
	{
		return std::to_string(port());
	}
	// The worker's and the server's counters, read on the worker's thread.
	void Stats(zcrpc_worker_stats *ws, zcrpc_server_stats *ss = nullptr)
	{
		struct Snap {
			Server *self;
			zcrpc_worker_stats *ws;
			zcrpc_server_stats *ss;
			std::atomic<bool> done{false};
		} snap{this, ws, ss};
		ASSERT_EQ(zcrpc_worker_post(
				  w,
				  [](zcrpc_worker *wk, void *a) {
					  auto *sn = static_cast<Snap *>(a);
					  zcrpc_worker_get_stats(
						  wk, sn->ws, sizeof(*sn->ws));
					  if (sn->ss)
						  zcrpc_server_get_stats(
							  sn->self->s, sn->ss,
							  sizeof(*sn->ss));
					  sn->done = true;
				  },
				  &snap),
			  ZCRPC_OK);
		while (!snap.done.load())
			std::this_thread::sleep_for(1ms);
	}
	zcrpc_worker_stats WorkerStats()
	{
		zcrpc_worker_stats ws{};
		Stats(&ws);
		return ws;
	}
	zcrpc_server_stats ServerStats()
	{
		zcrpc_worker_stats ws{};
		zcrpc_server_stats ss{};
		Stats(&ws, &ss);
		return ss;
	}
	// Waits (sleeping) until the server holds @n connections in all.
	bool WaitConns(uint32_t n, milliseconds t)
	{
		auto end = steady_clock::now() + t;
		while (WorkerStats().conns != n && steady_clock::now() < end)
			std::this_thread::sleep_for(5ms);
		return WorkerStats().conns == n;
	}
	~Server()
	{
		stop_ = true;
		if (thread_.joinable())
			thread_.join();
		zcrpc_server_destroy(s);
		zcrpc_worker_destroy(w);
	}

      private:
	static void Echo(zcrpc_server_call *c, const zcrpc_request *r, void *)
	{
		zcrpc_server_call_reply(c, ZCRPC_OK, nullptr, r->data, r->len,
					nullptr);
	}
	std::atomic<bool> stop_{false};
	std::thread thread_;
};

// A transport-level client connection: the "hostile" idle ones, and the
// view of a rejected one (its status and detail).
struct Conn {
	zcrpc_conn *conn = nullptr;
	int established = 0, closed = 0;
	zcrpc_status status = ZCRPC_OK;
	std::string detail;
	steady_clock::time_point up_at, closed_at;

	static void OnState(zcrpc_conn *c, zcrpc_conn_state st, zcrpc_status s,
			    void *arg)
	{
		auto *self = static_cast<Conn *>(arg);
		if (st == ZCRPC_CONN_ESTABLISHED) {
			self->established++;
			self->up_at = steady_clock::now();
		}
		if (st == ZCRPC_CONN_CLOSED) {
			self->closed++;
			self->status = s;
			self->detail = zcrpc_conn_get_error(c);
			self->closed_at = steady_clock::now();
		}
	}
	static void OnRecv(zcrpc_conn *, const void *, size_t, void *)
	{
	}
	zcrpc_status Start(zcrpc_worker *w, const std::string &addr,
			   uint16_t port, const std::string &src)
	{
		zcrpc_connect_opts o;
		zcrpc_connect_opts_init(&o);
		o.src_addr = src.empty() ? nullptr : src.c_str();
		o.timeout_ms = static_cast<int>(Scaled(20000).count());
		zcrpc_conn_handlers h{sizeof(h), OnState, OnRecv, this};
		return zcrpc_connect(w, addr.c_str(),
				     std::to_string(port).c_str(), &o, &h,
				     &conn);
	}
	bool done() const
	{
		return established || closed;
	}
	~Conn()
	{
		zcrpc_conn_destroy(conn);
	}
};

// A channel client from @src making verified Echo calls.
struct Channel {
	zcrpc_worker *w = nullptr;
	zcrpc_channel *ch = nullptr;
	Channel(zcrpc_worker *wk, const std::string &addr, uint16_t port,
		const std::string &src)
	    : w(wk)
	{
		zcrpc_channel_opts o;
		zcrpc_channel_opts_init(&o);
		o.src_addr = src.c_str();
		o.window = 64;
		o.max_calls = 256;
		o.connect_timeout_ms = static_cast<int>(Scaled(20000).count());
		EXPECT_EQ(zcrpc_channel_create(w, addr.c_str(),
					       std::to_string(port).c_str(), &o,
					       &ch),
			  ZCRPC_OK);
	}
	~Channel()
	{
		zcrpc_channel_destroy(ch);
	}
	// One Echo of @n patterned bytes. OK only when the reply is the
	// request byte for byte; otherwise the status, and @msg the message.
	zcrpc_status Call(size_t n, uint64_t seed, std::string *msg = nullptr,
			  const char *method = kEcho)
	{
		struct Res {
			int calls = 0;
			zcrpc_status st = ZCRPC_UNKNOWN;
			std::string msg;
			std::vector<uint8_t> data;
		} res;
		std::vector<uint8_t> req(n);
		for (size_t k = 0; k < n; k++)
			req[k] = Pat(seed, k);
		zcrpc_call_opts co;
		zcrpc_call_opts_init(&co);
		co.timeout_us = Scaled(20000).count() * 1000;
		EXPECT_EQ(
			zcrpc_call_async(
				ch, zcrpc_method_id(method), req.data(), n, &co,
				[](zcrpc_channel *, const zcrpc_reply *r,
				   void *a) {
					auto *rs = static_cast<Res *>(a);
					rs->calls++;
					rs->st = r->status;
					rs->msg = r->message ? r->message : "";
					auto *d = static_cast<const uint8_t *>(
						r->data);
					rs->data.assign(d, d + r->len);
				},
				&res, nullptr),
			ZCRPC_OK);
		// The call's own deadline ends it: never leaves @res behind.
		while (!res.calls)
			zcrpc_worker_progress(w, 1);
		if (msg)
			*msg = res.msg;
		if (res.st == ZCRPC_OK && res.data != req) {
			if (msg)
				*msg = "reply payload differs";
			return ZCRPC_DATA_LOSS;
		}
		return res.st;
	}
};

class Limits : public RdmaTest
{
      protected:
	void SetUp() override
	{
		RdmaTest::SetUp();
		ASSERT_FALSE(env_.addr1.empty()) << "ZCRPC_RXE_ADDR1 unset";
		ASSERT_EQ(zcrpc_worker_create(nullptr, &w_), ZCRPC_OK);
	}
	void TearDown() override
	{
		zcrpc_worker_destroy(w_);
	}
	bool Wait(const std::function<bool()> &f, int ms)
	{
		return ProgressUntil(w_, f, Scaled(ms));
	}
	// @n connections from @src, all ESTABLISHED (asserted by the caller
	// through the return value: how many came up).
	int Open(std::vector<std::unique_ptr<Conn>> &v, int n,
		 const Server &srv, const std::string &src)
	{
		for (int i = 0; i < n; i++) {
			v.emplace_back(new Conn);
			EXPECT_EQ(v.back()->Start(w_, env_.addr0, srv.port(),
						  src),
				  ZCRPC_OK);
		}
		Wait(
			[&] {
				for (auto &c : v)
					if (!c->done())
						return false;
				return true;
			},
			60000);
		int up = 0;
		for (auto &c : v) {
			up += c->established && !c->closed;
			EXPECT_EQ(c->established, 1) << c->detail;
		}
		return up;
	}
	zcrpc_worker *w_ = nullptr;
};

} // namespace

// The defaults the documentation gives, and the meaning of 0.
TEST_F(Limits, DefaultsAreSixtyFourPerSourceNoTotalAndThirtySecondsIdle)
{
	zcrpc_listen_opts lo;
	zcrpc_listen_opts_init(&lo);
	EXPECT_EQ(lo.max_connections, 0u);
	EXPECT_EQ(lo.max_conns_per_source, 64u);
	zcrpc_server_opts so;
	zcrpc_server_opts_init(&so);
	EXPECT_EQ(so.max_connections, 0u);
	EXPECT_EQ(so.max_conns_per_source, 64u);
	EXPECT_EQ(so.idle_timeout_ms, 30000);
	so.idle_timeout_ms = -1;
	zcrpc_server *s = nullptr;
	EXPECT_EQ(zcrpc_server_create(w_, &so, &s), ZCRPC_INVALID_ARGUMENT);
	EXPECT_EQ(s, nullptr);
}

// Item 5: N idle connections from one source fill its limit; the next one
// from there is rejected RESOURCE_EXHAUSTED with a message naming the limit
// and the address, counted; a client from the other address is still
// served (verified calls); once a hostile connection is gone its source may
// connect again.
TEST_F(Limits,
       IdleConnectionsFromOneSourceFillItsLimitAndAnotherSourceIsStillServed)
{
	const uint32_t kPer = 8;
	Server srv;
	zcrpc_server_opts o = Server::Opts();
	o.max_conns_per_source = kPer;
	o.idle_timeout_ms = 0; // they stay (the idle timeout has its own test)
	ASSERT_TRUE(srv.Start(env_.addr0, o));
	const zcrpc_worker_stats base = srv.WorkerStats();

	std::vector<std::unique_ptr<Conn>> hostile;
	ASSERT_EQ(Open(hostile, kPer, srv, env_.addr1), static_cast<int>(kPer));
	ASSERT_TRUE(srv.WaitConns(kPer, Scaled(10000)));

	// One more from the same source: rejected, and the client reads why.
	Conn extra;
	ASSERT_EQ(extra.Start(w_, env_.addr0, srv.port(), env_.addr1),
		  ZCRPC_OK);
	ASSERT_TRUE(Wait([&] { return extra.done(); }, 20000));
	EXPECT_EQ(extra.established, 0);
	EXPECT_EQ(extra.status, ZCRPC_RESOURCE_EXHAUSTED) << extra.detail;
	const std::string want = "server rejected the connection: "
				 "RESOURCE_EXHAUSTED: per-source "
				 "connection limit of 8 reached for " +
				 env_.addr1;
	EXPECT_EQ(extra.detail, want);
	// A channel from there reports it in its call's message (255 bytes
	// since ChannelsBeyondWhatTheReceiveBudgetGuaranteesAreRejectedNamingIt
	// showed 127 cutting the reason).
	{
		Channel ch(w_, env_.addr0, srv.port(), env_.addr1);
		std::string msg;
		EXPECT_EQ(ch.Call(16, 1, &msg), ZCRPC_UNAVAILABLE);
		EXPECT_NE(msg.find("server rejected the connection: "
				   "RESOURCE_EXHAUSTED: "
				   "per-source connection limit of 8"),
			  std::string::npos)
			<< msg;
	}

	// The legitimate client, from the other address: served, verified.
	{
		Channel legit(w_, env_.addr0, srv.port(), env_.addr0);
		for (uint64_t i = 0; i < 50; i++) {
			std::string msg;
			ASSERT_EQ(legit.Call(1 + i * 37, i, &msg), ZCRPC_OK)
				<< "call " << i << ": " << msg;
		}
		zcrpc_channel_stats cs;
		zcrpc_channel_get_stats(legit.ch, &cs, sizeof(cs));
		EXPECT_EQ(cs.calls_failed, 0u);
		EXPECT_EQ(cs.reconnects, 0u);
	}
	for (auto &c : hostile)
		EXPECT_EQ(c->closed, 0)
			<< "a hostile connection was closed: " << c->detail;
	zcrpc_worker_stats st = srv.WorkerStats();
	EXPECT_EQ(st.rejected_source_limit - base.rejected_source_limit,
		  2u); // Conn + channel
	EXPECT_EQ(st.rejected_conn_limit, base.rejected_conn_limit);
	EXPECT_EQ(st.rejected_busy, base.rejected_busy);

	// One hostile connection closes: its source may connect once more.
	zcrpc_conn_close(hostile.back()->conn);
	ASSERT_TRUE(Wait([&] { return hostile.back()->closed > 0; }, 10000));
	ASSERT_TRUE(srv.WaitConns(kPer - 1, Scaled(10000)));
	Conn again;
	ASSERT_EQ(again.Start(w_, env_.addr0, srv.port(), env_.addr1),
		  ZCRPC_OK);
	ASSERT_TRUE(Wait([&] { return again.done(); }, 20000));
	EXPECT_EQ(again.established, 1) << again.detail;
	EXPECT_EQ(again.closed, 0) << again.detail;
}

// Item 5: a connection that never makes a call is closed at idle_timeout_ms
// and its client reads DEADLINE_EXCEEDED; one that made a call stays.
TEST_F(Limits,
       AConnectionThatNeverCallsIsClosedAtTheIdleTimeoutOneThatCalledIsNot)
{
	const int kIdleMs = static_cast<int>(Scaled(1500).count());
	Server srv;
	zcrpc_server_opts o = Server::Opts();
	o.idle_timeout_ms = kIdleMs;
	ASSERT_TRUE(srv.Start(env_.addr0, o));

	Conn silent;
	ASSERT_EQ(silent.Start(w_, env_.addr0, srv.port(), env_.addr1),
		  ZCRPC_OK);
	Channel caller(w_, env_.addr0, srv.port(), env_.addr0);
	std::string msg;
	ASSERT_EQ(caller.Call(100, 7, &msg), ZCRPC_OK) << msg;
	ASSERT_TRUE(Wait([&] { return silent.done(); }, 20000));
	ASSERT_EQ(silent.established, 1) << silent.detail;

	// The silent one goes at the timeout, not before (the server's clock
	// started at its accept, a little before our ESTABLISHED).
	ASSERT_TRUE(Wait([&] { return silent.closed > 0; }, kIdleMs + 10000));
	auto lived =
		duration_cast<milliseconds>(silent.closed_at - silent.up_at)
			.count();
	EXPECT_GE(lived, kIdleMs - 200);
	EXPECT_LE(lived, kIdleMs + Scaled(5000).count());
	EXPECT_EQ(silent.status, ZCRPC_DEADLINE_EXCEEDED) << silent.detail;
	EXPECT_NE(silent.detail.find("DEADLINE_EXCEEDED"), std::string::npos)
		<< silent.detail;

	// The caller idles well past the timeout, then calls on the same
	// connection.
	ProgressUntil(
		w_, [] { return false; }, milliseconds(2 * kIdleMs));
	ASSERT_EQ(caller.Call(2000, 8, &msg), ZCRPC_OK) << msg;
	zcrpc_channel_stats cs;
	zcrpc_channel_get_stats(caller.ch, &cs, sizeof(cs));
	EXPECT_EQ(cs.reconnects, 0u)
		<< "the connection that had called was closed";
	EXPECT_EQ(cs.calls_failed, 0u);

	zcrpc_server_stats ss = srv.ServerStats();
	EXPECT_EQ(ss.idle_closed, 1u);
	EXPECT_EQ(ss.connections, 1u);
	EXPECT_EQ(srv.idle_closes.load(),
		  1); // on_disconnect saw DEADLINE_EXCEEDED
	EXPECT_EQ(srv.connects.load(), 2);
}

// Item 6: at max_connections the next request is rejected RESOURCE_EXHAUSTED
// with the limit in its message, counted, from any source; after one
// connection closes a new one is accepted.
TEST_F(Limits,
       MaxConnectionsRejectsTheNextWithItsStatusAndMessageUntilOneCloses)
{
	const uint32_t kMax = 3;
	Server srv;
	zcrpc_server_opts o = Server::Opts();
	o.max_connections = kMax;
	o.max_conns_per_source = 0; // unlimited: the total is under test
	ASSERT_TRUE(srv.Start(env_.addr0, o));
	const zcrpc_worker_stats base = srv.WorkerStats();

	std::vector<std::unique_ptr<Conn>> conns;
	ASSERT_EQ(Open(conns, kMax, srv, env_.addr1), static_cast<int>(kMax));
	for (const std::string &src : {env_.addr1, env_.addr0}) {
		Conn extra;
		ASSERT_EQ(extra.Start(w_, env_.addr0, srv.port(), src),
			  ZCRPC_OK);
		ASSERT_TRUE(Wait([&] { return extra.done(); }, 20000));
		EXPECT_EQ(extra.established, 0) << "from " << src;
		EXPECT_EQ(extra.status, ZCRPC_RESOURCE_EXHAUSTED)
			<< extra.detail;
		EXPECT_EQ(extra.detail,
			  "server rejected the connection: RESOURCE_EXHAUSTED: "
			  "connection limit of 3 reached");
	}
	zcrpc_worker_stats st = srv.WorkerStats();
	EXPECT_EQ(st.rejected_conn_limit - base.rejected_conn_limit, 2u);
	EXPECT_EQ(st.rejected_source_limit, base.rejected_source_limit);

	// One of them closes (its client closes it): the
	// next request is accepted and served.
	zcrpc_conn_close(conns.front()->conn);
	ASSERT_TRUE(Wait([&] { return conns.front()->closed > 0; }, 10000));
	ASSERT_TRUE(srv.WaitConns(kMax - 1, Scaled(10000)));
	Channel ch(w_, env_.addr0, srv.port(), env_.addr0);
	std::string msg;
	EXPECT_EQ(ch.Call(512, 3, &msg), ZCRPC_OK) << msg;
	for (size_t i = 1; i < conns.size(); i++)
		EXPECT_EQ(conns[i]->closed, 0) << conns[i]->detail;
	EXPECT_EQ(srv.WorkerStats().rejected_conn_limit -
			  base.rejected_conn_limit,
		  2u);
}

// Item 6: a connection the server's pool has no receive slots for is
// rejected before rdma_accept with RESOURCE_EXHAUSTED and the pool's reason
// (before, the client read only "connection refused (reject reason 28: ...)").
// This exercises per-connection receive posting: a worker whose pool holds
// one connection's receives, not two.
TEST_F(Limits, AConnectionThePoolCannotTakeIsRejectedWithTheReason)
{
	zcrpc_worker_opts wo;
	zcrpc_worker_opts_init(&wo);
	wo.pool_max_slots =
		20; // one connection's guaranteed 16 credits fit once
	Server srv;
	zcrpc_server_opts o = Server::Opts();
	o.window = 200;
	ASSERT_TRUE(srv.Start(env_.addr0, o, &wo));
	const zcrpc_worker_stats base = srv.WorkerStats();

	Conn first, second;
	ASSERT_EQ(first.Start(w_, env_.addr0, srv.port(), env_.addr0),
		  ZCRPC_OK);
	ASSERT_TRUE(Wait([&] { return first.done(); }, 20000));
	ASSERT_EQ(first.established, 1) << first.detail;
	ASSERT_EQ(second.Start(w_, env_.addr0, srv.port(), env_.addr0),
		  ZCRPC_OK);
	ASSERT_TRUE(Wait([&] { return second.done(); }, 20000));
	EXPECT_EQ(second.established, 0);
	EXPECT_EQ(second.status, ZCRPC_RESOURCE_EXHAUSTED) << second.detail;
	EXPECT_EQ(second.detail.find("server rejected the connection: "
				     "RESOURCE_EXHAUSTED: the "
				     "worker's pool has no slot for the shared "
				     "receive queue"),
		  0u)
		<< second.detail;
	zcrpc_worker_stats st = srv.WorkerStats();
	EXPECT_EQ(st.rejected_setup - base.rejected_setup, 1u);
	EXPECT_EQ(first.closed, 0) << first.detail;
	// The refused connection gave everything back: the server holds one.
	EXPECT_TRUE(srv.WaitConns(1, Scaled(10000)));
}

TEST_F(Limits, AConnectionTheReceiveBudgetCannotTakeIsRejectedWithTheReason)
{
	zcrpc_worker_opts wo;
	zcrpc_worker_opts_init(&wo);
	wo.recv_budget = 24; // one connection's guaranteed 16 credits fit once
	wo.recv_share = 16;
	Server srv;
	zcrpc_server_opts o = Server::Opts();
	o.window = 200;
	ASSERT_TRUE(srv.Start(env_.addr0, o, &wo));
	const zcrpc_worker_stats base = srv.WorkerStats();

	Conn first, second;
	ASSERT_EQ(first.Start(w_, env_.addr0, srv.port(), env_.addr0),
		  ZCRPC_OK);
	ASSERT_TRUE(Wait([&] { return first.done(); }, 20000));
	ASSERT_EQ(first.established, 1) << first.detail;
	ASSERT_EQ(second.Start(w_, env_.addr0, srv.port(), env_.addr0),
		  ZCRPC_OK);
	ASSERT_TRUE(Wait([&] { return second.done(); }, 20000));
	EXPECT_EQ(second.established, 0);
	EXPECT_EQ(second.status, ZCRPC_RESOURCE_EXHAUSTED) << second.detail;
	EXPECT_EQ(second.detail.find("server rejected the connection: "
				     "RESOURCE_EXHAUSTED: the "
				     "worker's receive budget on "),
		  0u)
		<< second.detail;
	zcrpc_worker_stats st = srv.WorkerStats();
	EXPECT_EQ(st.rejected_setup - base.rejected_setup, 1u);
	EXPECT_EQ(st.rejected_budget - base.rejected_budget, 1u);
	EXPECT_NE(
		second.detail.find(
			"16 of its 24 receives are promised to 1 connections"),
		std::string::npos)
		<< second.detail;
	EXPECT_EQ(first.closed, 0) << first.detail;
	// The refused connection gave everything back: the server holds one.
	EXPECT_TRUE(srv.WaitConns(1, Scaled(10000)));
}

// Item 6 through the RPC layer: a receive budget of 64 with a guaranteed
// share of 8 takes 8 channels; the 9th channel's call fails UNAVAILABLE and
// its message carries the whole reason, the budget's numbers included
// (before, a call's message held 127 bytes and cut the reason short),
// counted once in rejected_budget; the 8 stay served.
TEST_F(Limits, ChannelsBeyondWhatTheReceiveBudgetGuaranteesAreRejectedNamingIt)
{
	zcrpc_worker_opts wo;
	zcrpc_worker_opts_init(&wo);
	wo.recv_budget = 64;
	wo.recv_share = 8;
	ServerThread srv;
	zcrpc_server_opts o = Server::Opts();
	o.max_conns_per_source = 0;
	ASSERT_TRUE(srv.Start(env_.addr0, o, &wo));
	const zcrpc_worker_stats base = srv.WorkerStats();

	std::vector<std::unique_ptr<Channel>> chs;
	for (int i = 0; i < 8; i++) {
		chs.emplace_back(
			new Channel(w_, env_.addr0, srv.port(), env_.addr0));
		std::string msg;
		ASSERT_EQ(chs.back()->Call(64, i, &msg, kServerThreadEcho),
			  ZCRPC_OK)
			<< "channel " << i << ": " << msg;
	}
	zcrpc_worker_stats st = srv.WorkerStats();
	EXPECT_EQ(st.recv_promised, 64u);
	EXPECT_EQ(st.recv_budget, 64u);

	Channel extra(w_, env_.addr0, srv.port(), env_.addr0);
	std::string msg;
	EXPECT_EQ(extra.Call(64, 99, &msg, kServerThreadEcho),
		  ZCRPC_UNAVAILABLE);
	const std::string want =
		"server rejected the connection: RESOURCE_EXHAUSTED: the "
		"worker's receive budget on " +
		env_.dev0 +
		" is spent: 64 of its 64 receives are promised to 8 "
		"connections";
	EXPECT_NE(msg.find(want), std::string::npos) << msg;
	st = srv.WorkerStats();
	EXPECT_EQ(st.rejected_budget - base.rejected_budget, 1u);
	EXPECT_EQ(st.rejected_setup - base.rejected_setup, 1u);
	EXPECT_EQ(st.conns, 8u);
	for (size_t i = 0; i < chs.size(); i++) {
		ASSERT_EQ(chs[i]->Call(3000, 100 + i, &msg, kServerThreadEcho),
			  ZCRPC_OK)
			<< "channel " << i << ": " << msg;
	}
}

// Item 2 under load: 4 channels keep 48 calls in flight each (a window of
// 64, 8 waiting at most) against a server worker whose budget is 128
// receives, 16 guaranteed per connection (shares double while the budget
// has room, up to 112 promised): the credits run out, so calls wait
// for credit in the channel's queue or are refused RESOURCE_EXHAUSTED when
// it is full, never an RNR (the share of each stays within the budget:
// promised <= posted <= budget); nothing hangs or is lost (every call submitted
// completes once, OK and verified); a channel connecting meanwhile is
// served or rejected naming the budget (counted); once the load stops and
// the peers idle, the promised receives fall back to the guaranteed parts
// (within the RELEASE rule's slack: a peer holding fewer than 5 extra
// credits keeps them, docs/protocol.md §3; the receives posted stay, as
// the queue keeps up to 64 free ones), and after the close nothing is
// posted or promised.
TEST_F(Limits,
       UnderLoadOnASmallReceiveBudgetCallsWaitOrAreRefusedNeverRnrNothingLost)
{
	const uint32_t kShare = 16, kConns = 4, kBudget = 128;
	zcrpc_worker_opts wo;
	zcrpc_worker_opts_init(&wo);
	wo.recv_budget = kBudget;
	wo.recv_share = kShare;
	ServerThread srv;
	zcrpc_server_opts o = Server::Opts();
	o.max_conns_per_source = 0;
	o.idle_timeout_ms = 0;
	ASSERT_TRUE(srv.Start(env_.addr0, o, &wo));
	const zcrpc_worker_stats base = srv.WorkerStats();
	const int64_t rnr0 = RxeCounter(env_, "rcvd_rnr_err") +
			     RxeCounter(env_, "send_rnr_err");

	CallLoadOpts lo;
	lo.channels = kConns;
	lo.depth = 48;
	lo.window = 64;
	lo.max_pending = 8;
	lo.allow_refused = true;
	lo.src = env_.addr1;
	lo.max_len = 1024;
	lo.timeout_us = Scaled(30000).count() * 1000;
	CallLoad load(env_.addr0, srv.port(), lo);
	ASSERT_TRUE(load.Start(Scaled(20000))) << load.FirstError();
	const zcrpc_worker_stats warm = srv.WorkerStats();

	// The load runs; a channel connects in the middle of it.
	const uint64_t target = 3000;
	auto end = steady_clock::now() + Scaled(60000);
	while (load.completed.load() < target / 2 && steady_clock::now() < end)
		std::this_thread::sleep_for(5ms);
	std::string late_msg;
	zcrpc_status late;
	{
		Channel ch(w_, env_.addr0, srv.port(), env_.addr0);
		late = ch.Call(200, 7, &late_msg, kServerThreadEcho);
	}
	while (load.completed.load() < target && steady_clock::now() < end)
		std::this_thread::sleep_for(5ms);
	const zcrpc_worker_stats busy = srv.WorkerStats();
	load.Stop(Scaled(40000));

	EXPECT_GE(load.completed.load(), target) << load.FirstError();
	EXPECT_EQ(load.completed.load(), load.submitted.load())
		<< "calls never completed";
	EXPECT_EQ(load.ok.load(), load.submitted.load()) << load.FirstError();
	EXPECT_EQ(load.failed.load() + load.bad_data.load() + load.twice.load(),
		  0u)
		<< load.FirstError();
	EXPECT_GT(load.refused.load(), 0u)
		<< "the budget never held a call back";
	if (late == ZCRPC_OK) {
		EXPECT_EQ(busy.rejected_budget, base.rejected_budget);
	} else {
		EXPECT_EQ(late, ZCRPC_UNAVAILABLE) << late_msg;
		EXPECT_NE(late_msg.find("RESOURCE_EXHAUSTED: the worker's "
					"receive budget on"),
			  std::string::npos)
			<< late_msg;
		EXPECT_EQ(busy.rejected_budget - base.rejected_budget, 1u);
	}
	EXPECT_LE(busy.recv_promised, busy.recv_posted);
	EXPECT_LE(busy.recv_posted, kBudget);

	// Idle: the extra credits come back (RELEASE) to the guaranteed parts.
	bool back = srv.WaitStats(
		[&](const zcrpc_worker_stats &s) {
			return s.recv_promised <=
			       warm.recv_promised + kConns * 4;
		},
		Scaled(15000));
	zcrpc_worker_stats idle = srv.WorkerStats();
	uint64_t raises = 0, released = 0;
	srv.OnWorker([&] {
		for (zcrpc_conn *c : srv.Conns()) {
			zcrpc_conn_stats cs;
			zcrpc_conn_get_stats(c, &cs, sizeof(cs));
			raises += cs.share_raises;
			released += cs.credits_released;
		}
	});
	const zcrpc_worker_stats ls = load.WorkerStats();
	std::printf("[budget] %llu calls OK, %llu refused (queue full); the "
		    "late channel: %s; "
		    "server receives posted/promised: warm %u/%u, under load "
		    "%u/%u, idle %u/%u "
		    "(budget %u); shares raised %llu times, server released "
		    "%llu credits\n",
		    static_cast<unsigned long long>(load.ok.load()),
		    static_cast<unsigned long long>(load.refused.load()),
		    late == ZCRPC_OK ? "served" : late_msg.c_str(),
		    warm.recv_posted, warm.recv_promised, busy.recv_posted,
		    busy.recv_promised, idle.recv_posted, idle.recv_promised,
		    idle.recv_budget, static_cast<unsigned long long>(raises),
		    static_cast<unsigned long long>(released));
	EXPECT_EQ(warm.recv_promised, kConns * kShare);
	EXPECT_TRUE(back) << "the receives promised stayed at "
			  << idle.recv_promised << " (warm "
			  << warm.recv_promised << ")";
	// Not asserted: whether a share was raised. Under an echo load the
	// server returns each credit with its reply, so the peer's credits in
	// the server's view (held + in flight back) stay above a quarter of
	// the share and the doubling rule (docs/protocol.md §3) rarely fires.
	EXPECT_EQ(idle.rnr_events + ls.rnr_events, 0u);
	std::printf("[budget] rxe RNR counters %lld -> %lld (printed, not "
		    "asserted)\n",
		    static_cast<long long>(rnr0),
		    static_cast<long long>(RxeCounter(env_, "rcvd_rnr_err") +
					   RxeCounter(env_, "send_rnr_err")));

	load.Close();
	ASSERT_TRUE(srv.WaitStats(
		[](const zcrpc_worker_stats &s) { return s.conns == 0; },
		Scaled(15000)));
	zcrpc_worker_stats after = srv.WorkerStats();
	EXPECT_EQ(after.recv_posted, 0u);
	EXPECT_EQ(after.recv_promised, 0u);
	EXPECT_EQ(after.pool_in_use, base.pool_in_use);
	EXPECT_EQ(after.pool_bad_frees, 0u);
}
