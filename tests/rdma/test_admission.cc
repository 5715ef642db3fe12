// Admission over rxe (docs/protocol.md §1, §2): the pre-shared key proof,
// the bounded handshakes and the handshake deadline. Scenarios T3 (bad,
// missing, replayed proof), T4 (malformed private data), T5 (a client that
// never proves its key, or dies first) and T26 (a flood of connects that
// never authenticate).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <rdma/rdma_cma.h>
#include <sys/wait.h>
#include <unistd.h>

#include "rdma_env.h"
#include "transport/auth.h"
#include "transport/hello.h"
#include "zcrpc/rpc.h"

using namespace std::chrono;
using namespace std::chrono_literals;

namespace {

const char *kEcho = "/zcrpc.test.Auth/Echo";
const uint8_t kKey[32] = {'z', 'c', 'r', 'p', 'c', '-', 't', 'e', 's', 't', '-', 'k', 'e', 'y', '-', '0',
			  '1', '2', '3', '4', '5', '6', '7', '8', '9', 'a', 'b', 'c', 'd', 'e', 'f', 'g'};

std::string KeyHex(const uint8_t *k, size_t n)
{
	std::string s;
	char b[3];
	for (size_t i = 0; i < n; i++) {
		std::snprintf(b, sizeof(b), "%02x", k[i]);
		s += b;
	}
	return s;
}

// Lines of `rdma resource show RES` (every QP/MR of the system), -1 when the
// tool fails.
int RdmaResCount(const char *res)
{
	std::string cmd = std::string("rdma resource show ") + res + " 2>/dev/null";
	FILE *f = popen(cmd.c_str(), "r");
	if (!f)
		return -1;
	int lines = 0;
	char buf[512];
	while (std::fgets(buf, sizeof(buf), f))
		if (std::strstr(buf, "link "))
			lines++;
	return pclose(f) == 0 ? lines : -1;
}

// An RPC server with a key on its own worker and thread. Counts handler
// runs and connections handed to the RPC layer, and the highest number of
// handshakes in progress it ever saw.
class AuthServer {
public:
	std::atomic<int> handler_runs{0}, connects{0};
	std::atomic<uint32_t> max_handshakes_seen{0};
	zcrpc_worker *w = nullptr;
	zcrpc_server *s = nullptr;
	// Run on the server's worker before it listens (test hooks), or empty.
	std::function<void(zcrpc_worker *)> prepare;

	bool Start(const std::string &addr, zcrpc_server_opts o)
	{
		o.on_connect = OnConnect;
		o.arg = this;
		if (zcrpc_worker_create(nullptr, &w) != ZCRPC_OK)
			return false;
		if (prepare)
			prepare(w);
		if (zcrpc_server_create(w, &o, &s) != ZCRPC_OK ||
		    zcrpc_server_register(s, kEcho, Echo, this) != ZCRPC_OK ||
		    zcrpc_server_listen(s, addr.c_str(), "0") != ZCRPC_OK)
			return false;
		thread_ = std::thread([this] {
			while (!stop_.load(std::memory_order_relaxed)) {
				zcrpc_worker_progress(w, 1);
				zcrpc_worker_stats st;
				zcrpc_worker_get_stats(w, &st, sizeof(st));
				if (st.handshakes > max_handshakes_seen)
					max_handshakes_seen = st.handshakes;
			}
		});
		return true;
	}
	uint16_t port() const { return zcrpc_server_get_port(s); }
	// The worker's counters, read on its own thread.
	zcrpc_worker_stats Stats()
	{
		struct Snap {
			zcrpc_worker_stats st;
			std::atomic<bool> done{false};
		} snap;
		EXPECT_EQ(zcrpc_worker_post(
				  w,
				  [](zcrpc_worker *wk, void *a) {
					  auto *sn = static_cast<Snap *>(a);
					  zcrpc_worker_get_stats(
						  wk, &sn->st, sizeof(sn->st));
					  sn->done = true;
				  },
				  &snap),
			  ZCRPC_OK);
		auto end = steady_clock::now() + Scaled(5000);
		while (!snap.done && steady_clock::now() < end)
			std::this_thread::sleep_for(1ms);
		EXPECT_TRUE(snap.done.load());
		return snap.st;
	}
	// Waits until @f(stats) holds; returns it.
	bool WaitStats(const std::function<bool(const zcrpc_worker_stats &)> &f, milliseconds t)
	{
		auto end = steady_clock::now() + t;
		for (;;) {
			zcrpc_worker_stats st = Stats();
			if (f(st))
				return true;
			if (steady_clock::now() >= end)
				return false;
			std::this_thread::sleep_for(5ms);
		}
	}
	~AuthServer()
	{
		stop_ = true;
		if (thread_.joinable())
			thread_.join();
		zcrpc_server_destroy(s);
		zcrpc_worker_destroy(w);
	}

private:
	static void Echo(zcrpc_server_call *c, const zcrpc_request *r, void *a)
	{
		static_cast<AuthServer *>(a)->handler_runs++;
		zcrpc_server_call_reply(c, ZCRPC_OK, nullptr, r->data, r->len, nullptr);
	}
	static void OnConnect(zcrpc_server *, zcrpc_conn *, void *a)
	{
		static_cast<AuthServer *>(a)->connects++;
	}
	std::atomic<bool> stop_{false};
	std::thread thread_;
};

zcrpc_server_opts ServerOpts(const uint8_t *key, uint32_t max_handshakes = 0,
			     int handshake_ms = 0)
{
	zcrpc_server_opts o;
	zcrpc_server_opts_init(&o);
	o.psk = key;
	o.psk_len = key ? 32 : 0;
	o.max_handshakes = max_handshakes;
	o.handshake_timeout_ms = handshake_ms;
	return o;
}

// A transport-level client connection.
struct Conn {
	zcrpc_conn *conn = nullptr;
	int established = 0, closed = 0;
	zcrpc_status status = ZCRPC_OK;
	std::string detail;

