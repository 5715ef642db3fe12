// Transport keepalive over rxe: idle connections are probed with 0-byte RDMA
// WRITEs and stay up; a peer whose QP silently went to the error state (a
// dead host, as the wire sees it) is found by a failing probe, not by a
// DISCONNECTED; keepalive_ms 0 sends nothing.
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstring>
#include <string>
#include <thread>

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "rdma_env.h"

using namespace std::chrono;
using namespace std::chrono_literals;

namespace {

// One worker with either a listener or a client connection. Its fields are
// touched only by the thread driving the worker (or after that stopped).
struct Side {
	zcrpc_worker *w = nullptr;
	zcrpc_listener *l = nullptr;
	zcrpc_conn *conn = nullptr;
	int accepted = 0, established = 0, closed = 0, recvd = 0;
	zcrpc_status close_status = ZCRPC_OK;
	std::string close_detail;
	steady_clock::time_point closed_at;
	bool echo = false;	       // send every message back
	bool destroy_on_close = false; // destroy the connection in on_state

	explicit Side(const zcrpc_worker_opts *o)
	{
		EXPECT_EQ(zcrpc_worker_create(o, &w), ZCRPC_OK);
	}
	~Side()
	{
		zcrpc_conn_destroy(conn);
		zcrpc_listener_destroy(l);
		zcrpc_worker_destroy(w);
	}
	zcrpc_conn_handlers Handlers()
	{
		zcrpc_conn_handlers h{};
		h.size = sizeof(h);
		h.on_state = [](zcrpc_conn *c, zcrpc_conn_state st, zcrpc_status s, void *a) {
			auto *sd = static_cast<Side *>(a);
			if (st == ZCRPC_CONN_ESTABLISHED)
				sd->established++;
			if (st != ZCRPC_CONN_CLOSED)
				return;
			sd->closed++;
			sd->close_status = s;
			sd->close_detail = zcrpc_conn_get_error(c);
			sd->closed_at = steady_clock::now();
			if (sd->destroy_on_close) {
				zcrpc_conn_destroy(c);
				sd->conn = nullptr;
			}
		};
		h.on_recv = [](zcrpc_conn *c, const void *d, size_t n, void *a) {
			auto *sd = static_cast<Side *>(a);
			sd->recvd++;
			if (sd->echo && zcrpc_conn_send(c, d, n) != ZCRPC_OK)
				zcrpc_conn_close(c);
		};
		h.arg = this;
		return h;
	}
	bool Listen(const std::string &addr)
	{
		zcrpc_listen_opts lo;
		zcrpc_listen_opts_init(&lo);
		lo.on_accept = [](zcrpc_listener *, zcrpc_conn *c, void *a) {
			auto *sd = static_cast<Side *>(a);
			sd->accepted++;
			sd->conn = c;
		};
		lo.arg = this;
		zcrpc_conn_handlers lh = Handlers();
		lo.conn_handlers = &lh;
		return zcrpc_listen(w, addr.c_str(), "0", &lo, &l) == ZCRPC_OK;
	}
	uint16_t Port() const { return zcrpc_listener_get_port(l); }
	bool Connect(const std::string &addr, uint16_t port)
	{
		auto h = Handlers();
		if (zcrpc_connect(w, addr.c_str(), std::to_string(port).c_str(), nullptr, &h,
				  &conn) != ZCRPC_OK)
			return false;
		ProgressUntil(w, [&] { return established || closed; }, Scaled(10000));
		return established == 1;
	}
	zcrpc_conn_stats ConnStats() const
	{
		zcrpc_conn_stats s{};
		zcrpc_conn_get_stats(conn, &s, sizeof(s));
		return s;
	}
	zcrpc_worker_stats WorkerStats() const
	{
		zcrpc_worker_stats s;
		zcrpc_worker_get_stats(w, &s, sizeof(s));
		return s;
	}
};

// Runs a Side's worker on its own thread (progress sleeping up to
// @sleep_ms) until Stop().
class Runner {
public:
	Runner(Side &s, int sleep_ms)
		: thread_([this, &s, sleep_ms] {
			  while (!stop_.load(std::memory_order_relaxed))
				  zcrpc_worker_progress(s.w, sleep_ms);
		  })
	{
	}
	~Runner() { Stop(); }
	void Stop()
	{
		stop_ = true;
		if (thread_.joinable())
			thread_.join();
	}

private:
	std::atomic<bool> stop_{false};
	std::thread thread_;
};

// A child process whose stdout the test reads; SIGKILLed when it goes out
// of scope (after the test's checks).
class Child {
public:
	~Child()
	{
		if (pid_ > 0) {
			kill(pid_, SIGKILL);
			waitpid(pid_, nullptr, 0);
		}
		if (fd_ >= 0)
			close(fd_);
	}
	bool Start(const char *path, const std::string &a1, const std::string &a2)
	{
		int p[2];
		if (pipe2(p, O_CLOEXEC))
			return false;
		pid_ = fork();
		if (pid_ < 0)
			return false;
		if (pid_ == 0) {
			dup2(p[1], STDOUT_FILENO);
			execl(path, path, a1.c_str(), a2.c_str(), static_cast<char *>(nullptr));
			_exit(127);
		}
		close(p[1]);
		fd_ = p[0];
		fcntl(fd_, F_SETFL, fcntl(fd_, F_GETFL) | O_NONBLOCK);
		return true;
	}
	// Reads what the child printed so far.
	const std::string &Output()
	{
		char buf[256];
		ssize_t n;
		while ((n = read(fd_, buf, sizeof(buf))) > 0)
			out_.append(buf, static_cast<size_t>(n));
		return out_;
	}
	bool Exited()
	{
		int st;
		if (pid_ > 0 && waitpid(pid_, &st, WNOHANG) == pid_) {
			pid_ = -1;
			return true;
		}
		return pid_ < 0;
	}

private:
	pid_t pid_ = -1;
	int fd_ = -1;
	std::string out_;
};

zcrpc_worker_opts KeepaliveOpts(uint32_t ms)
{
	zcrpc_worker_opts o;
	zcrpc_worker_opts_init(&o);
	o.keepalive_ms = ms;
	return o;
}

class Keepalive : public RdmaTest {};

} // namespace

