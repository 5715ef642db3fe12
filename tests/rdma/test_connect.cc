// Connections over rxe: the rdma_create_ep flow, the handshake, send/recv
// with credits, refusals and deadlines.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <arpa/inet.h>
#include <rdma/rdma_cma.h>

#include "rdma_env.h"
#include "transport/hello.h"
#include "transport/test_hooks.h"

using namespace std::chrono;
using namespace std::chrono_literals;

namespace {

struct Client {
	zcrpc_conn *conn = nullptr;
	int established = 0, closed = 0, replies = 0, state_calls = 0;
	zcrpc_status close_status = ZCRPC_OK;
	std::vector<uint8_t> last;

	zcrpc_conn_handlers Handlers()
	{
		return {sizeof(zcrpc_conn_handlers), OnState, OnRecv, this};
	}
	static void OnState(zcrpc_conn *, zcrpc_conn_state st, zcrpc_status status, void *arg)
	{
		auto *c = static_cast<Client *>(arg);
		c->state_calls++;
		if (st == ZCRPC_CONN_ESTABLISHED)
			c->established++;
		if (st == ZCRPC_CONN_CLOSED) {
			c->closed++;
			c->close_status = status;
		}
	}
	static void OnRecv(zcrpc_conn *, const void *data, size_t len, void *arg)
	{
		auto *c = static_cast<Client *>(arg);
		auto *p = static_cast<const uint8_t *>(data);
		c->last.assign(p, p + len);
		c->replies++;
	}
};

// @timeout_ms < 0: the default, 10 s scaled like every time bound of the
// tests (ZCRPC_TEST_TIME_SCALE; CI's guest runs 3x slower): in CI the
// first connect after the ASan batch ran out an unscaled 10 s three times
// in six runs (a REQ retried after 4.8 s behind a slow resolution fits).
zcrpc_status StartConnect(zcrpc_worker *w, Client &cl, const std::string &addr, uint16_t port,
		     int timeout_ms = -1)
{
	if (timeout_ms < 0)
		timeout_ms = static_cast<int>(Scaled(10000).count());
	zcrpc_connect_opts o;
	zcrpc_connect_opts_init(&o);
	o.timeout_ms = timeout_ms;
	auto h = cl.Handlers();
	return zcrpc_connect(w, addr.c_str(), std::to_string(port).c_str(), &o, &h, &cl.conn);
}

// One round trip of @len bytes with a pattern derived from @seed; true when
// the echo matched byte for byte.
bool RoundTrip(zcrpc_worker *w, Client &cl, size_t len, unsigned seed)
{
	std::vector<uint8_t> msg(len);
	for (size_t k = 0; k < len; k++)
		msg[k] = static_cast<uint8_t>(seed * 131 + k * 7 + (k >> 8));
	int before = cl.replies;
	zcrpc_status st = zcrpc_conn_send(cl.conn, msg.data(), len);
	if (st == ZCRPC_RESOURCE_EXHAUSTED) {
		ProgressUntil(w, [&] { return zcrpc_conn_can_send(cl.conn) != 0; }, Scaled(5000));
		st = zcrpc_conn_send(cl.conn, msg.data(), len);
	}
	EXPECT_EQ(st, ZCRPC_OK) << zcrpc_status_str(st);
	if (st != ZCRPC_OK)
		return false;
	if (!ProgressUntil(w, [&] { return cl.replies > before || cl.closed; }, Scaled(5000)))
		return false;
	return cl.replies == before + 1 && cl.last == msg;
}

class Connect : public RdmaTest {};

} // namespace