	static void OnState(zcrpc_conn *c, zcrpc_conn_state st, zcrpc_status s, void *arg)
	{
		auto *self = static_cast<Conn *>(arg);
		if (st == ZCRPC_CONN_ESTABLISHED)
			self->established++;
		if (st == ZCRPC_CONN_CLOSED) {
			self->closed++;
			self->status = s;
			self->detail = zcrpc_conn_get_error(c);
		}
	}
	static void OnRecv(zcrpc_conn *, const void *, size_t, void *) {}
	zcrpc_status Start(zcrpc_worker *w, const std::string &addr, uint16_t port,
			   const uint8_t *key, int mode = ZCRPC_AUTH_TEST_NORMAL,
			   const uint8_t *proof = nullptr, uint32_t recv_depth = 0)
	{
		zcrpc_connect_opts o;
		zcrpc_connect_opts_init(&o);
		o.timeout_ms = 600000; // the server's deadline is under test, not ours
		o.psk = key;
		o.psk_len = key ? 32 : 0;
		o.identity = "test-client";
		o.recv_depth = recv_depth;
		zcrpc_conn_handlers h{sizeof(h), OnState, OnRecv, this};
		zcrpc_status st = zcrpc_connect(w, addr.c_str(), std::to_string(port).c_str(), &o,
						&h, &conn);
		if (st == ZCRPC_OK && mode != ZCRPC_AUTH_TEST_NORMAL)
			st = zcrpc__conn_test_auth(conn, mode, proof);
		return st;
	}
	~Conn() { zcrpc_conn_destroy(conn); }
};

struct Result {
	int calls = 0;
	zcrpc_status status = ZCRPC_UNKNOWN;
	std::string message;
};

struct Channel {
	zcrpc_worker *w = nullptr;
	zcrpc_channel *ch = nullptr;
	Channel(zcrpc_worker *wk, const std::string &addr, uint16_t port, const uint8_t *key,
		int backoff_ms = 100)
		: w(wk)
	{
		zcrpc_channel_opts o;
		zcrpc_channel_opts_init(&o);
		o.psk = key;
		o.psk_len = key ? 32 : 0;
		o.identity = "channel";
		o.backoff_initial_ms = backoff_ms;
		o.backoff_max_ms = backoff_ms * 4;
		o.connect_timeout_ms = static_cast<int>(Scaled(10000).count());
		EXPECT_EQ(zcrpc_channel_create(w, addr.c_str(), std::to_string(port).c_str(), &o,
					       &ch),
			  ZCRPC_OK);
	}
	~Channel() { zcrpc_channel_destroy(ch); }
	// One asynchronous echo, waited for (cancelled when it takes longer
	// than @wait_ms, so its callback never outlives @r).
	Result Call(const std::string &payload, int wait_ms = 20000)
	{
		Result r;
		zcrpc_call_id id = 0;
		EXPECT_EQ(zcrpc_call_async(
				  ch, zcrpc_method_id(kEcho), payload.data(), payload.size(), nullptr,
				  [](zcrpc_channel *, const zcrpc_reply *rep, void *a) {
					  auto *res = static_cast<Result *>(a);
					  res->calls++;
					  res->status = rep->status;
					  res->message = rep->message ? rep->message : "";
				  },
				  &r, &id),
			  ZCRPC_OK);
		EXPECT_TRUE(ProgressUntil(w, [&] { return r.calls > 0; }, Scaled(wait_ms)))
			<< "call still running after " << wait_ms << " ms (scaled)";
		if (!r.calls) {
			zcrpc_call_cancel(ch, id);
			while (!r.calls)
				zcrpc_worker_progress(w, 10);
		}
		return r;
	}
};

class Admission : public RdmaTest {
protected:
	void SetUp() override
	{
		RdmaTest::SetUp();
		ASSERT_EQ(zcrpc_worker_create(nullptr, &w_), ZCRPC_OK);
	}
	void TearDown() override { zcrpc_worker_destroy(w_); }
	bool Wait(const std::function<bool()> &f, int ms)
	{
		return ProgressUntil(w_, f, Scaled(ms));
	}
	zcrpc_worker *w_ = nullptr;
};

} // namespace

