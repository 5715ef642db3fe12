// One-guest fault scenarios (docs/testing.md, "Faults"): each proves its
// fault landed and counts, itself, that every call completed exactly once
// with a status naming what happened, that every posted buffer went back
// to its pool, and that the process survived and still serves.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <csignal>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fault_util.h"
#include "rdma_env.h"
#include "transport/hello.h"
#include "transport/test_hooks.h"

// The internal test hook (src/transport/internal.h; that header is C only).
extern "C" zcrpc_status zcrpc__conn_test_no_flow_control(zcrpc_conn *c);

using namespace std::chrono;
using namespace std::chrono_literals;

namespace {
class Faults : public RdmaTest {};
class FaultsLong : public RdmaTest {};

uint32_t Method(const char *name)
{
	return zcrpc_method_id(name);
}

// What one call's callback saw; the test counts the callbacks.
struct Call {
	int fired = 0;
	zcrpc_status status = ZCRPC_UNKNOWN;
	std::string message;
	uint64_t seed = 0;
	size_t len = 0;
	bool data_ok = false;
	int order = -1; // completion rank
};

int g_rank = 0;

void OnCall(zcrpc_channel *, const zcrpc_reply *r, void *arg)
{
	auto *c = static_cast<Call *>(arg);
	c->fired++;
	c->status = r->status;
	c->message = r->message ? r->message : "";
	c->order = g_rank++;
	c->data_ok = r->status == ZCRPC_OK && r->len == c->len;
	for (size_t k = 0; c->data_ok && k < r->len; k++)
		c->data_ok = static_cast<const uint8_t *>(r->data)[k] == soak_pat(c->seed, k);
}

zcrpc_status StartCall(zcrpc_channel *ch, const char *method, Call *c, uint64_t seed, size_t len,
		       const zcrpc_call_opts *o = nullptr)
{
	c->seed = seed;
	c->len = len;
	return zcrpc_call_start(ch, Method(method), len, soak_fill, &c->seed, o, OnCall, c,
				nullptr);
}

zcrpc_worker_stats WStats(zcrpc_worker *w)
{
	zcrpc_worker_stats s;
	zcrpc_worker_get_stats(w, &s, sizeof(s));
	return s;
}

zcrpc_channel_stats CStats(zcrpc_channel *ch)
{
	zcrpc_channel_stats s;
	zcrpc_channel_get_stats(ch, &s, sizeof(s));
	return s;
}

// A server process (zcrpc_test_fault_peer server); its port once it listens.
uint16_t StartServerChild(const RxeEnv &env, Child *kid, const char *window = nullptr)
{
	std::vector<std::string> args{FaultPeer(), "server", env.addr0, "0"};
	if (window)
		args.push_back(window);
	if (!SpawnChild(args, true, kid))
		return 0;
	std::string line = kid->ReadLine(ScaledMs(20000));
	if (line.rfind("listening ", 0) != 0)
		return 0;
	return static_cast<uint16_t>(std::stoi(line.substr(10)));
}

// A call over a fresh channel on @w to @port; true when it echoes.
bool HealthyCall(zcrpc_worker *w, const std::string &addr, uint16_t port)
{
	zcrpc_channel *ch = nullptr;
	if (zcrpc_channel_create(w, addr.c_str(), std::to_string(port).c_str(), nullptr, &ch) !=
	    ZCRPC_OK)
		return false;
	zcrpc_result r;
	bool ok = zcrpc_call(ch, Method(SOAK_ECHO), "alive", 5, nullptr, &r,
			     sizeof(r)) == ZCRPC_OK &&
		  r.len == 5 && std::memcmp(r.data, "alive", 5) == 0;
	zcrpc_result_free(&r);
	zcrpc_channel_destroy(ch);
	return ok;
}

bool DrainWorker(zcrpc_worker *w, milliseconds timeout)
{
	return ProgressUntil(w, [&] {
		auto s = WStats(w);
		return s.conns == 0 && s.pool_in_use == 0;
	}, timeout);
}
} // namespace

