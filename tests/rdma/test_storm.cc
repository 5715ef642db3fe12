// Accept storms over rxe (issue 13, "Tests": hundreds of connects while a
// saturating load runs). A load of 8 channels with 32 verified calls in
// flight each runs on established connections while storm threads connect
// hundreds of channels, each with a deadline and one verified call; the
// server's connection limits reject some of them on purpose. The load must
// keep completing calls during every batch of connects (progress, not a
// latency bound; in every 100 ms of the storm only with ZCRPC_STORM_STRICT=1,
// not yet true on rxe: docs/testing.md), lose none and complete none twice;
// every storm connection
// ends accepted (its call verified) or rejected with a status and a message
// naming the limit, and the server's rejected_* counters equal the
// rejections the clients saw; no connection fails with RNR_RETRY_EXC_ERR.
// The second case floods the server with connects that never send RTU
// (half-open, issue 13 item 5: 600 such connects once held 131 half-open
// connections until the handshake timeout): they are capped by
// max_handshakes and reaped at handshake_timeout_ms while established
// clients keep being served and a new one gets through.
//
// N (storm connects) = 300 in the plain build, 120 under AddressSanitizer;
// ZCRPC_STORM_CONNS overrides it by hand (as ZCRPC_SCALE_CONNS in
// test_scale.cc), ZCRPC_STORM_BATCH the connects in flight per storm thread
// (16).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <rdma/rdma_cma.h>

#include "call_load.h"
#include "rdma_env.h"
#include "server_thread.h"
#include "transport/hello.h"
#include "zcrpc/rpc.h"

using namespace std::chrono;
using namespace std::chrono_literals;

namespace
{

#if defined(__SANITIZE_ADDRESS__)
constexpr int kDefaultConns = 120;
#else
constexpr int kDefaultConns = 300;
#endif

int StormConns()
{
	const char *e = std::getenv("ZCRPC_STORM_CONNS");
	int n = e ? std::atoi(e) : 0;
	return n >= 20 ? n : kDefaultConns;
}

// ZCRPC_STORM_STRICT=1: the load must complete calls in every 100 ms of
// a storm (not yet true on rxe: docs/testing.md).
bool Strict()
{
	const char *e = std::getenv("ZCRPC_STORM_STRICT");
	return e && std::atoi(e) == 1;
}

// Samples a completion counter every 100 ms while a storm is on; each
// window that lay wholly inside the storm must have seen completions.
class ProgressMonitor
{
      public:
	explicit ProgressMonitor(const std::atomic<uint64_t> &count)
	    : count_(count)
	{
		thread_ = std::thread([this] {
			while (!stop_.load()) {
				std::this_thread::sleep_for(100ms);
				std::lock_guard<std::mutex> g(mu_);
				samples_.push_back({steady_clock::now(),
						    count_.load(),
						    storm_.load()});
			}
		});
	}
	~ProgressMonitor()
	{
		Stop();
	}
	void Storm(bool on)
	{
		storm_ = on;
	}
	void Stop()
	{
		stop_ = true;
		if (thread_.joinable())
			thread_.join();
	}
	// Windows wholly inside the storm, and those of them without a
	// completion; the smallest and largest count of a window (printed).
	struct Result {
		int windows = 0, stalled = 0;
		uint64_t min = UINT64_MAX, max = 0;
		double longest_ms = 0;
		double stall_ms = 0; // the longest run of windows without one
	};
	Result Check()
	{
		std::lock_guard<std::mutex> g(mu_);
		Result r;
		size_t run_from = 0;
		bool in_run = false;
		for (size_t i = 1; i < samples_.size(); i++) {
			if (!samples_[i - 1].storm || !samples_[i].storm)
				continue;
			uint64_t d = samples_[i].count - samples_[i - 1].count;
			if (d == 0 && !in_run)
				run_from = i - 1;
			in_run = d == 0;
			if (in_run)
				r.stall_ms =
					std::max(r.stall_ms,
						 duration<double, std::milli>(
							 samples_[i].t -
							 samples_[run_from].t)
							 .count());
			r.windows++;
			r.stalled += d == 0;
			r.min = std::min(r.min, d);
			r.max = std::max(r.max, d);
			r.longest_ms = std::max(
				r.longest_ms,
				duration<double, std::milli>(samples_[i].t -
							     samples_[i - 1].t)
					.count());
		}
		return r;
	}