TEST_F(Admission, GoodKeyConnectsCallsAndGetsItsGuaranteedShareAfterItsProof)
{
	AuthServer srv;
	ASSERT_TRUE(srv.Start(env_.addr0, ServerOpts(kKey)));
	{
		Channel ch(w_, env_.addr0, srv.port(), kKey);
		for (int i = 0; i < 20; i++) {
			Result r = ch.Call("ping " + std::to_string(i));
			ASSERT_EQ(r.status, ZCRPC_OK) << r.message;
		}
	}
	EXPECT_EQ(srv.handler_runs.load(), 20);
	EXPECT_EQ(srv.connects.load(), 1);

	// At the transport level: ESTABLISHED only after the proof, with the
	// server's guaranteed share (recv_share 16) granted, though its ACCEPT
	// offered 2.
	Conn c;
	ASSERT_EQ(c.Start(w_, env_.addr0, srv.port(), kKey), ZCRPC_OK);
	ASSERT_TRUE(Wait([&] { return c.established || c.closed; }, 10000));
	ASSERT_EQ(c.established, 1) << c.detail;
	zcrpc_conn_stats cs;
	zcrpc_conn_get_stats(c.conn, &cs, sizeof(cs));
	EXPECT_EQ(cs.peer_recv_depth, 16u);
	EXPECT_TRUE(zcrpc_conn_can_send(c.conn));
	uint8_t proof[ZCRPC_AUTH_PROOF_LEN];
	EXPECT_EQ(zcrpc__conn_test_auth_sent(c.conn, proof), ZCRPC_OK);
	zcrpc_worker_stats st = srv.Stats();
	EXPECT_EQ(st.rejected_auth, 0u);
	EXPECT_EQ(st.handshakes, 0u);
}