#ifndef ZCRPC_SOAK_LONG
// T22: bad registrations are INVALID_ARGUMENT, never a crash.
TEST_F(Faults, BadRegistrationsAreInvalidArgument)
{
	zcrpc_context *ctx = nullptr;
	// librdmacm keeps what a process opened on its devices (contexts, a
	// PD each) for the life of the process: warm it up before the baseline.
	ASSERT_EQ(zcrpc_context_create(&ctx), ZCRPC_OK);
	zcrpc_context_destroy(ctx);
	ctx = nullptr;
	auto base = RdmaResources();
	ASSERT_EQ(zcrpc_context_create(&ctx), ZCRPC_OK);
	static char buf[4096];
	zcrpc_mr *mr = nullptr;
	EXPECT_EQ(zcrpc_mr_register(ctx, buf, 0, 0, &mr), ZCRPC_INVALID_ARGUMENT) << "length 0";
	EXPECT_EQ(zcrpc_mr_register(ctx, nullptr, 4096, 0, &mr), ZCRPC_INVALID_ARGUMENT) << "NULL";
	EXPECT_EQ(zcrpc_mr_register(nullptr, buf, 4096, 0, &mr), ZCRPC_INVALID_ARGUMENT);
	EXPECT_EQ(zcrpc_mr_register(ctx, buf, 4096, 0, nullptr), ZCRPC_INVALID_ARGUMENT);
	EXPECT_EQ(zcrpc_mr_register(ctx, buf, 4096, 0x80, &mr), ZCRPC_INVALID_ARGUMENT)
		<< "unknown flag";
	// An unmapped range: reserve address space, then give it back.
	size_t len = 1 << 20;
	void *hole = mmap(nullptr, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(hole, MAP_FAILED);
	ASSERT_EQ(munmap(hole, len), 0);
	EXPECT_EQ(zcrpc_mr_register(ctx, hole, len, 0, &mr), ZCRPC_INVALID_ARGUMENT)
		<< "unmapped range";
	EXPECT_EQ(zcrpc_mr_register(ctx, hole, len, ZCRPC_MR_REMOTE_WRITE, &mr),
		  ZCRPC_INVALID_ARGUMENT);
	// A range that runs past the end of a mapping.
	long page = sysconf(_SC_PAGESIZE);
	void *one = mmap(nullptr, static_cast<size_t>(2 * page), PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(one, MAP_FAILED);
	ASSERT_EQ(munmap(static_cast<char *>(one) + page, static_cast<size_t>(page)), 0);
	EXPECT_EQ(zcrpc_mr_register(ctx, one, static_cast<size_t>(2 * page), 0, &mr),
		  ZCRPC_INVALID_ARGUMENT)
		<< "range past the mapping";
	EXPECT_EQ(mr, nullptr);
	// The context still works.
	ASSERT_EQ(zcrpc_mr_register(ctx, buf, sizeof(buf), ZCRPC_MR_REMOTE_WRITE, &mr), ZCRPC_OK);
	zcrpc_mr_deregister(mr);
	munmap(one, static_cast<size_t>(page));
	zcrpc_context_destroy(ctx);
	auto end = WaitResources(base, ScaledMs(5000));
	EXPECT_TRUE(SameResources(base, end)) << ResourcesStr(base) << " / " << ResourcesStr(end);
}
#endif

#ifndef ZCRPC_SOAK_LONG
namespace {
// A transport server whose worker progresses only while not paused: paused,
// its receives are used up and never reposted.
struct PausableEcho {
	zcrpc_worker *w = nullptr;
	zcrpc_listener *l = nullptr;
	std::atomic<bool> paused{false}, stop{false};
	std::atomic<int> accepted{0}, closed{0};
	std::vector<zcrpc_conn *> conns; // server thread only
	std::thread t;
	bool Start(const std::string &addr)
	{
		if (zcrpc_worker_create(nullptr, &w) != ZCRPC_OK)
			return false;
		zcrpc_listen_opts lo;
		zcrpc_listen_opts_init(&lo);
		zcrpc_conn_handlers lh;
		zcrpc_conn_handlers_init(&lh);
		lo.arg = this;
		lo.on_accept = [](zcrpc_listener *, zcrpc_conn *c, void *a) {
			auto *self = static_cast<PausableEcho *>(a);
			self->conns.push_back(c);
			self->accepted++;
		};
		lh.arg = this;
		lh.on_recv = [](zcrpc_conn *c, const void *d, size_t n,
				void *) {
			zcrpc_conn_send(c, d, n); // best effort echo
		};
		lh.on_state = [](zcrpc_conn *, zcrpc_conn_state s, zcrpc_status,
				 void *a) {
			if (s == ZCRPC_CONN_CLOSED)
				static_cast<PausableEcho *>(a)->closed++;
		};
		lo.conn_handlers = &lh;
		if (zcrpc_listen(w, addr.c_str(), "0", &lo, &l) != ZCRPC_OK)
			return false;
		t = std::thread([this] {
			while (!stop)
				if (paused)
					std::this_thread::sleep_for(1ms);
				else
					zcrpc_worker_progress(w, 1);
		});
		return true;
	}
	~PausableEcho()
	{
		stop = true;
		if (t.joinable())
			t.join();
		for (auto *c : conns)
			zcrpc_conn_destroy(c);
		zcrpc_listener_destroy(l);
		zcrpc_worker_destroy(w);
	}
};

struct Peer {
	zcrpc_conn *c = nullptr;
	int up = 0, closed = 0, echoes = 0;
	zcrpc_status why = ZCRPC_OK;
	std::string error;
	static void OnState(zcrpc_conn *c, zcrpc_conn_state s, zcrpc_status st, void *a)
	{
		auto *p = static_cast<Peer *>(a);
		if (s == ZCRPC_CONN_ESTABLISHED)
			p->up++;
		if (s == ZCRPC_CONN_CLOSED) {
			p->closed++;
			p->why = st;
			p->error = zcrpc_conn_get_error(c);
		}
	}
	static void OnRecv(zcrpc_conn *, const void *, size_t, void *a)
	{
		static_cast<Peer *>(a)->echoes++;
	}
	bool Connect(zcrpc_worker *w, const std::string &addr, uint16_t port)
	{
		zcrpc_conn_handlers h{};
		h.size = sizeof(h);
		h.on_state = OnState;
		h.on_recv = OnRecv;
		h.arg = this;
		if (zcrpc_connect(w, addr.c_str(), std::to_string(port).c_str(), nullptr, &h, &c) !=
		    ZCRPC_OK)
			return false;
		return ProgressUntil(w, [&] { return up || closed; }, ScaledMs(10000)) && up;
	}
};
} // namespace

// T10: flow control off (internal hook) with rnr_retry_count 0: the RNR
// error surfaces and closes only that connection; with flow control on the
// same workload makes no RNR.
TEST_F(Faults, FlowControlOffSurfacesRnrAndClosesOnlyThatConnection)
{
	PausableEcho server;
	ASSERT_TRUE(server.Start(env_.addr0));
	uint16_t port = zcrpc_listener_get_port(server.l);
	zcrpc_worker_opts wo;
	zcrpc_worker_opts_init(&wo);
	ASSERT_EQ(wo.rnr_retry_count, 0);
	wo.keepalive_ms = 0;
	zcrpc_worker *w = nullptr;
	ASSERT_EQ(zcrpc_worker_create(&wo, &w), ZCRPC_OK);
	Peer a, b;
	ASSERT_TRUE(a.Connect(w, env_.addr0, port));
	ASSERT_TRUE(b.Connect(w, env_.addr0, port));
	auto until = steady_clock::now() + ScaledMs(5000);
	while (server.accepted < 2 && steady_clock::now() < until)
		std::this_thread::sleep_for(1ms);
	ASSERT_EQ(server.accepted.load(), 2);
	zcrpc_conn_stats cs;
	zcrpc_conn_get_stats(a.c, &cs, sizeof(cs));
	const uint32_t window = cs.peer_recv_depth;
	// Both devices: which one a connection's QPs land on depends on the
	// guest's routes, not on this test.
	auto rnr = [&] {
		return RxeCounter(env_, "rcvd_rnr_err") + RxeCounter(env_, "send_rnr_err");
	};
	// The same workload on each: up to @limit messages into a receiver
	// that reads nothing: window + 16 with flow control; without it, as
	// many as it takes to empty the server's shared receive queue (which
	// holds the receives of every connection of its worker, more than one
	// connection's window).
	auto workload = [&](Peer &p, int *sent, int *refused, int limit) {
		*sent = *refused = 0;
		auto end = steady_clock::now() + ScaledMs(5000);
		while (*sent < limit && !p.closed &&
		       steady_clock::now() < end) {
			zcrpc_status st = zcrpc_conn_send(p.c, "0123456789", 10);
			if (st == ZCRPC_OK)
				(*sent)++;
			else if (st == ZCRPC_RESOURCE_EXHAUSTED)
				(*refused)++;
			else
				break;
			zcrpc_worker_progress(w, 0);
		}
	};

	// Flow control on (b): sends beyond the credits are refused, no RNR.
	server.paused = true;
	std::this_thread::sleep_for(5ms);
	int64_t rnr0 = rnr();
	ASSERT_GE(rnr0, 0);
	int sent = 0, refused = 0;
	workload(b, &sent, &refused, static_cast<int>(window) + 16);
	ProgressUntil(w, [] { return false; }, ScaledMs(500));
	EXPECT_GT(refused, 0);
	EXPECT_LT(sent, static_cast<int>(window)) << "sent past the peer's receives";
	EXPECT_EQ(b.closed, 0) << b.error;
	EXPECT_EQ(rnr(), rnr0) << "RNR with flow control on";
	server.paused = false;
	ASSERT_TRUE(ProgressUntil(w, [&] { return b.echoes == sent; }, ScaledMs(10000)))
		<< b.echoes << " of " << sent << " echoed";

	// Flow control off (a): the RNR error surfaces and closes a only.
	// First one echo with the hook on: the credit it returns must not
	// read as a protocol violation (the hook's credits were never
	// granted; the flood below flaked with that error instead of RNR).
	ASSERT_EQ(zcrpc__conn_test_no_flow_control(a.c), ZCRPC_OK);
	ASSERT_EQ(zcrpc_conn_send(a.c, "credit", 6), ZCRPC_OK);
	ASSERT_TRUE(ProgressUntil(w, [&] { return a.echoes == 1 || a.closed; }, ScaledMs(5000)));
	ASSERT_EQ(a.closed, 0) << a.error;
	server.paused = true;
	std::this_thread::sleep_for(5ms);
	int64_t rnr1 = rnr();
	workload(a, &sent, &refused, 1 << 20);
	ASSERT_TRUE(ProgressUntil(w, [&] { return a.closed > 0; }, ScaledMs(10000)))
		<< "sent " << sent << " messages past a receiver without receives";
	EXPECT_EQ(a.why, ZCRPC_UNAVAILABLE) << a.error;
	EXPECT_NE(a.error.find("RNR retry counter exceeded"), std::string::npos) << a.error;
	zcrpc_conn_get_stats(a.c, &cs, sizeof(cs));
	EXPECT_GE(cs.rnr_events, 1u);
	// T10's criterion is the status (RNR_RETRY_EXC_ERR, counted in
	// rnr_events above). rxe's own RNR counters move in a fresh guest but
	// were seen not to in a second run in the same guest although the
	// completion said RNR (docs/reliability.md, known limits): printed,
	// not asserted.
	std::printf("[T10] rxe RNR counters %lld -> %lld (%s: rcvd %lld send %lld; %s: rcvd %lld "
		    "send %lld)\n",
		    static_cast<long long>(rnr1), static_cast<long long>(rnr()),
		    env_.dev0.c_str(), static_cast<long long>(DevCounter(env_.dev0, "rcvd_rnr_err")),
		    static_cast<long long>(DevCounter(env_.dev0, "send_rnr_err")),
		    env_.dev1.c_str(), static_cast<long long>(DevCounter(env_.dev1, "rcvd_rnr_err")),
		    static_cast<long long>(DevCounter(env_.dev1, "send_rnr_err")));
	EXPECT_EQ(b.closed, 0) << "the other connection closed too: " << b.error;
	server.paused = false;
	// The server lets go of a (at its first message past its credits),
	// and the receives a's flood took from the shared receive queue are
	// posted again; only then does b send: until the server read the
	// flood, b's next message could find the shared queue empty
	// (docs/protocol.md §3, the exposure of shared receives).
	until = steady_clock::now() + ScaledMs(10000);
	while (server.closed < 1 && steady_clock::now() < until)
		std::this_thread::sleep_for(1ms);
	std::this_thread::sleep_for(50ms);
	EXPECT_EQ(server.closed.load(), 1) << "the server did not see exactly a close";
	// b still passes traffic.
	int before = b.echoes;
	ASSERT_EQ(zcrpc_conn_send(b.c, "after", 5), ZCRPC_OK);
	EXPECT_TRUE(ProgressUntil(
		w, [&] { return b.echoes > before; }, ScaledMs(10000)));
	zcrpc_conn_destroy(a.c);
	zcrpc_conn_destroy(b.c);
	EXPECT_TRUE(DrainWorker(w, ScaledMs(5000)));
	zcrpc_worker_destroy(w);
}

// T1: a refused connect fails UNAVAILABLE quickly and leaves no RDMA object.
TEST_F(Faults, RefusedConnectLeavesEveryRdmaResourceAtItsBaseline)
{
	uint16_t port;
	{
		EchoServer probe(env_.addr0); // an ephemeral port, then nobody listens
		ASSERT_TRUE(probe.ok());
		port = probe.port();
	}
	auto base = RdmaResources();
	ASSERT_FALSE(base.empty()) << "`rdma resource show` failed";
	for (int i = 0; i < 5; i++) {
		zcrpc_worker *w = nullptr;
		ASSERT_EQ(zcrpc_worker_create(nullptr, &w), ZCRPC_OK);
		zcrpc_channel *ch = nullptr;
		ASSERT_EQ(zcrpc_channel_create(w, env_.addr0.c_str(), std::to_string(port).c_str(),
					       nullptr, &ch),
			  ZCRPC_OK);
		Call c;
		auto t0 = steady_clock::now();
		ASSERT_EQ(StartCall(ch, SOAK_ECHO, &c, 1, 10), ZCRPC_OK);
		ASSERT_TRUE(ProgressUntil(w, [&] { return c.fired > 0; }, ScaledMs(5000)));
		EXPECT_LT(steady_clock::now() - t0, ScaledMs(2000));
		EXPECT_EQ(c.fired, 1);
		EXPECT_EQ(c.status, ZCRPC_UNAVAILABLE) << c.message;
		EXPECT_NE(c.message.find("refused"), std::string::npos) << c.message;
		zcrpc_channel_destroy(ch);
		EXPECT_TRUE(DrainWorker(w, ScaledMs(5000)));
		zcrpc_worker_destroy(w);
	}
	auto end = WaitResources(base, ScaledMs(5000));
	EXPECT_TRUE(SameResources(base, end))
		<< "before: " << ResourcesStr(base) << " after: " << ResourcesStr(end) << "\n"
		<< ResourceDetail();
}

namespace {
// The server's view of its connections: on_connect / on_disconnect with
// the status and zcrpc_conn_get_error(), recorded on the server's thread.
struct Ends {
	std::mutex mu;
	std::vector<zcrpc_conn *> live;
	std::vector<std::pair<zcrpc_status, std::string>> ended;

	static void OnConnect(zcrpc_server *, zcrpc_conn *c, void *a)
	{
		auto *e = static_cast<Ends *>(a);
		std::lock_guard<std::mutex> g(e->mu);
		e->live.push_back(c);
	}
	static void OnDisconnect(zcrpc_server *, zcrpc_conn *c, zcrpc_status why, void *a)
	{
		auto *e = static_cast<Ends *>(a);
		std::lock_guard<std::mutex> g(e->mu);
		e->ended.emplace_back(why, zcrpc_conn_get_error(c));
		for (size_t i = 0; i < e->live.size(); i++)
			if (e->live[i] == c)
				e->live.erase(e->live.begin() + static_cast<long>(i));
	}
	size_t Ended()
	{
		std::lock_guard<std::mutex> g(mu);
		return ended.size();
	}
	// Waits until @n connections ended; the last one's status and text.
	bool WaitEnded(size_t n, std::pair<zcrpc_status, std::string> *last)
	{
		auto until = steady_clock::now() + ScaledMs(10000);
		while (Ended() < n && steady_clock::now() < until)
			std::this_thread::sleep_for(1ms);
		std::lock_guard<std::mutex> g(mu);
		if (ended.size() != n)
			return false;
		*last = ended.back();
		return true;
	}
};

zcrpc_server_stats SStats(SoakServer &srv)
{
	zcrpc_server_stats st;
	srv.Run([&] { zcrpc_server_get_stats(srv.s(), &st, sizeof(st)); });
	return st;
}

bool Has(const std::string &s, const char *part)
{
	return s.find(part) != std::string::npos;
}
} // namespace

// docs/protocol.md §5: a clean exit, a crash and a refusal give three
// distinct outcomes. At the server: a client process that ran its calls and
// destroyed its channel ends OK (conns_closed), one SIGKILLed mid-load ends
// UNAVAILABLE "without closing" (conns_lost); an older client (the server
// announces no CLOSE bit here, so neither side uses it) still completes
// every call, and its clean exit reads as before. At the client: calls the
// server cut by closing in order are UNAVAILABLE "closed by the server"
// (retryable, as gRPC's are when a server goes away; not "lost"); a
// connect nobody answers is "refused", never "lost".
TEST_F(Faults, CleanExitCrashAndRefusalAreThreeDistinctOutcomes)
{
	Ends ends;
	zcrpc_server_opts so;
	zcrpc_server_opts_init(&so);
	so.on_connect = Ends::OnConnect;
	so.on_disconnect = Ends::OnDisconnect;
	so.arg = &ends;
	SoakServer srv;
	ASSERT_TRUE(srv.Start(env_.addr0, &so));
	std::string port = std::to_string(srv.port());
	std::pair<zcrpc_status, std::string> last;

	// 1. A client process that exits cleanly.
	{
		Child kid;
		ASSERT_TRUE(SpawnChild({FaultPeer(), "client", env_.addr0, port, "11", "60"}, false,
				       &kid));
		int st = kid.Wait(ScaledMs(60000));
		ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "the client's calls failed";
		ASSERT_TRUE(ends.WaitEnded(1, &last));
		std::printf("[close] clean exit: %s \"%s\"\n", zcrpc_status_str(last.first),
			    last.second.c_str());
		EXPECT_EQ(last.first, ZCRPC_OK) << last.second;
		EXPECT_TRUE(Has(last.second, "orderly close")) << last.second;
		auto st2 = SStats(srv);
		EXPECT_EQ(st2.conns_closed, 1u);
		EXPECT_EQ(st2.conns_lost, 0u);
	}
	// 2. A client process SIGKILLed under load.
	{
		uint64_t calls0 = SStats(srv).calls;
		Child kid;
		ASSERT_TRUE(SpawnChild({FaultPeer(), "client", env_.addr0, port, "12", "100000000"},
				       false, &kid));
		auto until = steady_clock::now() + ScaledMs(30000);
		while (SStats(srv).calls < calls0 + 50 && steady_clock::now() < until)
			std::this_thread::sleep_for(5ms);
		ASSERT_GE(SStats(srv).calls, calls0 + 50) << "the client never got going";
		int st = kid.Kill();
		ASSERT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL) << "the fault did not land";
		ASSERT_TRUE(ends.WaitEnded(2, &last));
		std::printf("[close] SIGKILL: %s \"%s\"\n", zcrpc_status_str(last.first),
			    last.second.c_str());
		EXPECT_EQ(last.first, ZCRPC_UNAVAILABLE) << last.second;
		EXPECT_TRUE(Has(last.second, "without closing")) << last.second;
		auto st2 = SStats(srv);
		EXPECT_EQ(st2.conns_closed, 1u);
		EXPECT_EQ(st2.conns_lost, 1u);
	}
	// 3. Without the CLOSE bit on one side: everything works, a clean exit
	// reads as a disconnect did before the close message.
	{
		srv.Run([&] { zcrpc__worker_test_clear_features(srv.w(), ZCRPC_FEAT_CLOSE); });
		Child kid;
		ASSERT_TRUE(SpawnChild({FaultPeer(), "client", env_.addr0, port, "13", "60"}, false,
				       &kid));
		int st = kid.Wait(ScaledMs(60000));
		ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "an older peer's calls failed";
		ASSERT_TRUE(ends.WaitEnded(3, &last));
		std::printf("[close] clean exit, no CLOSE bit: %s \"%s\"\n",
			    zcrpc_status_str(last.first), last.second.c_str());
		EXPECT_EQ(last.first, ZCRPC_UNAVAILABLE) << last.second;
		EXPECT_TRUE(Has(last.second, "no close message")) << last.second;
		srv.Run([&] { zcrpc__worker_test_clear_features(srv.w(), 0); });
	}
	// 4. The client's view of a server closing in order with calls held.
	zcrpc_worker *w = nullptr;
	ASSERT_EQ(zcrpc_worker_create(nullptr, &w), ZCRPC_OK);
	{
		zcrpc_channel *ch = nullptr;
		ASSERT_EQ(zcrpc_channel_create(w, env_.addr0.c_str(), port.c_str(), nullptr, &ch),
			  ZCRPC_OK);
		std::vector<Call> calls(4);
		for (size_t i = 0; i < calls.size(); i++)
			ASSERT_EQ(StartCall(ch, SOAK_HOLD, &calls[i], 900 + i, 16), ZCRPC_OK);
		ASSERT_TRUE(ProgressUntil(w, [&] { return CStats(ch).pending == 0; }, ScaledMs(20000)));
		ProgressUntil(w, [] { return false; }, 200ms); // the server holds them
		srv.Run([&] {
			std::lock_guard<std::mutex> g(ends.mu);
			for (auto *c : ends.live)
				zcrpc_conn_close(c);
		});
		ASSERT_TRUE(ProgressUntil(w, [&] {
			for (auto &c : calls)
				if (!c.fired)
					return false;
			return true;
		}, ScaledMs(10000)));
		for (auto &c : calls) {
			EXPECT_EQ(c.status, ZCRPC_UNAVAILABLE) << c.message;
			EXPECT_TRUE(Has(c.message, "closed by the server")) << c.message;
			EXPECT_FALSE(Has(c.message, "lost")) << c.message;
		}
		std::printf("[close] server closed in order: %s \"%s\"\n",
			    zcrpc_status_str(calls[0].status), calls[0].message.c_str());
		zcrpc_channel_destroy(ch);
		ASSERT_TRUE(ends.WaitEnded(4, &last));
		EXPECT_EQ(last.first, ZCRPC_OK) << last.second; // its own close
	}
	// 5. Refused: a port nobody listens on.
	{
		uint16_t dead;
		{
			EchoServer probe(env_.addr0);
			ASSERT_TRUE(probe.ok());
			dead = probe.port();
		}
		zcrpc_channel *ch = nullptr;
		ASSERT_EQ(zcrpc_channel_create(w, env_.addr0.c_str(), std::to_string(dead).c_str(),
					       nullptr, &ch),
			  ZCRPC_OK);
		Call c;
		ASSERT_EQ(StartCall(ch, SOAK_ECHO, &c, 1, 10), ZCRPC_OK);
		ASSERT_TRUE(ProgressUntil(w, [&] { return c.fired > 0; }, ScaledMs(5000)));
		std::printf("[close] refused: %s \"%s\"\n", zcrpc_status_str(c.status),
			    c.message.c_str());
		EXPECT_EQ(c.status, ZCRPC_UNAVAILABLE) << c.message;
		EXPECT_TRUE(Has(c.message, "refused")) << c.message;
		EXPECT_FALSE(Has(c.message, "lost")) << c.message;
		zcrpc_channel_destroy(ch);
	}
	EXPECT_TRUE(DrainWorker(w, ScaledMs(5000)));
	zcrpc_worker_destroy(w);
}

// T6: the server process is SIGKILLed with 512 calls in flight.
TEST_F(Faults, ServerKilledWith512CallsInFlightEachFailsOnceUnavailable)
{
	Child kid;
	uint16_t port = StartServerChild(env_, &kid);
	ASSERT_NE(port, 0) << "the server process did not start";
	zcrpc_worker *w = nullptr;
	ASSERT_EQ(zcrpc_worker_create(nullptr, &w), ZCRPC_OK);
	auto initial = WStats(w);
	zcrpc_channel *ch = nullptr;
	ASSERT_EQ(zcrpc_channel_create(w, env_.addr0.c_str(), std::to_string(port).c_str(), nullptr,
				       &ch),
		  ZCRPC_OK);
	const int n = 512;
	std::vector<Call> calls(n);
	for (int i = 0; i < n; i++)
		ASSERT_EQ(StartCall(ch, SOAK_HOLD, &calls[static_cast<size_t>(i)], 7000u + i, 64),
			  ZCRPC_OK);
	// Every request left (the server holds them all), then the kill.
	ASSERT_TRUE(ProgressUntil(w, [&] { return CStats(ch).pending == 0; }, ScaledMs(20000)));
	ProgressUntil(w, [] { return false; }, 300ms);
	for (auto &c : calls)
		ASSERT_EQ(c.fired, 0) << "a held call completed: " << c.message;
	EXPECT_EQ(CStats(ch).in_flight, static_cast<uint32_t>(n));
	EXPECT_GT(WStats(w).pool_in_use, initial.pool_in_use) << "no receive posted?";
	int st = kid.Kill();
	ASSERT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL) << "the fault did not land";
	auto t0 = steady_clock::now();
	ASSERT_TRUE(ProgressUntil(w, [&] {
		for (auto &c : calls)
			if (!c.fired)
				return false;
		return true;
	}, ScaledMs(10000))) << "calls hang after the server died";
	auto took = steady_clock::now() - t0;
	EXPECT_LT(took, ScaledMs(2000)) << "slower than 2 s (scaled)";
	ProgressUntil(w, [] { return false; }, 200ms); // duplicates would show now
	for (auto &c : calls) {
		EXPECT_EQ(c.fired, 1);
		EXPECT_EQ(c.status, ZCRPC_UNAVAILABLE) << c.message;
	}
	EXPECT_EQ(CStats(ch).in_flight, 0u);
	ASSERT_TRUE(ProgressUntil(w, [&] { return WStats(w).conns == 0; }, ScaledMs(5000)));
	EXPECT_EQ(WStats(w).pool_in_use, initial.pool_in_use) << "buffers not back in the pool";
	EXPECT_EQ(WStats(w).pool_bad_frees, 0u);
	// Flush completions == send WRs still posted at the end (none was
	// lost with the QP).
	EXPECT_EQ(WStats(w).unflushed_wrs, 0u);
	// Receives no longer flush with the QP (they belong to the worker's
	// shared receive queue, docs/design.md): none is lost because the
	// queue went with the last connection and every slot is back (above).
	EXPECT_EQ(WStats(w).recv_posted, 0u)
		<< "the shared receive queue outlived its connections";
	std::printf("[T6] flush completions %llu, WRs without one %llu\n",
		    static_cast<unsigned long long>(WStats(w).flushed_wcs),
		    static_cast<unsigned long long>(WStats(w).unflushed_wrs));
	// The process survives and serves a healthy peer.
	Child healthy;
	uint16_t port2 = StartServerChild(env_, &healthy);
	ASSERT_NE(port2, 0);
	EXPECT_TRUE(HealthyCall(w, env_.addr0, port2));
	zcrpc_channel_destroy(ch);
	EXPECT_TRUE(DrainWorker(w, ScaledMs(5000)));
	zcrpc_worker_destroy(w);
}