      private:
	struct Sample {
		steady_clock::time_point t;
		uint64_t count;
		bool storm;
	};
	const std::atomic<uint64_t> &count_;
	std::atomic<bool> stop_{false}, storm_{false};
	std::mutex mu_;
	std::vector<Sample> samples_;
	std::thread thread_;
};

// What one storm connection ended as.
struct Outcome {
	int calls = 0;
	zcrpc_status status = ZCRPC_UNKNOWN;
	std::string message;
	bool data_ok = false;
	std::string want;
};

void StormDone(zcrpc_channel *, const zcrpc_reply *r, void *a)
{
	auto *o = static_cast<Outcome *>(a);
	o->calls++;
	o->status = r->status;
	o->message = r->message ? r->message : "";
	o->data_ok = r->status == ZCRPC_OK &&
		     std::string(static_cast<const char *>(r->data), r->len) ==
			     o->want;
}

// One storm thread: @n channels from @src, @batch connecting at once, each
// with a connect deadline and one verified call with a deadline; accepted
// channels stay open until Close(), rejected ones are destroyed at once.
class StormClients
{
      public:
	std::vector<Outcome> out;
	std::atomic<int> finished{0};
	// Batches after which the load's completion count had not moved
	// since the previous batch ended (set with Watch()).
	std::atomic<int> batches_stalled{0}, batches{0};
	void Watch(const std::atomic<uint64_t> *count)
	{
		watch_ = count;
	}

	StormClients(const std::string &host, uint16_t port,
		     const std::string &src, int n, int batch, int id)
	    : out(n), host_(host), port_(std::to_string(port)), src_(src),
	      n_(n), batch_(batch), id_(id)
	{
	}
	void Start()
	{
		thread_ = std::thread([this] { Run(); });
	}
	void Join()
	{
		if (thread_.joinable())
			thread_.join();
	}
	// Destroys the accepted channels (on a thread of their worker).
	void Close()
	{
		Join();
		for (auto *ch : kept_)
			zcrpc_channel_destroy(ch);
		kept_.clear();
		auto until = steady_clock::now() + 200ms;
		while (steady_clock::now() < until)
			zcrpc_worker_progress(w_, 1);
	}
	zcrpc_worker_stats stats{};
	~StormClients()
	{
		Join();
		for (auto *ch : kept_)
			zcrpc_channel_destroy(ch);
		zcrpc_worker_destroy(w_);
	}