// T3: every way of not proving the key ends UNAUTHENTICATED, counted once
// each; no handler runs, nothing reaches the RPC layer, nothing is
// registered; a good client still works afterwards.
TEST_F(Admission, BadMissingReplayedAndWrongFirstMessageAreUnauthenticated)
{
	AuthServer srv;
	ASSERT_TRUE(srv.Start(env_.addr0, ServerOpts(kKey)));
	uint8_t bad_key[32];
	std::memcpy(bad_key, kKey, sizeof(bad_key));
	bad_key[31] ^= 0x01;

	// A good connection first, so both pools have grown; its proof is the
	// one replayed below.
	uint8_t captured[ZCRPC_AUTH_PROOF_LEN];
	{
		Conn good;
		ASSERT_EQ(good.Start(w_, env_.addr0, srv.port(), kKey), ZCRPC_OK);
		ASSERT_TRUE(Wait([&] { return good.established || good.closed; }, 10000));
		ASSERT_EQ(good.established, 1) << good.detail;
		ASSERT_EQ(zcrpc__conn_test_auth_sent(good.conn, captured), ZCRPC_OK);
		Channel warm(w_, env_.addr0, srv.port(), kKey);
		ASSERT_EQ(warm.Call("warm").status, ZCRPC_OK);
	}
	ASSERT_TRUE(srv.WaitStats([](const zcrpc_worker_stats &s) { return s.conns == 0; },
				  Scaled(5000)));
	const int connects0 = srv.connects.load(), runs0 = srv.handler_runs.load();
	const int mr0 = RdmaResCount("mr");
	ASSERT_GE(mr0, 0) << "`rdma resource show mr` failed";
	uint64_t rejected = srv.Stats().rejected_auth;
	EXPECT_EQ(rejected, 0u);

	// Bad key, through a channel: the connect and every call.
	{
		Channel ch(w_, env_.addr0, srv.port(), bad_key, 5000);
		Result r = ch.Call("x");
		EXPECT_EQ(r.status, ZCRPC_UNAUTHENTICATED) << r.message;
		EXPECT_NE(r.message.find("refused the pre-shared key"), std::string::npos)
			<< r.message;
		Result again = ch.Call("y"); // within the backoff: same answer
		EXPECT_EQ(again.status, ZCRPC_UNAUTHENTICATED) << again.message;
	}
	ASSERT_TRUE(srv.WaitStats([&](const zcrpc_worker_stats &s) { return s.rejected_auth == 1; },
				  Scaled(5000)));

	// Missing key: refused at the connect request (REJECT hello).
	{
		Channel ch(w_, env_.addr0, srv.port(), nullptr, 5000);
		Result r = ch.Call("x");
		EXPECT_EQ(r.status, ZCRPC_UNAUTHENTICATED) << r.message;
		EXPECT_NE(r.message.find("UNAUTHENTICATED"), std::string::npos) << r.message;
	}
	ASSERT_TRUE(srv.WaitStats([&](const zcrpc_worker_stats &s) { return s.rejected_auth == 2; },
				  Scaled(5000)));

	// Replayed proof: captured from the good connection, sent verbatim on
	// a new one (another nonce).
	{
		Conn replay;
		ASSERT_EQ(replay.Start(w_, env_.addr0, srv.port(), kKey, ZCRPC_AUTH_TEST_PROOF,
				       captured),
			  ZCRPC_OK);
		ASSERT_TRUE(Wait([&] { return replay.closed > 0; }, 10000));
		EXPECT_EQ(replay.established, 0);
		EXPECT_EQ(replay.status, ZCRPC_UNAUTHENTICATED) << replay.detail;
		uint8_t sent[ZCRPC_AUTH_PROOF_LEN];
		ASSERT_EQ(zcrpc__conn_test_auth_sent(replay.conn, sent), ZCRPC_OK);
		EXPECT_EQ(std::memcmp(sent, captured, sizeof(sent)), 0) << "not a replay";
	}
	ASSERT_TRUE(srv.WaitStats([&](const zcrpc_worker_stats &s) { return s.rejected_auth == 3; },
				  Scaled(5000)));

	// A DATA message where AUTH must come.
	{
		Conn data_first;
		ASSERT_EQ(data_first.Start(w_, env_.addr0, srv.port(), kKey,
					   ZCRPC_AUTH_TEST_DATA_FIRST),
			  ZCRPC_OK);
		ASSERT_TRUE(Wait([&] { return data_first.closed > 0; }, 10000));
		EXPECT_EQ(data_first.established, 0);
		EXPECT_EQ(data_first.status, ZCRPC_UNAUTHENTICATED) << data_first.detail;
	}
	ASSERT_TRUE(srv.WaitStats([&](const zcrpc_worker_stats &s) { return s.rejected_auth == 4; },
				  Scaled(5000)));

	// Nothing of those reached the RPC layer, ran, or registered memory,
	// and every refused connection is gone.
	EXPECT_EQ(srv.connects.load(), connects0);
	EXPECT_EQ(srv.handler_runs.load(), runs0);
	ASSERT_TRUE(srv.WaitStats(
		[](const zcrpc_worker_stats &s) { return s.conns == 0 && s.handshakes == 0; },
		Scaled(5000)));
	EXPECT_EQ(RdmaResCount("mr"), mr0) << "a memory region was registered for a refused client";
	EXPECT_EQ(srv.Stats().rejected_busy, 0u);

	// A good client still works.
	Channel ch(w_, env_.addr0, srv.port(), kKey);
	Result r = ch.Call("after");
	EXPECT_EQ(r.status, ZCRPC_OK) << r.message;
	EXPECT_EQ(srv.handler_runs.load(), runs0 + 1);
	EXPECT_EQ(srv.connects.load(), connects0 + 1);
}

TEST_F(Admission, KeyedClientRefusesAServerWithoutAKeyWhichStillServesOthers)
{
	AuthServer srv;
	ASSERT_TRUE(srv.Start(env_.addr0, ServerOpts(nullptr)));
	{
		Channel ch(w_, env_.addr0, srv.port(), kKey, 5000);
		Result r = ch.Call("x");
		EXPECT_EQ(r.status, ZCRPC_UNAUTHENTICATED) << r.message;
		EXPECT_NE(r.message.find("does not ask for the pre-shared key"), std::string::npos)
			<< r.message;
	}
	// Without keys on either side, nothing changed (version-1 behaviour).
	Channel plain(w_, env_.addr0, srv.port(), nullptr);
	Result r = plain.Call("plain");
	EXPECT_EQ(r.status, ZCRPC_OK) << r.message;
	EXPECT_EQ(srv.handler_runs.load(), 1);
	EXPECT_EQ(srv.Stats().rejected_auth, 0u);
}