// T9: the server process is SIGSTOPped for 5 s under full load.
TEST_F(Faults, ServerStoppedFiveSecondsUnderFullLoadQueuesThenCompletes)
{
	Child kid;
	uint16_t port = StartServerChild(env_, &kid, "32"); // 31 requests unread at most
	ASSERT_NE(port, 0);
	zcrpc_worker *w = nullptr;
	ASSERT_EQ(zcrpc_worker_create(nullptr, &w), ZCRPC_OK);
	zcrpc_channel_opts co;
	zcrpc_channel_opts_init(&co);
	co.max_pending = 64;
	zcrpc_channel *ch = nullptr;
	ASSERT_EQ(zcrpc_channel_create(w, env_.addr0.c_str(), std::to_string(port).c_str(), &co,
				       &ch),
		  ZCRPC_OK);
	ASSERT_TRUE(HealthyCall(w, env_.addr0, port));
	Call warm;
	ASSERT_EQ(StartCall(ch, SOAK_ECHO, &warm, 5, 100), ZCRPC_OK);
	ASSERT_TRUE(ProgressUntil(w, [&] { return warm.fired > 0; }, ScaledMs(10000)));
	ASSERT_EQ(warm.status, ZCRPC_OK);
	// rxe counts receiver-not-ready errors; iWARP (siw) has no RNR at all:
	// a send without a receive would end the connection (checked below).
	const bool rxe = env_.provider == "rxe";
	int64_t rnr0 = RxeCounter(env_, "rcvd_rnr_err") + RxeCounter(env_, "send_rnr_err");
	if (rxe)
		ASSERT_GE(rnr0, 0);
	ASSERT_EQ(kill(kid.pid, SIGSTOP), 0);
	int wst = 0;
	ASSERT_EQ(waitpid(kid.pid, &wst, WUNTRACED), kid.pid);
	ASSERT_TRUE(WIFSTOPPED(wst)) << "the fault did not land";
	auto stopped_at = steady_clock::now();
	const int n = 400;
	std::vector<Call> calls(n);
	std::vector<bool> accepted(n, false);
	int refused = 0;
	for (int i = 0; i < n; i++) {
		auto t = steady_clock::now();
		zcrpc_status st = StartCall(ch, SOAK_ECHO, &calls[static_cast<size_t>(i)],
					    100u + i, 1 + static_cast<size_t>(i) * 7 % 3000);
		if (st == ZCRPC_OK) {
			accepted[static_cast<size_t>(i)] = true;
		} else {
			EXPECT_EQ(st, ZCRPC_RESOURCE_EXHAUSTED);
			EXPECT_LT(steady_clock::now() - t, ScaledMs(100)) << "refusal was not fast";
			refused++;
		}
		zcrpc_worker_progress(w, 0);
	}
	int n_acc = n - refused;
	EXPECT_GT(refused, 0) << "the queue grew without bound";
	EXPECT_LE(n_acc, 31 + 64) << "more accepted than the window plus the queue";
	EXPECT_GE(n_acc, 64) << "the queue bound was not used";
	// Stopped: nothing completes, nothing fails.
	while (steady_clock::now() - stopped_at < 5s)
		zcrpc_worker_progress(w, 10);
	for (int i = 0; i < n; i++)
		EXPECT_EQ(calls[static_cast<size_t>(i)].fired, 0)
			<< i << ": " << calls[static_cast<size_t>(i)].message;
	ASSERT_EQ(kill(kid.pid, SIGCONT), 0);
	ASSERT_TRUE(ProgressUntil(w, [&] {
		for (int i = 0; i < n; i++)
			if (accepted[static_cast<size_t>(i)] && !calls[static_cast<size_t>(i)].fired)
				return false;
		return true;
	}, ScaledMs(30000))) << "calls hang after SIGCONT";
	ProgressUntil(w, [] { return false; }, 200ms);
	for (int i = 0; i < n; i++) {
		auto &c = calls[static_cast<size_t>(i)];
		EXPECT_EQ(c.fired, accepted[static_cast<size_t>(i)] ? 1 : 0) << i;
		if (accepted[static_cast<size_t>(i)]) {
			EXPECT_EQ(c.status, ZCRPC_OK) << i << ": " << c.message;
			EXPECT_TRUE(c.data_ok) << i;
		}
	}
	int64_t rnr1 = RxeCounter(env_, "rcvd_rnr_err") + RxeCounter(env_, "send_rnr_err");
	if (rxe)
		EXPECT_EQ(rnr1, rnr0) << "receiver-not-ready errors";
	auto cs = CStats(ch);
	EXPECT_EQ(cs.reconnects, 0u) << "the connection did not survive";
	EXPECT_GE(cs.queue_full, static_cast<uint64_t>(refused));
	EXPECT_EQ(cs.in_flight, 0u);
	zcrpc_channel_destroy(ch);
	EXPECT_TRUE(DrainWorker(w, ScaledMs(5000)));
	EXPECT_EQ(WStats(w).pool_in_use, 0u);
	zcrpc_worker_destroy(w);
}