      private:
	void Run()
	{
		if (zcrpc_worker_create(nullptr, &w_) != ZCRPC_OK)
			return;
		zcrpc_channel_opts co;
		zcrpc_channel_opts_init(&co);
		co.window = 16;
		co.max_calls = 64;
		co.connect_timeout_ms = static_cast<int>(Scaled(20000).count());
		co.src_addr = src_.c_str();
		for (int b = 0; b < n_; b += batch_) {
			int e = std::min(n_, b + batch_);
			std::vector<zcrpc_channel *> chs(e - b, nullptr);
			for (int i = b; i < e; i++) {
				Outcome &o = out[i];
				o.want = "storm " + std::to_string(id_) + "/" +
					 std::to_string(i) +
					 std::string(i % 97, 's');
				zcrpc_call_opts cal;
				zcrpc_call_opts_init(&cal);
				cal.timeout_us = Scaled(30000).count() * 1000;
				if (zcrpc_channel_create(
					    w_, host_.c_str(), port_.c_str(),
					    &co, &chs[i - b]) != ZCRPC_OK ||
				    zcrpc_call_async(
					    chs[i - b],
					    zcrpc_method_id(kServerThreadEcho),
					    o.want.data(), o.want.size(), &cal,
					    StormDone, &o,
					    nullptr) != ZCRPC_OK) {
					o.calls = 1;
					o.message = "could not start the call";
				}
			}
			// Every call has its deadline: this ends.
			auto end = steady_clock::now() + Scaled(60000);
			auto all = [&] {
				for (int i = b; i < e; i++)
					if (!out[i].calls)
						return false;
				return true;
			};
			while (!all() && steady_clock::now() < end)
				zcrpc_worker_progress(w_, 1);
			for (int i = b; i < e; i++) {
				if (out[i].calls && out[i].status == ZCRPC_OK)
					kept_.push_back(chs[i - b]);
				else
					zcrpc_channel_destroy(chs[i - b]);
				finished++;
			}
			if (watch_) {
				uint64_t now = watch_->load();
				batches++;
				batches_stalled += b > 0 && now == last_;
				last_ = now;
			}
		}
		zcrpc_worker_get_stats(w_, &stats, sizeof(stats));
	}
	std::string host_, port_, src_;
	int n_, batch_, id_;
	const std::atomic<uint64_t> *watch_ = nullptr;
	uint64_t last_ = 0;
	zcrpc_worker *w_ = nullptr;
	std::vector<zcrpc_channel *> kept_;
	std::thread thread_;
};

// The limit a rejection's message names, or "" for none.
std::string LimitNamed(const std::string &m)
{
	if (m.find("server rejected the connection: RESOURCE_EXHAUSTED: ") ==
	    std::string::npos)
		return "";
	if (m.find("per-source connection limit of ") != std::string::npos)
		return "source";
	if (m.find("connection limit of ") != std::string::npos)
		return "total";
	if (m.find("(max_handshakes)") != std::string::npos)
		return "handshakes";
	return "";
}

class Storm : public RdmaTest
{
      protected:
	void SetUp() override
	{
		RdmaTest::SetUp();
		ASSERT_FALSE(env_.addr1.empty()) << "ZCRPC_RXE_ADDR1 unset";
	}
};

} // namespace