TEST_F(Connect, AcceptAndThousandPingPongsVerified)
{
	EchoServer server(env_.addr0);
	ASSERT_TRUE(server.ok());
	zcrpc_worker *w = nullptr;
	ASSERT_EQ(zcrpc_worker_create(nullptr, &w), ZCRPC_OK);
	Client cl;
	int64_t sent0 = RxeCounter(env_, "sent_pkts");
	ASSERT_GE(sent0, 0) << "rxe hw_counters unreadable";

	ASSERT_EQ(StartConnect(w, cl, env_.addr0, server.port()), ZCRPC_OK);
	EXPECT_EQ(cl.state_calls, 0) << "callback ran inside zcrpc_connect";
	ASSERT_TRUE(ProgressUntil(w, [&] { return cl.established || cl.closed; }, Scaled(11000)));
	ASSERT_EQ(cl.established, 1) << zcrpc_conn_get_error(cl.conn);
	ASSERT_EQ(zcrpc_conn_get_state(cl.conn), ZCRPC_CONN_ESTABLISHED);

	zcrpc_conn_stats s;
	zcrpc_conn_get_stats(cl.conn, &s, sizeof(s));
	// The server's first grant: its guaranteed share of the shared
	// receive queue (recv_share, 16), not its window (recv_depth, 64).
	EXPECT_EQ(s.peer_recv_depth, 16u);
	EXPECT_EQ(s.peer_max_msg, 4096u);

	const size_t sizes[] = {0, 1, 7, 64, 200, 1000, 4095, 4096};
	int ok = 0;
	for (unsigned i = 0; i < 1000; i++)
		ok += RoundTrip(w, cl, sizes[i % 8], i) ? 1 : 0;
	EXPECT_EQ(ok, 1000);

	zcrpc_conn_get_stats(cl.conn, &s, sizeof(s));
	EXPECT_EQ(s.msgs_sent, 1000u);
	EXPECT_EQ(s.msgs_recv, 1000u);
	EXPECT_EQ(s.credit_stalls, 0u);
	EXPECT_EQ(server.echoed(), 1000u);
	// Proof from outside the library: rxe itself sent the packets.
	int64_t sent1 = RxeCounter(env_, "sent_pkts");
	EXPECT_GE(sent1 - sent0, 2000) << "rxe sent_pkts did not rise by the messages moved";

	zcrpc_conn_close(cl.conn);
	ASSERT_TRUE(ProgressUntil(w, [&] { return cl.closed > 0; }, Scaled(5000)));
	EXPECT_EQ(cl.close_status, ZCRPC_OK) << zcrpc_conn_get_error(cl.conn);
	auto until = steady_clock::now() + Scaled(5000);
	while (server.closed() == 0 && steady_clock::now() < until)
		std::this_thread::sleep_for(1ms);
	EXPECT_EQ(server.closed(), 1);
	// The close message told the server this was no crash (protocol §5).
	EXPECT_EQ(server.last_close_status(), ZCRPC_OK);
	EXPECT_EQ(cl.closed, 1);
	zcrpc_conn_destroy(cl.conn);
	zcrpc_worker_destroy(w);
}

TEST_F(Connect, SecondClientWhileFirstIsConnected)
{
	EchoServer server(env_.addr0);
	ASSERT_TRUE(server.ok());
	zcrpc_worker *w = nullptr;
	ASSERT_EQ(zcrpc_worker_create(nullptr, &w), ZCRPC_OK);
	Client a, b;
	ASSERT_EQ(StartConnect(w, a, env_.addr0, server.port()), ZCRPC_OK);
	ASSERT_TRUE(ProgressUntil(w, [&] { return a.established || a.closed; }, Scaled(11000)));
	ASSERT_EQ(a.established, 1) << zcrpc_conn_get_error(a.conn);
	ASSERT_TRUE(RoundTrip(w, a, 100, 1));

	ASSERT_EQ(StartConnect(w, b, env_.addr0, server.port()), ZCRPC_OK);
	ASSERT_TRUE(ProgressUntil(w, [&] { return b.established || b.closed; }, Scaled(11000)));
	ASSERT_EQ(b.established, 1) << zcrpc_conn_get_error(b.conn);
	int ok = 0;
	for (unsigned i = 0; i < 100; i++) {
		ok += RoundTrip(w, a, 1 + i, i) ? 1 : 0;
		ok += RoundTrip(w, b, 4096 - i, i + 7) ? 1 : 0;
	}
	EXPECT_EQ(ok, 200);
	EXPECT_EQ(server.accepted(), 2);
	EXPECT_EQ(a.closed + b.closed, 0);
	zcrpc_conn_destroy(a.conn);
	zcrpc_conn_destroy(b.conn);
	auto until = steady_clock::now() + Scaled(5000);
	while (server.closed() < 2 && steady_clock::now() < until)
		std::this_thread::sleep_for(1ms);
	EXPECT_EQ(server.closed(), 2);
	zcrpc_worker_destroy(w);
}