// T20: 2 x send_depth calls in one burst: none fails, completions in order.
TEST_F(Faults, BurstOfTwiceTheSendQueueNoneFailsAndOrderIsKept)
{
	SoakServer server;
	ASSERT_TRUE(server.Start(env_.addr0));
	zcrpc_worker_opts wo;
	zcrpc_worker_opts_init(&wo);
	wo.send_depth = 16;
	zcrpc_worker *w = nullptr;
	ASSERT_EQ(zcrpc_worker_create(&wo, &w), ZCRPC_OK);
	zcrpc_channel *ch = nullptr;
	ASSERT_EQ(zcrpc_channel_create(w, env_.addr0.c_str(), std::to_string(server.port()).c_str(),
				       nullptr, &ch),
		  ZCRPC_OK);
	ASSERT_TRUE(HealthyCall(w, env_.addr0, server.port()));
	for (int round = 0; round < 20; round++) {
		const int n = 2 * 16;
		std::vector<Call> calls(n);
		g_rank = 0;
		for (int i = 0; i < n; i++) // no progress in between: one burst
			ASSERT_EQ(StartCall(ch, SOAK_ECHO, &calls[static_cast<size_t>(i)],
					    static_cast<uint64_t>(round * 100 + i), 200),
				  ZCRPC_OK)
				<< i;
		ASSERT_TRUE(ProgressUntil(w, [&] {
			for (auto &c : calls)
				if (!c.fired)
					return false;
			return true;
		}, ScaledMs(20000)));
		for (int i = 0; i < n; i++) {
			auto &c = calls[static_cast<size_t>(i)];
			EXPECT_EQ(c.fired, 1);
			EXPECT_EQ(c.status, ZCRPC_OK) << c.message;
			EXPECT_TRUE(c.data_ok);
			EXPECT_EQ(c.order, i) << "completion order differs from issue order";
		}
	}
	zcrpc_channel_destroy(ch);
	EXPECT_TRUE(DrainWorker(w, ScaledMs(5000)));
	zcrpc_worker_destroy(w);
}