// Mutual admission (issue 16): a server found through a registry must
// prove the key too, so a stranger that registered itself cannot take the
// client's calls.
TEST_F(Admission, MutualAStrangerWithoutTheKeyCannotTakeTheClientsCalls)
{
	AuthServer srv;
	srv.prepare = [](zcrpc_worker *w) { zcrpc__worker_test_auth_stranger(w, 1); };
	ASSERT_TRUE(srv.Start(env_.addr0, ServerOpts(kKey)));
	Channel ch(w_, env_.addr0, srv.port(), kKey, 5000);
	Result r = ch.Call("secret");
	EXPECT_EQ(r.status, ZCRPC_UNAUTHENTICATED) << r.message;
	EXPECT_NE(r.message.find("the server's proof of the pre-shared key does not match"),
		  std::string::npos)
		<< r.message;
	EXPECT_EQ(srv.handler_runs.load(), 0) << "the call never went to the stranger";
}

TEST_F(Admission, MutualAKeyedClientRefusesAServerThatCannotProveTheKeyBack)
{
	AuthServer srv;
	srv.prepare = [](zcrpc_worker *w) {
		zcrpc__worker_test_clear_features(w, ZCRPC_FEAT_MUTUAL);
	};
	ASSERT_TRUE(srv.Start(env_.addr0, ServerOpts(kKey)));
	Channel ch(w_, env_.addr0, srv.port(), kKey, 5000);
	Result r = ch.Call("secret");
	EXPECT_EQ(r.status, ZCRPC_UNAUTHENTICATED) << r.message;
	EXPECT_NE(r.message.find("cannot prove the pre-shared key"), std::string::npos)
		<< r.message;
	EXPECT_EQ(srv.handler_runs.load(), 0);
	// The same server's key proof by a mutual pair works (the good path
	// of every keyed test above is mutual now).
	AuthServer good;
	ASSERT_TRUE(good.Start(env_.addr0, ServerOpts(kKey)));
	Channel ok(w_, env_.addr0, good.port(), kKey, 5000);
	r = ok.Call("secret");
	EXPECT_EQ(r.status, ZCRPC_OK) << r.message;
	EXPECT_EQ(good.handler_runs.load(), 1);
}

TEST_F(Admission, BadKeyLengthsAndIdentitiesAreRefusedUpFront)
{
	zcrpc_connect_opts o;
	zcrpc_connect_opts_init(&o);
	zcrpc_conn_handlers h{sizeof(h), Conn::OnState, Conn::OnRecv, nullptr};
	zcrpc_conn *c = nullptr;
	o.psk = kKey;
	o.psk_len = ZCRPC_PSK_MIN - 1;
	EXPECT_EQ(zcrpc_connect(w_, env_.addr0.c_str(), "1", &o, &h, &c), ZCRPC_INVALID_ARGUMENT);
	o.psk_len = 32;
	std::string longid(ZCRPC_IDENTITY_MAX + 1, 'i');
	o.identity = longid.c_str();
	EXPECT_EQ(zcrpc_connect(w_, env_.addr0.c_str(), "1", &o, &h, &c), ZCRPC_INVALID_ARGUMENT);
	zcrpc_listen_opts lo;
	zcrpc_listen_opts_init(&lo);
	lo.on_accept = [](zcrpc_listener *, zcrpc_conn *, void *) {};
	lo.psk = kKey;
	lo.psk_len = ZCRPC_PSK_MAX + 1;
	zcrpc_listener *l = nullptr;
	EXPECT_EQ(zcrpc_listen(w_, env_.addr0.c_str(), "0", &lo, &l), ZCRPC_INVALID_ARGUMENT);
	zcrpc_server_opts so = ServerOpts(kKey);
	so.psk_len = 8;
	zcrpc_server *s = nullptr;
	EXPECT_EQ(zcrpc_server_create(w_, &so, &s), ZCRPC_INVALID_ARGUMENT);
	zcrpc_channel_opts co;
	zcrpc_channel_opts_init(&co);
	co.psk = kKey;
	co.psk_len = 100;
	zcrpc_channel *ch = nullptr;
	EXPECT_EQ(zcrpc_channel_create(w_, env_.addr0.c_str(), "1", &co, &ch),
		  ZCRPC_INVALID_ARGUMENT);
}