// docs/protocol.md §5: a close (or a destroy without one) ends with a CLOSE
// message, so the server reads OK; a client whose hello lacks the CLOSE bit
// (built before it) still talks, and its close reads as before: UNAVAILABLE.
// (A crash, at the server and at the client: Faults.CleanExit...)
TEST_F(Connect, OrderlyCloseAndDestroyReadOkAtTheServerAnOlderClientAsBefore)
{
	EchoServer server(env_.addr0);
	ASSERT_TRUE(server.ok());
	zcrpc_worker *w = nullptr, *old_w = nullptr;
	ASSERT_EQ(zcrpc_worker_create(nullptr, &w), ZCRPC_OK);
	ASSERT_EQ(zcrpc_worker_create(nullptr, &old_w), ZCRPC_OK);
	zcrpc__worker_test_clear_features(old_w, ZCRPC_FEAT_CLOSE);
	auto server_closes = [&](int n) {
		auto until = steady_clock::now() + Scaled(5000);
		while (server.closed() < n && steady_clock::now() < until)
			std::this_thread::sleep_for(1ms);
		return server.closed() == n;
	};
	struct Case {
		const char *what;
		zcrpc_worker *w;
		bool destroy; // zcrpc_conn_destroy without zcrpc_conn_close
		zcrpc_status server_sees;
	} cases[] = {
		{"zcrpc_conn_close", w, false, ZCRPC_OK},
		{"zcrpc_conn_destroy", w, true, ZCRPC_OK},
		{"older client, zcrpc_conn_close", old_w, false, ZCRPC_UNAVAILABLE},
		{"older client, zcrpc_conn_destroy", old_w, true, ZCRPC_UNAVAILABLE},
	};
	int n = 0;
	for (auto &k : cases) {
		SCOPED_TRACE(k.what);
		Client cl;
		ASSERT_EQ(StartConnect(k.w, cl, env_.addr0, server.port()), ZCRPC_OK);
		ASSERT_TRUE(ProgressUntil(k.w, [&] { return cl.established || cl.closed; },
					  Scaled(11000)));
		ASSERT_EQ(cl.established, 1) << zcrpc_conn_get_error(cl.conn);
		for (unsigned i = 0; i < 20; i++)
			ASSERT_TRUE(RoundTrip(k.w, cl, 1 + 100 * i, i));
		if (k.destroy) {
			zcrpc_conn_destroy(cl.conn);
		} else {
			zcrpc_conn_close(cl.conn);
			ASSERT_TRUE(ProgressUntil(k.w, [&] { return cl.closed > 0; }, Scaled(5000)));
			EXPECT_EQ(cl.close_status, ZCRPC_OK) << zcrpc_conn_get_error(cl.conn);
			EXPECT_STREQ(zcrpc_conn_get_error(cl.conn), "closed");
			zcrpc_conn_destroy(cl.conn);
		}
		ASSERT_TRUE(server_closes(++n));
		std::printf("[close] %s: the server saw %s\n", k.what,
			    zcrpc_status_str(server.last_close_status()));
		EXPECT_EQ(server.last_close_status(), k.server_sees);
	}
	EXPECT_EQ(server.accepted(), 4);
	zcrpc_worker_destroy(old_w);
	zcrpc_worker_destroy(w);
}