// Hundreds of connects from two storm threads (one per source address, 16
// connecting at once on each) while 8 channels keep 32 calls in flight
// each. max_connections leaves room for half the storm and a per-source
// limit of 100 may cut the first source earlier: the rest are rejected.
TEST_F(Storm,
       HundredsOfConnectsWhileASaturatingLoadRunsAllEndAndTheLoadKeepsCompleting)
{
	const int n = StormConns();
	const int kLoad = 8;
	const uint32_t accept_room = static_cast<uint32_t>(n / 2);
	ServerThread srv;
	zcrpc_server_opts so;
	zcrpc_server_opts_init(&so);
	so.window = 64;
	so.max_connections = kLoad + accept_room;
	so.max_conns_per_source = 100;
	so.idle_timeout_ms = 0;
	ASSERT_TRUE(srv.Start(env_.addr0, so));
	const zcrpc_worker_stats base = srv.WorkerStats();
	const int64_t rnr0 = RxeCounter(env_, "rcvd_rnr_err") +
			     RxeCounter(env_, "send_rnr_err");

	CallLoadOpts lo;
	lo.channels = kLoad;
	lo.depth = 32;
	lo.src = env_.addr0;
	lo.timeout_us = Scaled(30000).count() * 1000;
	CallLoad load(env_.addr0, srv.port(), lo);
	ASSERT_TRUE(load.Start(Scaled(20000))) << load.FirstError();
	// The load is running before the storm starts.
	const uint64_t before = load.completed.load();
	auto warm_end = steady_clock::now() + Scaled(10000);
	while (load.completed.load() < before + 1000 &&
	       steady_clock::now() < warm_end)
		std::this_thread::sleep_for(5ms);
	ASSERT_GE(load.completed.load(), before + 1000) << load.FirstError();

	ProgressMonitor mon(load.completed);
	const char *be = std::getenv("ZCRPC_STORM_BATCH");
	const int batch = be && std::atoi(be) > 0 ? std::atoi(be) : 16;
	StormClients a(env_.addr0, srv.port(), env_.addr0, n / 2, batch, 0);
	StormClients b(env_.addr0, srv.port(), env_.addr1, n - n / 2, batch, 1);
	a.Watch(&load.completed);
	b.Watch(&load.completed);
	const uint64_t at_start = load.completed.load();
	srv.max_turn_ns = 0;
	load.max_turn_ns = 0;
	auto t0 = steady_clock::now();
	mon.Storm(true);
	a.Start();
	b.Start();
	a.Join();
	b.Join();
	mon.Storm(false);
	const double storm_s =
		duration<double>(steady_clock::now() - t0).count();
	const uint64_t during = load.completed.load() - at_start;
	const double srv_turn_ms = srv.max_turn_ns.load() / 1e6,
		     load_turn_ms = load.max_turn_ns.load() / 1e6;
	load.Stop(Scaled(40000));
	mon.Stop();

	// Every storm connection ended accepted (verified) or rejected naming
	// a limit.
	int accepted = 0, by_total = 0, by_source = 0, by_handshakes = 0,
	    other = 0;
	std::string first_other;
	for (StormClients *s : {&a, &b})
		for (const Outcome &o : s->out) {
			if (o.calls != 1) {
				other++;
				if (first_other.empty())
					first_other =
						"a storm call completed " +
						std::to_string(o.calls) +
						" times";
				continue;
			}
			if (o.status == ZCRPC_OK && o.data_ok) {
				accepted++;
				continue;
			}
			std::string lim = o.status == ZCRPC_UNAVAILABLE
						  ? LimitNamed(o.message)
						  : "";
			by_total += lim == "total";
			by_source += lim == "source";
			by_handshakes += lim == "handshakes";
			if (lim.empty()) {
				other++;
				if (first_other.empty())
					first_other =
						std::string(zcrpc_status_str(
							o.status)) +
						": " + o.message;
			}
			EXPECT_EQ(o.message.find("RNR"), std::string::npos)
				<< o.message;
		}
	const int rejected = by_total + by_source + by_handshakes;
	ProgressMonitor::Result pr = mon.Check();
	std::printf("[storm] %d connects in %.1f s: %d accepted, %d rejected "
		    "(connection limit %d, "
		    "per-source %d, max_handshakes %d), %d other; the load "
		    "completed %llu calls "
		    "during the storm; %d windows of 100 ms, %d without a "
		    "completion, per window "
		    "min %llu max %llu, longest window %.0f ms\n",
		    n, storm_s, accepted, rejected, by_total, by_source,
		    by_handshakes, other,
		    static_cast<unsigned long long>(during), pr.windows,
		    pr.stalled,
		    static_cast<unsigned long long>(
			    pr.min == UINT64_MAX ? 0 : pr.min),
		    static_cast<unsigned long long>(pr.max), pr.longest_ms);
	std::printf(
		"[storm] batch %d: longest run without a completion %.0f ms\n",
		batch, pr.stall_ms);
	std::printf("[storm] longest progress turn during the storm: server "
		    "%.1f ms, load client "
		    "%.1f ms (printed, not asserted)\n",
		    srv_turn_ms, load_turn_ms);
	EXPECT_EQ(other, 0) << first_other;
	EXPECT_EQ(accepted + rejected, n);
	EXPECT_GT(rejected, 0) << "the limits never rejected a connect";
	EXPECT_LE(static_cast<uint32_t>(accepted), accept_room);
	EXPECT_GT(accepted, 0);

	// The load kept completing calls while the storm's connects went on:
	// between the ends of any two batches of connects of either thread.
	// The 100 ms windows are asserted only with ZCRPC_STORM_STRICT=1:
	// setup calls into the kernel (QP creation, migration, reject,
	// destroy) block the server's worker for up to 1.5 s each during a
	// storm on rxe, which bounding the set-ups per turn does not bound
	// (docs/testing.md).
	EXPECT_GT(during, 0u);
	EXPECT_EQ(a.batches_stalled.load() + b.batches_stalled.load(), 0)
		<< "the load completed no call during a batch of connects ("
		<< a.batches_stalled.load() + b.batches_stalled.load() << " of "
		<< a.batches.load() + b.batches.load() << " batches)";
	EXPECT_GT(pr.windows, 0);
	if (Strict())
		EXPECT_EQ(pr.stalled, 0) << pr.stalled << " of " << pr.windows
					 << " windows of 100 ms during the "
					    "storm saw no call complete";
	// Nothing of the load was lost, failed or completed twice.
	EXPECT_EQ(load.completed.load(), load.submitted.load())
		<< "calls of the load never ended";
	EXPECT_EQ(load.ok.load(), load.submitted.load()) << load.FirstError();
	EXPECT_EQ(load.failed.load() + load.bad_data.load() + load.twice.load(),
		  0u)
		<< load.FirstError();

	// The server counted what the clients saw, reason by reason.
	zcrpc_worker_stats st = srv.WorkerStats();
	EXPECT_EQ(st.rejected_conn_limit - base.rejected_conn_limit,
		  static_cast<uint64_t>(by_total));
	EXPECT_EQ(st.rejected_source_limit - base.rejected_source_limit,
		  static_cast<uint64_t>(by_source));
	EXPECT_EQ(st.rejected_busy - base.rejected_busy,
		  static_cast<uint64_t>(by_handshakes));
	EXPECT_EQ(st.rejected_setup - base.rejected_setup, 0u);
	EXPECT_EQ(st.rejected_budget - base.rejected_budget, 0u);
	EXPECT_EQ(st.rejected_hello - base.rejected_hello, 0u);
	EXPECT_EQ(st.conns, static_cast<uint32_t>(kLoad + accepted));
	EXPECT_EQ(st.handshakes, 0u);
	// No RNR anywhere: the status is what counts; rxe's counters are
	// printed.
	zcrpc_worker_stats ls = load.WorkerStats();
	EXPECT_EQ(st.rnr_events + ls.rnr_events + a.stats.rnr_events +
			  b.stats.rnr_events,
		  0u);
	std::printf("[storm] rxe RNR counters %lld -> %lld (printed, not "
		    "asserted)\n",
		    static_cast<long long>(rnr0),
		    static_cast<long long>(RxeCounter(env_, "rcvd_rnr_err") +
					   RxeCounter(env_, "send_rnr_err")));

	// Everything closes back to the server's baseline.
	a.Close();
	b.Close();
	load.Close();
	EXPECT_TRUE(srv.WaitStats(
		[&](const zcrpc_worker_stats &s) { return s.conns == 0; },
		Scaled(30000)));
	zcrpc_worker_stats after = srv.WorkerStats();
	EXPECT_EQ(after.recv_posted, 0u);
	EXPECT_EQ(after.recv_promised, 0u);
	EXPECT_EQ(after.pool_bad_frees, 0u);
}

