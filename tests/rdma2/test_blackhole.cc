// T2: a black-holed server. Guest B drops every RoCE packet (nft: udp dport
// 4791) while its server process runs: connecting to it, and calling on a
// connection that starts dropping, fail by the caller's deadline
// (DEADLINE_EXCEEDED, or UNAVAILABLE when the transport gives up first) —
// far below rdma_cm's own 98 s — with exactly one callback each, none
// later. The nft rule's counter proves the packets were dropped.
#include <chrono>
#include <fstream>
#include <iostream>

#include "rdma2_client.h"
#include "rdma2_env.h"

using namespace std::chrono;

namespace {

constexpr int kDeadlineMs = 2000;

class BlackHole : public Rdma2Test {
protected:
	// Adds the drop rule in guest B (while @c progresses, if given).
	void DropRoce(Rdma2Client *c)
	{
		std::ofstream("rdma2-blackhole.nft")
			<< "table inet zcrpc_rdma2 {\n"
			   "  chain input {\n"
			   "    type filter hook input priority 0; policy accept;\n"
			   "    udp dport 4791 counter drop\n"
			   "  }\n"
			   "}\n";
		nft_ = true;
		int rc = c ? c->CtlWhileProgressing("peer-run nft -f rdma2-blackhole.nft")
			   : VmCtl("peer-run nft -f rdma2-blackhole.nft");
		ASSERT_EQ(rc, 0);
	}
	int64_t Dropped()
	{
		std::string out;
		EXPECT_EQ(VmCtl("peer-run nft list table inet zcrpc_rdma2", &out), 0) << out;
		return NumberAfter(out, "counter packets ");
	}
	static bool Failed(zcrpc_status s)
	{
		return s == ZCRPC_DEADLINE_EXCEEDED || s == ZCRPC_UNAVAILABLE;
	}
};

struct ConnWatch {
	int established = 0, closed = 0;
	zcrpc_status status = ZCRPC_OK;
	steady_clock::time_point closed_at;
	zcrpc_conn_handlers Handlers()
	{
		zcrpc_conn_handlers h{};
		h.size = sizeof(h);
		h.on_state = [](zcrpc_conn *, zcrpc_conn_state st, zcrpc_status s, void *a) {
			auto *cw = static_cast<ConnWatch *>(a);
			if (st == ZCRPC_CONN_ESTABLISHED)
				cw->established++;
			if (st == ZCRPC_CONN_CLOSED) {
				cw->closed++;
				cw->status = s;
				cw->closed_at = steady_clock::now();
			}
		};
		h.on_recv = [](zcrpc_conn *, const void *, size_t, void *) {};
		h.arg = this;
		return h;
	}
};

TEST_F(BlackHole, ConnectAndFirstCallFailByTheirDeadlines)
{
	PeerServer srv(env_, 7601, "-t 14 -r 6");
	ASSERT_TRUE(srv.ok());
	{
		// Reachable before the rule: the rule is what breaks it.
		Rdma2Client warm(env_.peer, srv.port(), ClientWorkerOpts(1000));
		ASSERT_TRUE(warm.ok());
		ASSERT_EQ(warm.Start(64, 10'000'000), ZCRPC_OK);
		ASSERT_TRUE(warm.ProgressUntil([&] { return warm.completed() == 1; }, Scaled(20000)));
		ASSERT_EQ(warm.calls()[0].status, ZCRPC_OK) << warm.calls()[0].message;
	}
	DropRoce(nullptr);
	int64_t dropped_before = Dropped();

	// A channel's first call: the connection attempt (connect_timeout
	// = the call's deadline) meets the drop.
	Rdma2Client c(env_.peer, srv.port(), ClientWorkerOpts(1000), kDeadlineMs);
	ASSERT_TRUE(c.ok());
	auto t0 = steady_clock::now();
	ASSERT_EQ(c.Start(64, kDeadlineMs * 1000), ZCRPC_OK);
	ASSERT_TRUE(c.ProgressUntil([&] { return c.completed() == 1; }, Scaled(kDeadlineMs + 30000)))
		<< "the call never completed";
	auto call_ms = duration_cast<milliseconds>(c.calls()[0].done_at - t0).count();
	EXPECT_TRUE(Failed(c.calls()[0].status)) << zcrpc_status_str(c.calls()[0].status);
	EXPECT_LE(call_ms, kDeadlineMs + Scaled(1500).count());

	// The transport's connect, with the same deadline.
	ConnWatch cw;
	zcrpc_connect_opts co;
	zcrpc_connect_opts_init(&co);
	co.timeout_ms = kDeadlineMs;
	auto h = cw.Handlers();
	zcrpc_conn *conn = nullptr;
	auto t1 = steady_clock::now();
	ASSERT_EQ(zcrpc_connect(c.worker(), env_.peer.c_str(), srv.port().c_str(), &co, &h, &conn),
		  ZCRPC_OK);
	ASSERT_TRUE(c.ProgressUntil([&] { return cw.closed > 0; }, Scaled(kDeadlineMs + 30000)));
	auto conn_ms = duration_cast<milliseconds>(cw.closed_at - t1).count();
	EXPECT_TRUE(Failed(cw.status)) << zcrpc_status_str(cw.status);
	EXPECT_LE(conn_ms, kDeadlineMs + Scaled(1500).count());

	// Nothing fires afterwards.
	c.ProgressUntil([] { return false; }, Scaled(1000));
	EXPECT_EQ(c.completed(), 1u);
	EXPECT_EQ(c.Twice(), 0);
	EXPECT_EQ(cw.closed, 1);
	EXPECT_EQ(cw.established, 0);
	zcrpc_conn_destroy(conn);

	int64_t dropped = Dropped();
	EXPECT_GT(dropped, dropped_before) << "the rule dropped nothing";
	std::cout << "[rdma2] black hole: call failed " << zcrpc_status_str(c.calls()[0].status)
		  << " after " << call_ms << " ms, connect " << zcrpc_status_str(cw.status)
		  << " after " << conn_ms << " ms (deadline " << kDeadlineMs << " ms); nft dropped "
		  << dropped << " packets\n";
}

TEST_F(BlackHole, CallOnAConnectionThatStartsDroppingFailsByItsDeadline)
{
	PeerServer srv(env_, 7602, "-t 14 -r 6");
	ASSERT_TRUE(srv.ok());
	Rdma2Client c(env_.peer, srv.port(), ClientWorkerOpts(1000), kDeadlineMs);
	ASSERT_TRUE(c.ok());
	ASSERT_EQ(c.Start(4096, 10'000'000), ZCRPC_OK);
	ASSERT_TRUE(c.ProgressUntil([&] { return c.completed() == 1; }, Scaled(20000)));
	ASSERT_EQ(c.calls()[0].status, ZCRPC_OK) << c.calls()[0].message;

	DropRoce(&c);
	auto t0 = steady_clock::now();
	ASSERT_EQ(c.Start(4096, kDeadlineMs * 1000), ZCRPC_OK);
	ASSERT_TRUE(c.ProgressUntil([&] { return c.completed() == 2; }, Scaled(kDeadlineMs + 30000)))
		<< "the call never completed";
	auto ms = duration_cast<milliseconds>(c.calls()[1].done_at - t0).count();
	EXPECT_TRUE(Failed(c.calls()[1].status)) << zcrpc_status_str(c.calls()[1].status);
	EXPECT_LE(ms, kDeadlineMs + Scaled(1500).count());
	c.ProgressUntil([] { return false; }, Scaled(1000));
	EXPECT_EQ(c.completed(), 2u);
	EXPECT_EQ(c.Twice(), 0);
	int64_t dropped = Dropped();
	EXPECT_GT(dropped, 0) << "the rule dropped nothing";
	std::cout << "[rdma2] black hole (established): call failed "
		  << zcrpc_status_str(c.calls()[1].status) << " after " << ms << " ms; nft dropped "
		  << dropped << " packets\n";
}

} // namespace