// T21: pinning refused (no CAP_IPC_LOCK, ulimit -l 64) -> RESOURCE_EXHAUSTED
// naming ulimit -l, nothing left behind; works once the limit is raised.
TEST_F(Faults, LockedMemoryLimitIsResourceExhaustedNamingUlimitThenRaisedWorks)
{
	SoakServer server;
	ASSERT_TRUE(server.Start(env_.addr0));
	ASSERT_EQ(access("/usr/sbin/capsh", X_OK), 0) << "capsh missing (libcap2-bin)";
	std::string cmd = "ulimit -l 64 && exec " + FaultPeer() + " memlock " + env_.addr0 + " " +
			  std::to_string(server.port());
	Child kid;
	ASSERT_TRUE(SpawnChild({"/usr/sbin/capsh", "--drop=cap_ipc_lock", "--", "-c", cmd}, true,
			       &kid));
	std::string out, line;
	auto until = steady_clock::now() + ScaledMs(60000);
	while (steady_clock::now() < until) {
		line = kid.ReadLine(ScaledMs(60000));
		if (line.empty())
			break;
		out += line + "\n";
	}
	int st = kid.Wait(ScaledMs(10000));
	EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << out;
	EXPECT_EQ(out.find("FAILED"), std::string::npos) << out;
	for (const char *want : {"limit: soft 65536 hard 65536",
				 "held: limited: registering 1 MiB is RESOURCE_EXHAUSTED",
				 "held: limited: the connection fails RESOURCE_EXHAUSTED",
				 "held: limited: its message names ulimit -l",
				 "held: limited: no partial state", "held: raised: registering 1 MiB works",
				 "held: raised: a call through the same worker works"})
		EXPECT_NE(out.find(want), std::string::npos) << "missing \"" << want << "\" in\n" << out;
	std::printf("%s", out.c_str());
	// The server in this process is unharmed.
	zcrpc_worker *w = nullptr;
	ASSERT_EQ(zcrpc_worker_create(nullptr, &w), ZCRPC_OK);
	EXPECT_TRUE(HealthyCall(w, env_.addr0, server.port()));
	zcrpc_worker_destroy(w);
}
#endif