// T5, first half: a client that connects and never sends AUTH. While it
// waits, the server holds 2 receive slots for it and nothing else; at the
// handshake deadline everything is released.
TEST_F(Admission, SilentClientIsReapedAtTheHandshakeDeadline)
{
	const int deadline_ms = 800;
	AuthServer srv;
	ASSERT_TRUE(srv.Start(env_.addr0, ServerOpts(kKey, 0, deadline_ms)));
	const int qp0 = RdmaResCount("qp");
	ASSERT_GE(qp0, 0) << "`rdma resource show qp` failed";
	zcrpc_worker_stats base = srv.Stats();

	Conn silent;
	ASSERT_EQ(silent.Start(w_, env_.addr0, srv.port(), kKey, ZCRPC_AUTH_TEST_SILENT), ZCRPC_OK);
	auto t0 = steady_clock::now();
	ASSERT_TRUE(ProgressUntil(
		w_,
		[&] {
			zcrpc_worker_stats s = srv.Stats();
			return s.handshakes == 1 && s.pool_in_use > base.pool_in_use;
		},
		Scaled(5000)))
		<< "the server never held the connection";
	zcrpc_worker_stats held = srv.Stats();
	EXPECT_EQ(held.conns, base.conns + 1);
	EXPECT_LE(held.pool_in_use - base.pool_in_use, uint32_t{ZCRPC_AUTH_RECV_INITIAL})
		<< "more than the minimal window posted before the proof";
	EXPECT_GT(RdmaResCount("qp"), qp0);

	// The server closes it at its deadline; the client hears the close.
	ASSERT_TRUE(Wait([&] { return silent.closed > 0; }, deadline_ms + 10000));
	auto took = duration_cast<milliseconds>(steady_clock::now() - t0);
	EXPECT_GE(took, milliseconds(deadline_ms) - 50ms);
	EXPECT_LE(took, milliseconds(deadline_ms) + Scaled(3000));
	EXPECT_EQ(silent.established, 0);
	// Usually "the server closed the connection before answering the key
	// proof"; when the CM's RTU was slow, the server's teardown ends the
	// connection before it was established there (CONNECT_ERROR): both
	// are UNAVAILABLE.
	EXPECT_EQ(silent.status, ZCRPC_UNAVAILABLE) << silent.detail;
	ASSERT_TRUE(srv.WaitStats(
		[&](const zcrpc_worker_stats &s) {
			return s.handshakes == 0 && s.conns == base.conns &&
			       s.pool_in_use == base.pool_in_use;
		},
		Scaled(3000)))
		<< "the server did not release the connection";
	zcrpc_worker_stats after = srv.Stats();
	EXPECT_EQ(after.handshake_timeouts, base.handshake_timeouts + 1);
	EXPECT_EQ(after.rejected_auth, base.rejected_auth);
	EXPECT_EQ(srv.connects.load(), 0);
	zcrpc_conn_destroy(silent.conn);
	silent.conn = nullptr;
	ProgressUntil(w_, [] { return false; }, 50ms); // reap
	EXPECT_EQ(RdmaResCount("qp"), qp0);
}

#ifdef ZCRPC_TEST_AUTH_VICTIM
// T5, second half: the client process dies between ESTABLISHED and its
// proof (SIGKILL): the server frees the connection within its deadline.
TEST_F(Admission, ClientKilledBeforeItsProofIsFreedWithinTheDeadline)
{
	const int deadline_ms = 3000;
	AuthServer srv;
	ASSERT_TRUE(srv.Start(env_.addr0, ServerOpts(kKey, 0, deadline_ms)));
	const int qp0 = RdmaResCount("qp");
	ASSERT_GE(qp0, 0);
	zcrpc_worker_stats base = srv.Stats();

	int p[2];
	ASSERT_EQ(pipe2(p, O_CLOEXEC), 0);
	std::string port = std::to_string(srv.port()), key = KeyHex(kKey, sizeof(kKey));
	pid_t pid = fork();
	ASSERT_GE(pid, 0);
	if (pid == 0) {
		dup2(p[1], STDOUT_FILENO);
		execl(ZCRPC_TEST_AUTH_VICTIM, ZCRPC_TEST_AUTH_VICTIM, env_.addr0.c_str(), port.c_str(),
		      key.c_str(), static_cast<char *>(nullptr));
		_exit(127);
	}
	close(p[1]);
	fcntl(p[0], F_SETFL, fcntl(p[0], F_GETFL) | O_NONBLOCK);
	std::string out;
	auto end = steady_clock::now() + Scaled(10000);
	while (out.find("authenticating") == std::string::npos && steady_clock::now() < end) {
		char buf[64];
		ssize_t n = read(p[0], buf, sizeof(buf));
		if (n > 0)
			out.append(buf, static_cast<size_t>(n));
		std::this_thread::sleep_for(2ms);
	}
	close(p[0]);
	bool ready = out.find("authenticating") != std::string::npos;
	if (ready)
		ready = srv.WaitStats([](const zcrpc_worker_stats &s) { return s.handshakes == 1; },
				      Scaled(5000));
	kill(pid, SIGKILL);
	int wst;
	waitpid(pid, &wst, 0);
	ASSERT_TRUE(ready) << "the victim never reached its proof: " << out;
	auto t0 = steady_clock::now();
	ASSERT_TRUE(srv.WaitStats(
		[&](const zcrpc_worker_stats &s) {
			return s.handshakes == 0 && s.conns == base.conns &&
			       s.pool_in_use == base.pool_in_use;
		},
		milliseconds(deadline_ms) + Scaled(3000)))
		<< "the server still holds the dead client's connection";
	EXPECT_LE(steady_clock::now() - t0, milliseconds(deadline_ms) + Scaled(3000));
	EXPECT_EQ(srv.connects.load(), 0);
	EXPECT_EQ(srv.handler_runs.load(), 0);
	// Every QP is gone: the victim's (its process died) and the server's.
	auto qend = steady_clock::now() + Scaled(5000);
	while (RdmaResCount("qp") != qp0 && steady_clock::now() < qend)
		std::this_thread::sleep_for(20ms);
	EXPECT_EQ(RdmaResCount("qp"), qp0);
}
#endif

