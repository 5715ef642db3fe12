// T7/T8 and partitions across two guests: guest B's vCPUs are stopped (QMP
// stop: a frozen or dead host, no DREQ, nothing on the wire) or the link
// between the guests is cut (QMP set_link off on both NICs). Calls in flight
// fail UNAVAILABLE, and an idle connection is declared dead by the
// keepalive, within a bound scaled from keepalive_ms and the ACK-timeout
// retry round; rxe's retry_exceeded_err in guest A rose; nothing completes
// twice; and once B runs again (or the link is back) a new call reconnects
// and succeeds.
#include <algorithm>
#include <chrono>
#include <iostream>

#include "rdma2_client.h"
#include "rdma2_env.h"

using namespace std::chrono;

namespace {

constexpr uint32_t kKeepaliveMs = 200;

class PeerDeath : public Rdma2Test {
protected:
	// The detection bound from the start of the freeze/cut request: four
	// times the documented 1.5 x keepalive_ms + one retry round, plus 3 s
	// for the request itself (a control round trip through the host),
	// all scaled.
	milliseconds Bound(const zcrpc_worker_opts &o) const
	{
		return Scaled(4 * (1.5 * o.keepalive_ms + RetryRoundMs(o)) + 3000);
	}

	// Calls in flight (4 Hold calls the server sits on, 8 Echo calls kept
	// in flight) when @cut runs; then @restore and a new call.
	void InFlightCallsFailThenRecover(int port, const char *cut, const char *restore);
};

void PeerDeath::InFlightCallsFailThenRecover(int port, const char *cut, const char *restore)
{
	PeerServer srv(env_, port, "-t 14 -r 6 -k 1000");
	ASSERT_TRUE(srv.ok());
	Rdma2Client c(env_.peer, srv.port(), ClientWorkerOpts(kKeepaliveMs));
	ASSERT_TRUE(c.ok());
	ASSERT_EQ(c.Start(1024, 10'000'000), ZCRPC_OK);
	ASSERT_TRUE(c.ProgressUntil([&] { return c.completed() == 1; }, Scaled(20000)));
	ASSERT_EQ(c.calls()[0].status, ZCRPC_OK) << c.calls()[0].message;

	int64_t retry_before = LocalCounter(env_.dev, "retry_exceeded_err");
	ASSERT_GE(retry_before, 0);
	for (int i = 0; i < 4; i++)
		ASSERT_EQ(c.Start(64, 300'000'000, 120'000), ZCRPC_OK);
	c.Pump(8, 20000, 300'000'000); // above the bulk threshold: RDMA WRITE path
	c.ProgressUntil([] { return false; }, milliseconds(500));
	ASSERT_FALSE(c.any_failed());
	size_t ok_before = c.completed();

	touched_peer_ = true;
	steady_clock::time_point t0, t1;
	ASSERT_EQ(c.CtlWhileProgressing(cut, &t0, &t1), 0) << cut;
	bool drained = c.ProgressUntil([&] { return c.outstanding() == 0; },
				       Bound(c.opts()) + Scaled(30000));
	if (!drained)
		c.Dump();
	ASSERT_TRUE(drained) << c.outstanding() << " calls still outstanding";
	auto last = t0, first = steady_clock::time_point::max();
	int unavailable = 0, other = 0;
	for (const auto &call : c.calls()) {
		if (call.status == ZCRPC_OK)
			continue;
		last = std::max(last, call.done_at);
		first = std::min(first, call.done_at);
		(call.status == ZCRPC_UNAVAILABLE ? unavailable : other)++;
	}
	for (size_t i = 1; i <= 4; i++)
		EXPECT_EQ(c.calls()[i].status, ZCRPC_UNAVAILABLE) << "Hold call " << i;
	EXPECT_GE(unavailable, 4);
	EXPECT_EQ(other, 0) << "in-flight calls must fail UNAVAILABLE";
	auto detect_ms = duration_cast<milliseconds>(last - t0).count();
	auto after_request_ms = duration_cast<milliseconds>(last - t1).count();
	EXPECT_LE(detect_ms, Bound(c.opts()).count());
	int64_t retry_after = LocalCounter(env_.dev, "retry_exceeded_err");
	EXPECT_GT(retry_after, retry_before) << "rxe saw no retry-exceeded error";

	// Nothing completes twice, nothing later.
	size_t done = c.completed();
	c.ProgressUntil([] { return false; }, Scaled(1000));
	EXPECT_EQ(c.completed(), done);
	EXPECT_EQ(c.Twice(), 0);
	EXPECT_EQ(c.Corrupt(), 0);
	std::cout << "[rdma2] " << cut << ": " << unavailable << " calls in flight failed UNAVAILABLE "
		  << detect_ms << " ms after the request started (" << after_request_ms
		  << " ms after it returned; first failure "
		  << duration_cast<milliseconds>(first - t0).count() << " ms; bound "
		  << Bound(c.opts()).count() << " ms); " << ok_before - 1
		  << " calls completed OK before; retry_exceeded_err +" << retry_after - retry_before
		  << "\n";

	// Back: a new call reconnects and succeeds.
	c.Pump(0, 0, 0);
	ASSERT_EQ(c.CtlWhileProgressing(restore), 0) << restore;
	auto r0 = steady_clock::now();
	bool ok = false;
	int attempts = 0;
	while (!ok && steady_clock::now() - r0 < Scaled(30000)) {
		size_t n = c.completed();
		ASSERT_EQ(c.Start(30000, 5'000'000), ZCRPC_OK);
		attempts++;
		ASSERT_TRUE(c.ProgressUntil([&] { return c.completed() == n + 1; }, Scaled(20000)));
		const auto &call = c.calls().back();
		ok = call.status == ZCRPC_OK && !call.corrupt;
		if (!ok)
			EXPECT_TRUE(call.status == ZCRPC_UNAVAILABLE ||
				    call.status == ZCRPC_DEADLINE_EXCEEDED)
				<< zcrpc_status_str(call.status);
	}
	EXPECT_TRUE(ok) << "no call succeeded after " << restore;
	EXPECT_EQ(c.Twice(), 0);
	std::cout << "[rdma2] " << restore << ": a call succeeded after " << attempts
		  << " attempt(s), "
		  << duration_cast<milliseconds>(steady_clock::now() - r0).count() << " ms\n";
}

TEST_F(PeerDeath, FrozenPeerFailsCallsInFlightAndANewCallReconnectsAfterThaw)
{
	InFlightCallsFailThenRecover(7611, "freeze-peer", "thaw-peer");
}

TEST_F(PeerDeath, PartitionFailsCallsInFlightAndCallsSucceedAfterLinkUp)
{
	InFlightCallsFailThenRecover(7612, "link-down", "link-up");
}

struct IdleConn {
	int established = 0, closed = 0;
	zcrpc_status status = ZCRPC_OK;
	std::string detail;
	steady_clock::time_point closed_at;
	zcrpc_conn *conn = nullptr;
	~IdleConn() { zcrpc_conn_destroy(conn); }
	bool Connect(zcrpc_worker *w, const std::string &host, const std::string &port)
	{
		zcrpc_conn_handlers h{};
		h.size = sizeof(h);
		h.on_state = [](zcrpc_conn *c, zcrpc_conn_state st, zcrpc_status s, void *a) {
			auto *ic = static_cast<IdleConn *>(a);
			if (st == ZCRPC_CONN_ESTABLISHED)
				ic->established++;
			if (st == ZCRPC_CONN_CLOSED) {
				ic->closed++;
				ic->status = s;
				ic->detail = zcrpc_conn_get_error(c);
				ic->closed_at = steady_clock::now();
			}
		};
		h.on_recv = [](zcrpc_conn *, const void *, size_t, void *) {};
		h.arg = this;
		return zcrpc_connect(w, host.c_str(), port.c_str(), nullptr, &h, &conn) == ZCRPC_OK;
	}
};

TEST_F(PeerDeath, IdleConnectionToAFrozenPeerIsDeclaredDeadByKeepalive)
{
	PeerServer srv(env_, 7613, "-t 14 -r 6 -k 1000");
	ASSERT_TRUE(srv.ok());
	zcrpc_worker_opts wo = ClientWorkerOpts(300);
	Rdma2Client c(env_.peer, srv.port(), wo); // its worker; the channel stays unused
	ASSERT_TRUE(c.ok());
	IdleConn ic;
	ASSERT_TRUE(ic.Connect(c.worker(), env_.peer, srv.port()));
	ASSERT_TRUE(c.ProgressUntil([&] { return ic.established || ic.closed; }, Scaled(20000)));
	ASSERT_EQ(ic.established, 1);

	// Idle but alive: probes go out and are answered.
	c.ProgressUntil([] { return false; }, Scaled(1500));
	zcrpc_conn_stats st;
	zcrpc_conn_get_stats(ic.conn, &st, sizeof(st));
	ASSERT_GT(st.keepalives_sent, 0u);
	ASSERT_EQ(ic.closed, 0) << "the idle connection died while B was running";
	int64_t retry_before = LocalCounter(env_.dev, "retry_exceeded_err");

	touched_peer_ = true;
	steady_clock::time_point t0, t1;
	ASSERT_EQ(c.CtlWhileProgressing("freeze-peer", &t0, &t1), 0);
	milliseconds bound = Scaled(4 * (1.5 * wo.keepalive_ms + RetryRoundMs(wo)) + 3000);
	ASSERT_TRUE(c.ProgressUntil([&] { return ic.closed > 0; }, bound + Scaled(30000)))
		<< "the idle connection to the frozen peer was never declared dead";
	auto ms = duration_cast<milliseconds>(ic.closed_at - t0).count();
	EXPECT_EQ(ic.status, ZCRPC_UNAVAILABLE) << ic.detail;
	EXPECT_LE(ms, bound.count());
	EXPECT_GT(LocalCounter(env_.dev, "retry_exceeded_err"), retry_before);
	c.ProgressUntil([] { return false; }, Scaled(500));
	EXPECT_EQ(ic.closed, 1);
	std::cout << "[rdma2] idle connection, frozen peer: declared dead ("
		  << zcrpc_status_str(ic.status) << ", \"" << ic.detail << "\") " << ms
		  << " ms after the freeze request started ("
		  << duration_cast<milliseconds>(ic.closed_at - t1).count()
		  << " ms after it returned; keepalive " << wo.keepalive_ms << " ms, retry round "
		  << RetryRoundMs(wo) << " ms, bound " << bound.count() << " ms)\n";

	// Thawed: a new connection comes up.
	ASSERT_EQ(c.CtlWhileProgressing("thaw-peer"), 0);
	IdleConn again;
	ASSERT_TRUE(again.Connect(c.worker(), env_.peer, srv.port()));
	ASSERT_TRUE(c.ProgressUntil([&] { return again.established || again.closed; }, Scaled(30000)));
	EXPECT_EQ(again.established, 1) << zcrpc_status_str(again.status) << " " << again.detail;
}

} // namespace