TEST_F(Keepalive, IdleConnectionStaysUpAndProbes)
{
	const uint32_t ka = 100;
	zcrpc_worker_opts o = KeepaliveOpts(ka);
	Side srv(&o), cl(&o);
	srv.echo = true;
	ASSERT_TRUE(srv.Listen(env_.addr0));
	Runner runner(srv, 0); // the server busy-polls
	ASSERT_TRUE(cl.Connect(env_.addr0, srv.Port())) << zcrpc_conn_get_error(cl.conn);

	// Idle for a second; the client sleeps in progress, so only its
	// timer wakes it for the keepalive checks.
	int64_t pkts0 = RxeCounter(env_, "sent_pkts");
	auto t0 = steady_clock::now();
	int wakeups = 0;
	while (steady_clock::now() - t0 < 1s) {
		zcrpc_worker_progress(cl.w, 1000);
		wakeups++;
	}
	int64_t idle_ms = duration_cast<milliseconds>(steady_clock::now() - t0).count();
	zcrpc_conn_stats cs = cl.ConnStats();
	EXPECT_GT(cs.keepalives_sent, 0u);
	// At most one probe per keepalive_ms of idleness (checks every half).
	EXPECT_LE(cs.keepalives_sent, static_cast<uint64_t>(idle_ms / (ka / 2) + 2));
	EXPECT_GE(wakeups, 5) << "the keepalive timer did not wake the sleeping worker";
	EXPECT_EQ(cl.WorkerStats().keepalives_sent, cs.keepalives_sent);
	EXPECT_EQ(zcrpc_conn_get_state(cl.conn), ZCRPC_CONN_ESTABLISHED);
	EXPECT_EQ(cl.closed, 0) << cl.close_detail;

	// Traffic still flows.
	ASSERT_EQ(zcrpc_conn_send(cl.conn, "ping", 4), ZCRPC_OK);
	ASSERT_TRUE(ProgressUntil(cl.w, [&] { return cl.recvd > 0 || cl.closed > 0; },
				  Scaled(5000)));
	EXPECT_EQ(cl.recvd, 1);
	EXPECT_EQ(cl.closed, 0) << cl.close_detail;

	runner.Stop();
	ASSERT_EQ(srv.accepted, 1);
	ASSERT_NE(srv.conn, nullptr);
	zcrpc_conn_stats ss = srv.ConnStats();
	EXPECT_GT(ss.keepalives_sent, 0u);
	EXPECT_EQ(srv.WorkerStats().keepalives_sent, ss.keepalives_sent);
	EXPECT_EQ(zcrpc_conn_get_state(srv.conn), ZCRPC_CONN_ESTABLISHED);
	EXPECT_EQ(srv.closed, 0) << srv.close_detail;
	EXPECT_EQ(srv.recvd, 1);
	// Every probe went on the wire.
	EXPECT_GE(RxeCounter(env_, "sent_pkts") - pkts0,
		  static_cast<int64_t>(cs.keepalives_sent));
	std::printf("idle %lld ms: client sent %llu keepalives, server %llu\n",
		    static_cast<long long>(idle_ms),
		    static_cast<unsigned long long>(cs.keepalives_sent),
		    static_cast<unsigned long long>(ss.keepalives_sent));
}