namespace {

// T26: @n connects that never authenticate, against a server admitting at
// most @cap handshakes with a @deadline_ms handshake deadline, while a
// legitimate client keeps trying to call.
void Flood(const RxeEnv &env, zcrpc_worker *w, int n, uint32_t cap, int deadline_ms,
	   int legit_bound_ms)
{
	AuthServer srv;
	zcrpc_server_opts o = ServerOpts(kKey, cap, deadline_ms);
	// Every connect comes from one address: the handshake cap is under
	// test, not the per-source limit (tests/rdma/test_limits.cc).
	o.max_conns_per_source = 0;
	ASSERT_TRUE(srv.Start(env.addr0, o));
	zcrpc_worker_stats base = srv.Stats();

	std::vector<std::unique_ptr<Conn>> flood;
	for (int i = 0; i < n; i++) {
		flood.emplace_back(new Conn);
		ASSERT_EQ(flood.back()->Start(w, env.addr0, srv.port(), kKey, ZCRPC_AUTH_TEST_SILENT,
					      nullptr, 2),
			  ZCRPC_OK);
	}
	// Meanwhile a legitimate client calls until it gets through.
	auto t0 = steady_clock::now();
	Channel legit(w, env.addr0, srv.port(), kKey, 50);
	Result ok;
	int attempts = 0;
	auto legit_end = t0 + milliseconds(deadline_ms) + Scaled(legit_bound_ms);
	while (ok.status != ZCRPC_OK && steady_clock::now() < legit_end) {
		ok = legit.Call("legit", legit_bound_ms);
		attempts++;
		if (ok.status != ZCRPC_OK)
			ProgressUntil(w, [] { return false; }, 20ms);
	}
	auto legit_took = duration_cast<milliseconds>(steady_clock::now() - t0);
	EXPECT_EQ(ok.status, ZCRPC_OK) << ok.message << " after " << attempts << " attempts";
	EXPECT_LE(legit_took, milliseconds(deadline_ms) + Scaled(legit_bound_ms));

	// Every flood connection ends: refused (cap) or closed at the deadline.
	auto all_closed = [&] {
		for (auto &c : flood)
			if (!c->closed)
				return false;
		return true;
	};
	ASSERT_TRUE(ProgressUntil(w, all_closed, milliseconds(deadline_ms) + Scaled(60000)))
		<< "flood connections still open";
	int busy = 0, reaped = 0, other = 0;
	for (auto &c : flood) {
		EXPECT_EQ(c->established, 0);
		if (c->status == ZCRPC_RESOURCE_EXHAUSTED)
			busy++;
		else if (c->status == ZCRPC_UNAVAILABLE)
			reaped++;
		else
			other++;
	}
	EXPECT_EQ(other, 0);
	EXPECT_GT(busy, 0) << "the cap of " << cap << " never refused anything";
	EXPECT_EQ(busy + reaped, n);
	EXPECT_LE(srv.max_handshakes_seen.load(), cap);
	ASSERT_TRUE(srv.WaitStats(
		[&](const zcrpc_worker_stats &s) {
			return s.handshakes == 0 && s.conns == base.conns + 1; // legit
		},
		Scaled(5000)));
	zcrpc_worker_stats after = srv.Stats();
	// The legitimate client's refused attempts count too.
	EXPECT_GE(after.rejected_busy - base.rejected_busy, static_cast<uint64_t>(busy));
	EXPECT_LE(after.rejected_busy - base.rejected_busy, static_cast<uint64_t>(busy + attempts));
	// The deadline reaped every admitted flood connection.
	EXPECT_EQ(after.handshake_timeouts - base.handshake_timeouts, static_cast<uint64_t>(reaped));
	EXPECT_EQ(srv.connects.load(), 1);
	EXPECT_EQ(srv.handler_runs.load(), 1);
}

} // namespace