namespace
{

std::string Describe(const zcrpc_worker_stats &s)
{
	char b[256];
	std::snprintf(b, sizeof(b),
		      "conns %u handshakes %u handshake_timeouts %llu rejected "
		      "busy %llu hello %llu "
		      "setup %llu",
		      s.conns, s.handshakes,
		      static_cast<unsigned long long>(s.handshake_timeouts),
		      static_cast<unsigned long long>(s.rejected_busy),
		      static_cast<unsigned long long>(s.rejected_hello),
		      static_cast<unsigned long long>(s.rejected_setup));
	return b;
}

// Connect requests that never send RTU: each id is resolved synchronously
// (rdma_create_ep), moved to an event channel nobody reads and connected
// there, so the server's REP is never answered (librdmacm would send the
// RTU only when its CONNECT_RESPONSE event was read).
class HalfOpen
{
      public:
	~HalfOpen()
	{
		Release();
	}
	// One more half-open connect to @host:@port; false when it could not
	// even be sent (@why says why).
	bool Connect(const std::string &host, const std::string &port,
		     std::string *why)
	{
		if (!sink_ && !(sink_ = rdma_create_event_channel())) {
			*why = "rdma_create_event_channel failed";
			return false;
		}
		rdma_addrinfo hints{}, *res = nullptr;
		hints.ai_port_space = RDMA_PS_TCP;
		hints.ai_qp_type = IBV_QPT_RC;
		if (rdma_getaddrinfo(host.c_str(), port.c_str(), &hints,
				     &res)) {
			*why = "rdma_getaddrinfo failed";
			return false;
		}
		rdma_cm_id *id = nullptr;
		ibv_qp_init_attr qa{};
		qa.cap.max_send_wr = qa.cap.max_recv_wr = 1;
		qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
		int rc = rdma_create_ep(&id, res, nullptr, &qa);
		rdma_freeaddrinfo(res);
		if (rc) {
			*why = std::string("rdma_create_ep: ") +
			       std::strerror(errno);
			return false;
		}
		ids_.push_back(id);
		if (rdma_migrate_id(id, sink_)) {
			*why = std::string("rdma_migrate_id: ") +
			       std::strerror(errno);
			return false;
		}
		zcrpc_hello h{};
		h.version = ZCRPC_PROTO_VERSION;
		h.kind = ZCRPC_HELLO_CONNECT;
		h.features = ZCRPC_FEAT_ALL;
		h.recv_depth = 2;
		h.max_msg = 64;
		h.max_write = 1u << 20;
		uint8_t pd[ZCRPC_HELLO_MAX];
		size_t n = zcrpc__hello_encode(&h, pd, sizeof(pd));
		rdma_conn_param p{};
		p.private_data = pd;
		p.private_data_len = static_cast<uint8_t>(n);
		p.retry_count = 6;
		p.responder_resources = p.initiator_depth = 1;
		if (rdma_connect(id, &p)) {
			*why = std::string("rdma_connect: ") +
			       std::strerror(errno);
			return false;
		}
		return true;
	}
	void Release()
	{
		for (auto *id : ids_)
			rdma_destroy_ep(id);
		ids_.clear();
		if (sink_)
			rdma_destroy_event_channel(sink_);
		sink_ = nullptr;
	}