TEST_F(Connect, PortNobodyListensOnIsUnavailableQuickly)
{
	// Take an ephemeral port, then stop listening on it.
	uint16_t port;
	{
		EchoServer probe(env_.addr0);
		ASSERT_TRUE(probe.ok());
		port = probe.port();
	}
	zcrpc_worker *w = nullptr;
	ASSERT_EQ(zcrpc_worker_create(nullptr, &w), ZCRPC_OK);
	Client cl;
	auto t0 = steady_clock::now();
	ASSERT_EQ(StartConnect(w, cl, env_.addr0, port), ZCRPC_OK);
	ASSERT_TRUE(ProgressUntil(w, [&] { return cl.closed > 0; }, Scaled(3000)))
		<< "no answer to a connect to a closed port";
	auto took = duration_cast<milliseconds>(steady_clock::now() - t0);
	EXPECT_EQ(cl.close_status, ZCRPC_UNAVAILABLE) << zcrpc_conn_get_error(cl.conn);
	EXPECT_EQ(cl.established, 0);
	EXPECT_EQ(cl.closed, 1);
	EXPECT_LT(took, Scaled(3000));
	EXPECT_NE(std::string(zcrpc_conn_get_error(cl.conn)).find("refused"), std::string::npos)
		<< zcrpc_conn_get_error(cl.conn);
	EXPECT_EQ(zcrpc_conn_send(cl.conn, "x", 1), ZCRPC_FAILED_PRECONDITION);
	zcrpc_conn_destroy(cl.conn);
	zcrpc_worker_destroy(w);
}

TEST_F(Connect, DeadlineToAnAddressThatNeverAnswers)
{
	ASSERT_FALSE(env_.unreachable.empty()) << "ZCRPC_RXE_UNREACHABLE unset";
	zcrpc_worker *w = nullptr;
	ASSERT_EQ(zcrpc_worker_create(nullptr, &w), ZCRPC_OK);
	Client cl;
	const int deadline_ms = 300;
	auto t0 = steady_clock::now();
	ASSERT_EQ(StartConnect(w, cl, env_.unreachable, 7471, deadline_ms), ZCRPC_OK);
	// Sleep on the worker's fd: the timerfd must wake us at the deadline.
	while (!cl.closed && steady_clock::now() - t0 < Scaled(10000))
		zcrpc_worker_progress(w, 1000);
	auto took = duration_cast<milliseconds>(steady_clock::now() - t0);
	ASSERT_EQ(cl.closed, 1);
	EXPECT_EQ(cl.close_status, ZCRPC_DEADLINE_EXCEEDED) << zcrpc_conn_get_error(cl.conn);
	// The error names the step that was still pending: the address
	// never resolved, so the setup thread was still at it.
	EXPECT_NE(std::string(zcrpc_conn_get_error(cl.conn))
			  .find("resolving the address"),
		  std::string::npos)
		<< zcrpc_conn_get_error(cl.conn);
	EXPECT_GE(took, milliseconds(deadline_ms));
	EXPECT_LE(took, milliseconds(deadline_ms) + Scaled(1000));
	zcrpc_conn_destroy(cl.conn);
	// The setup thread is still resolving; destroying the worker joins it
	// and frees the late endpoint (ASan/LSan would report a leak).
	zcrpc_worker_destroy(w);
}