#ifdef ZCRPC_TEST_VICTIM
TEST_F(Keepalive, PeerWhoseQpWentToErrorIsDetected)
{
	const uint32_t ka = 200;
	const int ack_timeout = 14, retry_count = 3; // the victim uses these too
	zcrpc_worker_opts o = KeepaliveOpts(ka);
	o.ack_timeout_exp = ack_timeout;
	o.retry_count = retry_count;
	Side srv(&o);
	srv.echo = true;
	srv.destroy_on_close = true;
	ASSERT_TRUE(srv.Listen(env_.addr0));
	int64_t retry0 = RxeCounter(env_, "retry_exceeded_err");
	ASSERT_GE(retry0, 0) << "rxe hw counter retry_exceeded_err unreadable";

	// The victim connects, exchanges one message and breaks its QP; this
	// thread runs the server meanwhile.
	Child victim;
	ASSERT_TRUE(victim.Start(ZCRPC_TEST_VICTIM, env_.addr0, std::to_string(srv.Port())));
	auto until = steady_clock::now() + Scaled(30000);
	while (victim.Output().find("broken") == std::string::npos && !victim.Exited() &&
	       steady_clock::now() < until)
		zcrpc_worker_progress(srv.w, 0);
	ASSERT_NE(victim.Output().find("broken"), std::string::npos)
		<< "the victim did not get to break its QP";
	auto t0 = steady_clock::now();
	ASSERT_EQ(srv.accepted, 1);
	ASSERT_EQ(srv.recvd, 1);
	ASSERT_EQ(srv.closed, 0) << srv.close_detail;

	// Probe after keepalive_ms of idleness (checked every half), then
	// (retry_count + 1) ACK timeouts of 4.096 us * 2^ack_timeout.
	double ack_ms = 4.096e-3 * (1 << ack_timeout);
	double expect_ms = 1.5 * ka + (retry_count + 1) * ack_ms;
	auto bound = Scaled(10000);
	ASSERT_GT(bound.count(), 10 * expect_ms);
	ASSERT_TRUE(ProgressUntil(srv.w, [&] { return srv.closed > 0; }, bound))
		<< "the dead peer went unnoticed";
	int64_t detect_ms = duration_cast<milliseconds>(srv.closed_at - t0).count();
	EXPECT_EQ(srv.close_status, ZCRPC_UNAVAILABLE);
	EXPECT_NE(srv.close_detail.find("keepalive"), std::string::npos) << srv.close_detail;
	EXPECT_NE(srv.close_detail.find("retry"), std::string::npos) << srv.close_detail;
	EXPECT_EQ(srv.close_detail.find("peer closed"), std::string::npos)
		<< "learned through DISCONNECTED, not the keepalive";
	// Not before the retries ran out.
	EXPECT_GE(detect_ms, static_cast<int64_t>((retry_count + 1) * ack_ms / 2));
	EXPECT_GT(RxeCounter(env_, "retry_exceeded_err"), retry0)
		<< "rxe saw no retry-exceeded: the fault never landed";
	EXPECT_GE(srv.WorkerStats().keepalives_sent, 1u);

	ASSERT_TRUE(ProgressUntil(srv.w, [&] { return srv.WorkerStats().conns == 0; },
				  Scaled(5000)));
	zcrpc_worker_stats s = srv.WorkerStats();
	EXPECT_EQ(s.pool_in_use, 0u) << "posted buffers not back in the pool";
	EXPECT_EQ(s.pool_bad_frees, 0u);
	EXPECT_FALSE(victim.Exited()) << "the victim died early (its kernel sends a DREQ)";
	std::printf("dead peer detected after %lld ms (expected about %.0f ms)\n",
		    static_cast<long long>(detect_ms), expect_ms);
	RecordProperty("detect_ms", static_cast<int>(detect_ms));
	// ~Child kills the victim only now.
}
#endif

TEST_F(Keepalive, KeepaliveOffMeansNoProbes)
{
	zcrpc_worker_opts o = KeepaliveOpts(0);
	Side srv(&o), cl(&o);
	srv.echo = true;
	ASSERT_TRUE(srv.Listen(env_.addr0));
	Runner runner(srv, 0);
	ASSERT_TRUE(cl.Connect(env_.addr0, srv.Port())) << zcrpc_conn_get_error(cl.conn);
	auto t0 = steady_clock::now();
	while (steady_clock::now() - t0 < 1s)
		zcrpc_worker_progress(cl.w, 100);
	EXPECT_EQ(cl.ConnStats().keepalives_sent, 0u);
	EXPECT_EQ(cl.WorkerStats().keepalives_sent, 0u);
	EXPECT_EQ(zcrpc_conn_get_state(cl.conn), ZCRPC_CONN_ESTABLISHED);
	ASSERT_EQ(zcrpc_conn_send(cl.conn, "ping", 4), ZCRPC_OK);
	ASSERT_TRUE(ProgressUntil(cl.w, [&] { return cl.recvd > 0 || cl.closed > 0; },
				  Scaled(5000)));
	EXPECT_EQ(cl.recvd, 1);
	runner.Stop();
	EXPECT_EQ(srv.ConnStats().keepalives_sent, 0u);
	EXPECT_EQ(srv.WorkerStats().keepalives_sent, 0u);
	EXPECT_EQ(srv.closed, 0) << srv.close_detail;
}