      private:
	rdma_event_channel *sink_ = nullptr;
	std::vector<rdma_cm_id *> ids_;
};

// A new channel's verified call, once: OK, or the status and message.
Outcome OneCall(zcrpc_worker *w, const std::string &host, uint16_t port,
		const std::string &src, const std::string &text)
{
	Outcome o;
	o.want = text;
	zcrpc_channel_opts co;
	zcrpc_channel_opts_init(&co);
	co.window = 16;
	co.max_calls = 64;
	co.src_addr = src.c_str();
	co.connect_timeout_ms = static_cast<int>(Scaled(10000).count());
	zcrpc_channel *ch = nullptr;
	zcrpc_call_opts cal;
	zcrpc_call_opts_init(&cal);
	cal.timeout_us = Scaled(15000).count() * 1000;
	if (zcrpc_channel_create(w, host.c_str(), std::to_string(port).c_str(),
				 &co, &ch) != ZCRPC_OK ||
	    zcrpc_call_async(ch, zcrpc_method_id(kServerThreadEcho),
			     text.data(), text.size(), &cal, StormDone, &o,
			     nullptr) != ZCRPC_OK) {
		o.calls = 1;
		o.message = "could not start the call";
	}
	ProgressUntil(
		w, [&] { return o.calls > 0; }, Scaled(30000));
	zcrpc_channel_destroy(ch);
	return o;
}

} // namespace