// A listener that never takes its requests (a raw rdma_cm id whose events
// nobody reads): the kernel CM keeps the request in REQ_RCVD and drops the
// client's retries, so nothing comes back — what CI once saw for 10 s. The
// deadline's error says the request went out, how long before, and what the
// resolution took; the device counters (printed by every failed rdma test,
// RdmaDiagnostics) show the REQ sent and received and no REP.
TEST_F(Connect, UnansweredRequestIsNamedInTheErrorAndInTheCounters)
{
	rdma_event_channel *ch = rdma_create_event_channel();
	ASSERT_NE(ch, nullptr);
	rdma_cm_id *lid = nullptr;
	ASSERT_EQ(rdma_create_id(ch, &lid, nullptr, RDMA_PS_TCP), 0);
	sockaddr_in sa{};
	sa.sin_family = AF_INET;
	ASSERT_EQ(inet_pton(AF_INET, env_.addr0.c_str(), &sa.sin_addr), 1);
	ASSERT_EQ(rdma_bind_addr(lid, reinterpret_cast<sockaddr *>(&sa)), 0);
	ASSERT_EQ(rdma_listen(lid, 8), 0);
	uint16_t port = ntohs(rdma_get_src_port(lid));
	zcrpc_worker *w = nullptr;
	ASSERT_EQ(zcrpc_worker_create(nullptr, &w), ZCRPC_OK);

	DevCounters before = SnapshotDevCounters();
	Client cl;
	ASSERT_EQ(StartConnect(w, cl, env_.addr0, port, 3000), ZCRPC_OK);
	ASSERT_TRUE(ProgressUntil(w, [&] { return cl.closed || cl.established; }, Scaled(10000)));
	ASSERT_EQ(cl.closed, 1);
	EXPECT_EQ(cl.close_status, ZCRPC_DEADLINE_EXCEEDED) << zcrpc_conn_get_error(cl.conn);
	std::string err = zcrpc_conn_get_error(cl.conn);
	EXPECT_NE(err.find("no answer to the connect request sent "), std::string::npos) << err;
	EXPECT_NE(err.find(" ms before; address and route resolved in "), std::string::npos) << err;
	// The IB CM's counters exist over RoCE only: iWARP (siw) connects
	// through TCP (MPA), which has none of them.
	if (env_.provider != "siw") {
		std::string moved = " " + CountersMoved(before, SnapshotDevCounters()) + " ";
		EXPECT_NE(moved.find(" " + env_.dev0 + " cm_tx_msgs/req +"), std::string::npos)
			<< moved;
		EXPECT_NE(moved.find(" " + env_.dev0 + " cm_rx_msgs/req +"), std::string::npos)
			<< moved;
		EXPECT_EQ(moved.find(" cm_tx_msgs/rep "), std::string::npos) << moved;
	}
	// The report of a failed test lists the listener that held it.
	std::string report = RdmaDiagnostics(before);
	EXPECT_NE(report.find(env_.addr0 + ":" + std::to_string(port)), std::string::npos)
		<< report;

	zcrpc_conn_destroy(cl.conn);
	zcrpc_worker_destroy(w);
	rdma_destroy_id(lid);
	rdma_destroy_event_channel(ch);
}

TEST_F(Connect, SendBeforeEstablishedAndOversizedAreRefused)
{
	EchoServer server(env_.addr0);
	ASSERT_TRUE(server.ok());
	zcrpc_worker *w = nullptr;
	ASSERT_EQ(zcrpc_worker_create(nullptr, &w), ZCRPC_OK);
	Client cl;
	ASSERT_EQ(StartConnect(w, cl, env_.addr0, server.port()), ZCRPC_OK);
	EXPECT_EQ(zcrpc_conn_send(cl.conn, "x", 1), ZCRPC_FAILED_PRECONDITION);
	ASSERT_TRUE(ProgressUntil(w, [&] { return cl.established || cl.closed; }, Scaled(11000)));
	ASSERT_EQ(cl.established, 1);
	std::vector<uint8_t> big(4097, 1);
	EXPECT_EQ(zcrpc_conn_send(cl.conn, big.data(), big.size()), ZCRPC_INVALID_ARGUMENT);
	EXPECT_EQ(zcrpc_conn_send(cl.conn, nullptr, 5), ZCRPC_INVALID_ARGUMENT);
	EXPECT_TRUE(RoundTrip(w, cl, 4096, 3)) << "connection unusable after refused sends";
	zcrpc_conn_destroy(cl.conn);
	zcrpc_worker_destroy(w);
}