TEST_F(Admission, HundredConnectsThatNeverAuthenticateAreCappedAndReaped)
{
	Flood(env_, w_, 100, 32, 1500, 15000);
}

class AdmissionLong : public Admission {};

// Label `long` (not in CI): the full-size T26.
TEST_F(AdmissionLong, ThousandConnectsThatNeverAuthenticateAreCappedAndReaped)
{
	// 1000 setup threads resolve routes first: a wider bound for the
	// legitimate client.
	Flood(env_, w_, 1000, 128, 3000, 120000);
}

// T4 over the wire: private data that is not a hello is rejected with a
// reason (INVALID_ARGUMENT) before anything is allocated, not counted as an
// authentication failure, and the keyed server keeps serving.
TEST_F(Admission, MalformedPrivateDataIsRejectedAndTheServerKeepsServing)
{
	AuthServer srv;
	ASSERT_TRUE(srv.Start(env_.addr0, ServerOpts(kKey)));
	std::string port = std::to_string(srv.port());

	zcrpc_hello h{};
	h.version = ZCRPC_PROTO_VERSION;
	h.kind = ZCRPC_HELLO_CONNECT;
	h.features = ZCRPC_FEAT_ALL | ZCRPC_FEAT_AUTH;
	h.recv_depth = 2;
	h.max_msg = 64;
	std::vector<uint8_t> good(ZCRPC_HELLO_LEN);
	ASSERT_EQ(zcrpc__hello_encode(&h, good.data(), good.size()), size_t{ZCRPC_HELLO_LEN});

	struct Case {
		const char *name;
		std::vector<uint8_t> pd;
	};
	std::vector<Case> cases;
	cases.push_back({"bad magic", good});
	cases.back().pd[0] ^= 0xff;
	cases.push_back({"declared length beyond the data", good});
	cases.back().pd[6] = 120; // the CM delivers at most 56 bytes
	cases.push_back({"declared length below the header", good});
	cases.back().pd[6] = 16;
	cases.push_back({"all zeros", std::vector<uint8_t>(ZCRPC_HELLO_MAX_CONNECT, 0)});
	cases.push_back({"no private data", {}});
	cases.push_back({"unknown kind", good});
	cases.back().pd[5] = 7;

	for (const Case &c : cases) {
		rdma_addrinfo hints{}, *res = nullptr;
		hints.ai_port_space = RDMA_PS_TCP;
		hints.ai_qp_type = IBV_QPT_RC;
		ASSERT_EQ(rdma_getaddrinfo(env_.addr0.c_str(), port.c_str(), &hints, &res), 0);
		rdma_cm_id *id = nullptr;
		ibv_qp_init_attr qa{};
		qa.cap.max_send_wr = qa.cap.max_recv_wr = 1;
		qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
		ASSERT_EQ(rdma_create_ep(&id, res, nullptr, &qa), 0);
		rdma_freeaddrinfo(res);
		rdma_conn_param p{};
		p.private_data = c.pd.empty() ? nullptr : c.pd.data();
		p.private_data_len = static_cast<uint8_t>(c.pd.size());
		p.retry_count = 6;
		EXPECT_NE(rdma_connect(id, &p), 0) << c.name;
		ASSERT_NE(id->event, nullptr) << c.name;
		EXPECT_EQ(id->event->event, RDMA_CM_EVENT_REJECTED) << c.name;
		zcrpc_hello rej{};
		ASSERT_EQ(zcrpc__hello_decode(id->event->param.conn.private_data,
					      id->event->param.conn.private_data_len, &rej, nullptr, 0),
			  ZCRPC_OK)
			<< c.name;
		EXPECT_EQ(rej.kind, ZCRPC_HELLO_REJECT) << c.name;
		EXPECT_EQ(rej.status, static_cast<uint32_t>(ZCRPC_INVALID_ARGUMENT)) << c.name;
		rdma_destroy_ep(id);
	}
	zcrpc_worker_stats st = srv.Stats();
	EXPECT_EQ(st.rejected_auth, 0u);
	EXPECT_EQ(st.handshakes, 0u);
	EXPECT_EQ(st.conns, 0u);
	EXPECT_EQ(srv.connects.load(), 0);

	Channel ch(w_, env_.addr0, srv.port(), kKey);
	Result r = ch.Call("still serving");
	EXPECT_EQ(r.status, ZCRPC_OK) << r.message;
}