// A flood of connects that never send RTU against max_handshakes 16 and a
// 2 s handshake timeout: at most 16 half-open at once, every one gone at
// the timeout (counted), the rest refused as busy; meanwhile two
// established channels keep 8 verified calls in flight each and complete
// calls in every 100 ms of the flood, and a new client gets through once
// the half-open ones are reaped.
TEST_F(Storm,
       HalfOpenConnectsAreCappedByMaxHandshakesAndGoAtTheHandshakeTimeout)
{
	const int n = StormConns() * 2 / 3;
	const uint32_t kCap = 16;
	const int timeout_ms = static_cast<int>(Scaled(2000).count());
	ServerThread srv;
	zcrpc_server_opts so;
	zcrpc_server_opts_init(&so);
	so.window = 64;
	so.max_handshakes = kCap;
	so.handshake_timeout_ms = timeout_ms;
	so.max_conns_per_source = 0; // the handshake cap is under test
	so.idle_timeout_ms = 0;
	ASSERT_TRUE(srv.Start(env_.addr0, so));

	CallLoadOpts lo;
	lo.channels = 2;
	lo.depth = 8;
	lo.src = env_.addr1;
	lo.timeout_us = Scaled(30000).count() * 1000;
	CallLoad load(env_.addr0, srv.port(), lo);
	ASSERT_TRUE(load.Start(Scaled(20000))) << load.FirstError();
	ASSERT_TRUE(srv.WaitStats(
		[](const zcrpc_worker_stats &s) { return s.conns == 2; },
		Scaled(10000)));
	const zcrpc_worker_stats base = srv.WorkerStats();
	srv.max_handshakes_seen = 0;
	srv.max_turn_ns = 0;

	ProgressMonitor mon(load.completed);
	HalfOpen flood;
	const std::string port = srv.port_str();
	mon.Storm(true);
	auto t0 = steady_clock::now();
	int sent = 0;
	const uint64_t before_flood = load.completed.load();
	std::string why;
	for (int i = 0; i < n; i++) {
		if (!flood.Connect(env_.addr0, port, &why))
			break;
		sent++;
	}
	const uint64_t during_flood = load.completed.load() - before_flood;
	const double flood_s =
		duration<double>(steady_clock::now() - t0).count();
	ASSERT_EQ(sent, n) << why;
	// Half-open ones are held: the flood filled the handshake cap.
	EXPECT_TRUE(srv.WaitStats(
		[&](const zcrpc_worker_stats &s) { return s.handshakes > 0; },
		Scaled(5000)))
		<< Describe(srv.WorkerStats()) << "; " << srv.Error();

	// A new client, while half-open connects may hold every handshake:
	// refused naming max_handshakes, or served; it gets through at the
	// latest once they are reaped.
	zcrpc_worker *w = nullptr;
	ASSERT_EQ(zcrpc_worker_create(nullptr, &w), ZCRPC_OK);
	int legit_busy = 0, attempts = 0;
	Outcome got;
	auto legit_end =
		steady_clock::now() + milliseconds(timeout_ms) + Scaled(20000);
	while (steady_clock::now() < legit_end) {
		got = OneCall(w, env_.addr0, srv.port(), env_.addr1,
			      "legit " + std::to_string(attempts));
		attempts++;
		if (got.status == ZCRPC_OK)
			break;
		if (LimitNamed(got.message) == "handshakes")
			legit_busy++;
		else
			ADD_FAILURE() << zcrpc_status_str(got.status) << ": "
				      << got.message;
		ProgressUntil(
			w, [] { return false; }, 50ms);
	}
	EXPECT_EQ(got.status, ZCRPC_OK)
		<< got.message << " after " << attempts << " attempts";
	EXPECT_TRUE(got.data_ok);

	// Every half-open connection goes at the handshake timeout; the server
	// counted each flood connect as reaped or refused.
	ASSERT_TRUE(srv.WaitStats(
		[&](const zcrpc_worker_stats &s) {
			return s.handshakes == 0 && s.conns == base.conns &&
			       (s.handshake_timeouts -
				base.handshake_timeouts) +
					       (s.rejected_busy -
						base.rejected_busy) >=
				       static_cast<uint64_t>(n + legit_busy);
		},
		milliseconds(timeout_ms) + Scaled(15000)))
		<< "half-open connections outlived the handshake timeout: "
		<< Describe(srv.WorkerStats()) << "; " << srv.Error();
	const uint64_t during_reap =
		load.completed.load() - before_flood - during_flood;
	mon.Storm(false);
	const double srv_turn_ms = srv.max_turn_ns.load() / 1e6;
	load.Stop(Scaled(40000));
	mon.Stop();
	zcrpc_worker_stats st = srv.WorkerStats();
	const uint64_t reaped = st.handshake_timeouts - base.handshake_timeouts,
		       busy = st.rejected_busy - base.rejected_busy;
	ProgressMonitor::Result pr = mon.Check();
	std::printf("[storm] %d half-open connects sent in %.1f s: %llu reaped "
		    "at the %d ms handshake timeout, %llu refused "
		    "(max_handshakes %u; at most %u at once); the new client "
		    "got through after %d attempts (%d refused); the load "
		    "completed %llu calls during the flood, %llu until the "
		    "half-open ones were gone; %d windows of "
		    "100 ms, %d without a completion (longest run %.0f ms); "
		    "the server's longest progress turn %.1f ms\n",
		    n, flood_s, static_cast<unsigned long long>(reaped),
		    timeout_ms, static_cast<unsigned long long>(busy), kCap,
		    srv.max_handshakes_seen.load(), attempts, legit_busy,
		    static_cast<unsigned long long>(during_flood),
		    static_cast<unsigned long long>(during_reap), pr.windows,
		    pr.stalled, pr.stall_ms, srv_turn_ms);
	EXPECT_LE(srv.max_handshakes_seen.load(), kCap);
	EXPECT_GT(reaped, 0u);
	EXPECT_GT(busy, 0u) << "the cap of " << kCap
			    << " never refused a half-open connect";
	EXPECT_EQ(reaped + busy, static_cast<uint64_t>(n + legit_busy));
	EXPECT_EQ(st.rejected_setup - base.rejected_setup, 0u);
	EXPECT_EQ(st.conns, base.conns)
		<< "a half-open connection was established";
	// The established clients were served throughout, nothing lost:
	// calls completed while the flood was sent and while half-open
	// connections were held (the 100 ms windows asserted with
	// ZCRPC_STORM_STRICT=1 only, as in the storm above).
	EXPECT_GT(during_flood, 0u) << "no call completed during the flood";
	EXPECT_GT(during_reap, 0u)
		<< "no call completed while half-open connections were held";
	if (Strict())
		EXPECT_EQ(pr.stalled, 0) << pr.stalled << " of " << pr.windows
					 << " windows stalled";
	EXPECT_EQ(load.completed.load(), load.submitted.load());
	EXPECT_EQ(load.ok.load(), load.submitted.load()) << load.FirstError();
	EXPECT_EQ(load.twice.load(), 0u);
	EXPECT_EQ(st.rnr_events + load.WorkerStats().rnr_events, 0u);
	// A client after the flood connects at its first attempt.
	Outcome after = OneCall(w, env_.addr0, srv.port(), env_.addr1,
				"after the flood");
	EXPECT_EQ(after.status, ZCRPC_OK) << after.message;
	EXPECT_TRUE(after.data_ok);
	flood.Release();
	load.Close();
	zcrpc_worker_destroy(w);
}