TEST_F(Connect, CreditsNeverRunOutWhenTheReceiverKeepsUp)
{
	// A one-way stream far longer than the receive window: the receiver's
	// credit updates must keep it flowing, with rnr_retry_count 0 (any
	// receiver-not-ready would be a fatal error) and rxe's RNR counters
	// unchanged.
	zcrpc_worker_opts o;
	zcrpc_worker_opts_init(&o);
	o.recv_depth = 8;
	o.send_depth = 8;
	o.rnr_retry_count = 0;
	// The echo server closes a connection whose reply it cannot post: its
	// send queue holds the 8 replies the client's credits allow plus
	// those sent but not reaped yet (siw completes sends later than rxe).
	zcrpc_worker_opts so = o;
	so.send_depth = 64;
	EchoServer server(env_.addr0, &so);
	ASSERT_TRUE(server.ok());
	zcrpc_worker *w = nullptr;
	ASSERT_EQ(zcrpc_worker_create(&o, &w), ZCRPC_OK);
	Client cl;
	ASSERT_EQ(StartConnect(w, cl, env_.addr0, server.port()), ZCRPC_OK);
	ASSERT_TRUE(ProgressUntil(w, [&] { return cl.established || cl.closed; }, Scaled(11000)));
	ASSERT_EQ(cl.established, 1);
	int64_t rnr0 = RxeCounter(env_, "rcvd_rnr_err") + RxeCounter(env_, "send_rnr_err");
	const int total = 2000;
	int sent = 0;
	auto until = steady_clock::now() + Scaled(60000);
	while ((sent < total || cl.replies < total) && !cl.closed && steady_clock::now() < until) {
		if (sent < total && zcrpc_conn_send(cl.conn, &sent, sizeof(sent)) == ZCRPC_OK)
			sent++;
		zcrpc_worker_progress(w, 0);
	}
	EXPECT_EQ(sent, total);
	EXPECT_EQ(cl.replies, total);
	EXPECT_EQ(cl.closed, 0) << zcrpc_conn_get_error(cl.conn);
	int64_t rnr1 = RxeCounter(env_, "rcvd_rnr_err") + RxeCounter(env_, "send_rnr_err");
	EXPECT_EQ(rnr1, rnr0) << "receiver-not-ready happened";
	zcrpc_conn_destroy(cl.conn);
	zcrpc_worker_destroy(w);
}

TEST_F(Connect, ServerRejectsAWrongProtocolVersion)
{
	// A raw librdmacm client offering version 9: the server must refuse
	// with a REJECT handshake naming FAILED_PRECONDITION, and keep serving.
	EchoServer server(env_.addr0);
	ASSERT_TRUE(server.ok());
	rdma_addrinfo hints{}, *res = nullptr;
	hints.ai_port_space = RDMA_PS_TCP;
	hints.ai_qp_type = IBV_QPT_RC;
	std::string port = std::to_string(server.port());
	ASSERT_EQ(rdma_getaddrinfo(env_.addr0.c_str(), port.c_str(), &hints, &res), 0);
	rdma_cm_id *id = nullptr;
	ibv_qp_init_attr qa{};
	qa.cap.max_send_wr = qa.cap.max_recv_wr = 1;
	qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
	ASSERT_EQ(rdma_create_ep(&id, res, nullptr, &qa), 0);
	rdma_freeaddrinfo(res);

	zcrpc_hello h{};
	h.version = 9;
	h.kind = ZCRPC_HELLO_CONNECT;
	h.recv_depth = 1;
	h.max_msg = 64;
	uint8_t pd[ZCRPC_HELLO_LEN];
	zcrpc__hello_encode(&h, pd, sizeof(pd));
	rdma_conn_param p{};
	p.private_data = pd;
	p.private_data_len = sizeof(pd);
	p.retry_count = 6;
	p.rnr_retry_count = 0;
	EXPECT_NE(rdma_connect(id, &p), 0);
	EXPECT_EQ(errno, ECONNREFUSED);
	ASSERT_NE(id->event, nullptr);
	EXPECT_EQ(id->event->event, RDMA_CM_EVENT_REJECTED);
	zcrpc_hello rej{};
	ASSERT_EQ(zcrpc__hello_decode(id->event->param.conn.private_data,
				      id->event->param.conn.private_data_len, &rej, nullptr, 0),
		  ZCRPC_OK);
	EXPECT_EQ(rej.kind, ZCRPC_HELLO_REJECT);
	EXPECT_EQ(rej.status, static_cast<uint32_t>(ZCRPC_FAILED_PRECONDITION));
	rdma_destroy_ep(id);

	// Still serving.
	zcrpc_worker *w = nullptr;
	ASSERT_EQ(zcrpc_worker_create(nullptr, &w), ZCRPC_OK);
	Client cl;
	ASSERT_EQ(StartConnect(w, cl, env_.addr0, server.port()), ZCRPC_OK);
	ASSERT_TRUE(ProgressUntil(w, [&] { return cl.established || cl.closed; }, Scaled(11000)));
	EXPECT_EQ(cl.established, 1) << zcrpc_conn_get_error(cl.conn);
	EXPECT_TRUE(RoundTrip(w, cl, 10, 1));
	EXPECT_EQ(server.accepted(), 1);
	zcrpc_conn_destroy(cl.conn);
	zcrpc_worker_destroy(w);
}