namespace {
// T28: destroy the client (channel, then worker) with 1000 calls outstanding.
void DestroyWithCallsOutstanding(const RxeEnv &env, int iterations)
{
	{ // warm librdmacm's per-process device state up before the baseline
		SoakServer warm;
		ASSERT_TRUE(warm.Start(env.addr0));
		zcrpc_worker *w = nullptr;
		ASSERT_EQ(zcrpc_worker_create(nullptr, &w), ZCRPC_OK);
		ASSERT_TRUE(HealthyCall(w, env.addr0, warm.port()));
		zcrpc_worker_destroy(w);
	}
	// Before the server: its pool keeps the regions it grew (registered
	// memory) until it is destroyed at the end.
	auto base = RdmaResources();
	ASSERT_FALSE(base.empty());
	auto server_ptr = std::make_unique<SoakServer>();
	SoakServer &server = *server_ptr;
	ASSERT_TRUE(server.Start(env.addr0));
	auto wait_server_idle = [&] {
		auto until = steady_clock::now() + ScaledMs(20000);
		zcrpc_server_stats ss{};
		zcrpc_worker_stats ws{};
		size_t held = 1;
		while (steady_clock::now() < until) {
			server.Run([&] {
				zcrpc_server_get_stats(server.s(), &ss,
						       sizeof(ss));
				zcrpc_worker_get_stats(server.w(), &ws,
						       sizeof(ws));
				held = soak_server_held(server.ss());
			});
			if (ss.connections == 0 && ws.conns == 0 && ws.pool_in_use == 0 && held == 0)
				return true;
			std::this_thread::sleep_for(10ms);
		}
		return false;
	};
	ASSERT_TRUE(wait_server_idle());
	const int n = 1000;
	for (int it = 0; it < iterations; it++) {
		zcrpc_worker *w = nullptr;
		ASSERT_EQ(zcrpc_worker_create(nullptr, &w), ZCRPC_OK);
		zcrpc_channel *ch = nullptr;
		ASSERT_EQ(zcrpc_channel_create(w, env.addr0.c_str(),
					       std::to_string(server.port()).c_str(), nullptr, &ch),
			  ZCRPC_OK);
		std::vector<Call> calls(n);
		for (int i = 0; i < n; i++)
			ASSERT_EQ(StartCall(ch, i % 2 ? SOAK_HOLD : SOAK_SLOW,
					    &calls[static_cast<size_t>(i)], static_cast<uint64_t>(i),
					    static_cast<size_t>(i % 300)),
				  ZCRPC_OK);
		// Let a varying part of them reach the server.
		ProgressUntil(w, [&] { return CStats(ch).pending == 0; },
			      milliseconds(it % 4 == 0 ? 0 : 50 * (it % 4)));
		zcrpc_channel_destroy(ch); // completes the rest, CANCELLED
		int cancelled = 0, ok = 0;
		for (auto &c : calls) {
			EXPECT_EQ(c.fired, 1) << "iteration " << it;
			cancelled += c.status == ZCRPC_CANCELLED;
			ok += c.status == ZCRPC_OK && c.data_ok;
		}
		EXPECT_EQ(cancelled + ok, n) << "iteration " << it;
		EXPECT_GE(cancelled, n / 2) << "iteration " << it << ": held calls not CANCELLED";
		zcrpc_worker_destroy(w); // with its connection still up
		for (auto &c : calls)
			ASSERT_EQ(c.fired, 1) << "a callback ran after destroy";
	}
	EXPECT_TRUE(wait_server_idle()) << "the server kept calls or slots of destroyed clients";
	zcrpc_worker *w = nullptr;
	ASSERT_EQ(zcrpc_worker_create(nullptr, &w), ZCRPC_OK);
	EXPECT_TRUE(HealthyCall(w, env.addr0, server.port())) << "the server stopped serving";
	zcrpc_worker_destroy(w);
	server_ptr.reset();
	auto end = WaitResources(base, ScaledMs(10000));
	EXPECT_TRUE(SameResources(base, end))
		<< "before: " << ResourcesStr(base) << " after: " << ResourcesStr(end) << "\n"
		<< ResourceDetail();
}
} // namespace

#ifdef ZCRPC_SOAK_LONG
TEST_F(FaultsLong, ClientDestroyedWith1000CallsOutstandingHundredTimes)
{
	DestroyWithCallsOutstanding(env_, 100);
}
#else
TEST_F(Faults, ClientDestroyedWith1000CallsOutstandingTenTimes)
{
	DestroyWithCallsOutstanding(env_, 10);
}
#endif