TEST_F(Connect, OverIpv6)
{
	ASSERT_FALSE(env_.addr0_v6.empty()) << "ZCRPC_RXE_ADDR0_V6 unset";
	EchoServer server(env_.addr0_v6);
	ASSERT_TRUE(server.ok());
	zcrpc_worker *w = nullptr;
	ASSERT_EQ(zcrpc_worker_create(nullptr, &w), ZCRPC_OK);
	Client cl;
	ASSERT_EQ(StartConnect(w, cl, env_.addr0_v6, server.port()), ZCRPC_OK);
	ASSERT_TRUE(ProgressUntil(w, [&] { return cl.established || cl.closed; }, Scaled(11000)));
	ASSERT_EQ(cl.established, 1) << zcrpc_conn_get_error(cl.conn);
	int ok = 0;
	for (unsigned i = 0; i < 100; i++)
		ok += RoundTrip(w, cl, 1 + i * 40, i) ? 1 : 0;
	EXPECT_EQ(ok, 100);
	zcrpc_conn_destroy(cl.conn);
	zcrpc_worker_destroy(w);
}

TEST_F(Connect, BoundSourceAddressCrossesTheVethPair)
{
	// A client bound to the second address reaches the server on the
	// first through veth1 -> veth0: both rxe devices carry packets.
	EchoServer server(env_.addr0);
	ASSERT_TRUE(server.ok());
	zcrpc_worker *w = nullptr;
	ASSERT_EQ(zcrpc_worker_create(nullptr, &w), ZCRPC_OK);
	Client cl;
	int64_t tx1 = DevCounter(env_.dev1, "sent_pkts"), rx0 = DevCounter(env_.dev0, "rcvd_pkts");
	zcrpc_connect_opts o;
	zcrpc_connect_opts_init(&o);
	o.src_addr = env_.addr1.c_str();
	auto h = cl.Handlers();
	ASSERT_EQ(zcrpc_connect(w, env_.addr0.c_str(), std::to_string(server.port()).c_str(), &o, &h,
				&cl.conn),
		  ZCRPC_OK);
	ASSERT_TRUE(ProgressUntil(w, [&] { return cl.established || cl.closed; }, Scaled(10000)));
	ASSERT_EQ(cl.established, 1) << zcrpc_conn_get_error(cl.conn);
	int ok = 0;
	for (unsigned i = 0; i < 200; i++)
		ok += RoundTrip(w, cl, 64, i) ? 1 : 0;
	EXPECT_EQ(ok, 200);
	EXPECT_GE(DevCounter(env_.dev1, "sent_pkts") - tx1, 200) << "rxe1 did not send";
	EXPECT_GE(DevCounter(env_.dev0, "rcvd_pkts") - rx0, 200) << "rxe0 did not receive";
	zcrpc_conn_destroy(cl.conn);
	zcrpc_worker_destroy(w);
}
