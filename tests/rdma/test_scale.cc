// Scale over rxe (issue 13): many connections into one server, each making
// verified calls, with receive memory that does not grow with the windows
// (the shared receive queue, docs/design.md "Shared receive path"), no
// receiver-not-ready, and everything back to its baseline after the close.
// N = 1,024 in the plain build, 256 under AddressSanitizer (its shadow
// memory and slower connects would make 1,024 cost minutes).
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "rdma_env.h"
#include "zcrpc/rpc.h"

using namespace std::chrono;
using namespace std::chrono_literals;

namespace
{

#if defined(__SANITIZE_ADDRESS__)
constexpr int kDefaultConns = 256;
#else
constexpr int kDefaultConns = 1024;
#endif
constexpr int kBatch = 64; // connects in flight at once (max_handshakes 128)

// ZCRPC_SCALE_CONNS (a multiple of 64) overrides N for runs by hand.
int Conns()
{
	const char *e = std::getenv("ZCRPC_SCALE_CONNS");
	int n = e ? std::atoi(e) : 0;
	return n >= kBatch && n % kBatch == 0 ? n : kDefaultConns;
}

const char *kEcho = "/zcrpc.test.Scale/Echo";

void Echo(zcrpc_server_call *call, const zcrpc_request *req, void *)
{
	zcrpc_server_call_reply(call, ZCRPC_OK, nullptr, req->data, req->len, nullptr);
}

// Resident memory of this process (VmRSS), bytes.
uint64_t Rss()
{
	std::ifstream f("/proc/self/status");
	std::string line;
	while (std::getline(f, line))
		if (line.rfind("VmRSS:", 0) == 0)
			return std::stoull(line.substr(6)) * 1024;
	return 0;
}

zcrpc_worker_stats WStats(zcrpc_worker *w)
{
	zcrpc_worker_stats s;
	zcrpc_worker_get_stats(w, &s, sizeof(s));
	return s;
}

// The RPC server on its own worker and thread; stats read on that thread.
class Server
{
      public:
	zcrpc_worker *w = nullptr;
	zcrpc_server *s = nullptr;

	bool Start(const std::string &addr)
	{
		zcrpc_server_opts o;
		zcrpc_server_opts_init(&o);
		o.max_conns_per_source = 0; // every channel comes from one address
		if (zcrpc_worker_create(nullptr, &w) != ZCRPC_OK ||
		    zcrpc_server_create(w, &o, &s) != ZCRPC_OK ||
		    zcrpc_server_register(s, kEcho, Echo, nullptr) != ZCRPC_OK ||
		    zcrpc_server_listen(s, addr.c_str(), "0") != ZCRPC_OK)
			return false;
		thread_ = std::thread([this] {
			while (!stop_.load(std::memory_order_relaxed)) {
				zcrpc_worker_progress(w, 1);
				if (want_.exchange(false)) {
					stats_ = WStats(w);
					have_ = true;
				}
			}
		});
		return true;
	}
	zcrpc_worker_stats Stats()
	{
		have_ = false;
		want_ = true;
		while (!have_)
			std::this_thread::sleep_for(1ms);
		return stats_;
	}
	uint16_t port() const { return zcrpc_server_get_port(s); }
	~Server()
	{
		stop_ = true;
		if (thread_.joinable())
			thread_.join();
		zcrpc_server_destroy(s);
		zcrpc_worker_destroy(w);
	}

      private:
	std::thread thread_;
	std::atomic<bool> stop_{false}, want_{false}, have_{false};
	zcrpc_worker_stats stats_{};
};

struct Result {
	int calls = 0;
	zcrpc_status status = ZCRPC_UNKNOWN;
	std::string data, message;
};

void Collect(zcrpc_channel *, const zcrpc_reply *r, void *arg)
{
	auto *res = static_cast<Result *>(arg);
	res->calls++;
	res->status = r->status;
	res->data.assign(static_cast<const char *>(r->data), r->len);
	res->message = r->message ? r->message : "";
}

class Scale : public RdmaTest {};

} // namespace

// 1,024 channels (default options: a window of 1,040 calls each) into one
// server, a verified call on each; the server's receive memory follows the
// credits promised (16 per connection), not 1,040 receives per connection
// as before; at most 1 MiB resident per connection on each side (both
// sides live in this process: 2 MiB together); no RNR; and after the
// channels close, the connections, the shared receive queues and the pool
// slots are back at their baseline.
TEST_F(Scale, ThousandConnectionsIntoOneServerEachVerifiedWithinTheirMemory)
{
	Server server;
	ASSERT_TRUE(server.Start(env_.addr0));
	const std::string port = std::to_string(server.port());
	zcrpc_worker *w = nullptr;
	ASSERT_EQ(zcrpc_worker_create(nullptr, &w), ZCRPC_OK);
	const zcrpc_worker_stats sbase = server.Stats(), cbase = WStats(w);
	const uint64_t rss0 = Rss();
	const int64_t rnr0 = RxeCounter(env_, "rcvd_rnr_err") + RxeCounter(env_, "send_rnr_err");
	const uint32_t echo = zcrpc_method_id(kEcho);
	const int kConns = Conns();

	std::vector<zcrpc_channel *> chs(kConns, nullptr);
	std::vector<Result> res(kConns);
	const auto t0 = steady_clock::now();
	for (int b = 0; b < kConns; b += kBatch) {
		for (int i = b; i < b + kBatch; i++) {
			ASSERT_EQ(zcrpc_channel_create(w, env_.addr0.c_str(), port.c_str(), nullptr,
						       &chs[i]),
				  ZCRPC_OK);
			std::string p = "call " + std::to_string(i) + std::string(i % 61, 'x');
			ASSERT_EQ(zcrpc_call_async(chs[i], echo, p.data(), p.size(), nullptr, Collect,
						   &res[i], nullptr),
				  ZCRPC_OK);
		}
		ASSERT_TRUE(ProgressUntil(w, [&] {
			for (int i = b; i < b + kBatch; i++)
				if (!res[i].calls)
					return false;
			return true;
		}, Scaled(60000))) << "batch " << b / kBatch;
		for (int i = b; i < b + kBatch; i++) {
			ASSERT_EQ(res[i].status, ZCRPC_OK) << i << ": " << res[i].message;
			ASSERT_EQ(res[i].data, "call " + std::to_string(i) + std::string(i % 61, 'x'));
		}
	}
	const double setup_s = duration<double>(steady_clock::now() - t0).count();
	const zcrpc_worker_stats s = server.Stats(), c = WStats(w);
	const uint64_t rss = Rss();
	std::printf("[scale] %d connections in %.1f s (%.1f ms each); server receives posted %u "
		    "promised %u (budget %u); client posted %u promised %u; RSS +%.1f MiB (%.0f KiB "
		    "per connection, both sides)\n",
		    kConns, setup_s, setup_s * 1000 / kConns, s.recv_posted, s.recv_promised,
		    s.recv_budget, c.recv_posted, c.recv_promised,
		    static_cast<double>(rss - rss0) / (1 << 20),
		    static_cast<double>(rss - rss0) / 1024 / kConns);
	EXPECT_EQ(s.conns, static_cast<uint32_t>(kConns));
	EXPECT_EQ(c.conns, static_cast<uint32_t>(kConns));
	// CQs shared per worker and device, not one per connection: a CQ holds
	// each connection's send queue and receive share (about 144 entries
	// at the defaults), up to the device's max_cqe (rxe: 32,767), so at
	// least 128 connections share one.
	std::printf("[scale] CQs: server %llu (%llu entries, %llu made, %llu "
		    "resizes), client "
		    "%llu (%llu entries)\n",
		    (unsigned long long)s.cqs, (unsigned long long)s.cq_entries,
		    (unsigned long long)s.cqs_created,
		    (unsigned long long)s.cqs_resized,
		    (unsigned long long)c.cqs,
		    (unsigned long long)c.cq_entries);
	EXPECT_GE(s.cqs, 1u);
	EXPECT_LE(s.cqs, kConns / 128u + 1u);
	EXPECT_GE(c.cqs, 1u);
	EXPECT_LE(c.cqs, kConns / 128u + 1u);
	{
		// An idle progress pass no longer scans every connection:
		// printed, not asserted (the issue measured 32-176 passes/s
		// at N = 1,024 with a CQ per connection).
		uint64_t passes = 0;
		auto stop = steady_clock::now() + 300ms;
		while (steady_clock::now() < stop) {
			zcrpc_worker_progress(w, 0);
			passes++;
		}
		std::printf("[scale] client idle progress: %.0f passes/s at N "
			    "= %d\n",
			    static_cast<double>(passes) / 0.3, kConns);
	}
	// Receives follow the credits promised: the guaranteed 16 per
	// connection and at most 64 free, on each side.
	EXPECT_LE(s.recv_promised, s.recv_posted);
	EXPECT_LE(s.recv_posted, 16u * kConns + 64u);
	EXPECT_LE(c.recv_promised, c.recv_posted);
	EXPECT_LE(c.recv_posted, 16u * kConns + 64u);
	EXPECT_LE(rss - rss0, (uint64_t{2} << 20) * kConns)
		<< "more than 1 MiB resident per connection on each side";
	EXPECT_EQ(s.rnr_events + c.rnr_events, 0u);
	EXPECT_EQ(s.rejected_budget, 0u);
	std::printf("[scale] rxe RNR counters %lld -> %lld (printed, not asserted)\n",
		    static_cast<long long>(rnr0),
		    static_cast<long long>(RxeCounter(env_, "rcvd_rnr_err") +
					   RxeCounter(env_, "send_rnr_err")));

	for (auto *ch : chs)
		zcrpc_channel_destroy(ch);
	ASSERT_TRUE(ProgressUntil(w, [&] {
		return WStats(w).conns == 0;
	}, Scaled(60000)));
	auto until = steady_clock::now() + Scaled(60000);
	zcrpc_worker_stats after = server.Stats();
	while (after.conns && steady_clock::now() < until) {
		std::this_thread::sleep_for(20ms);
		after = server.Stats();
	}
	EXPECT_EQ(after.conns, 0u);
	EXPECT_EQ(after.recv_posted, 0u) << "the server's shared receive queue outlived its connections";
	EXPECT_EQ(after.cqs, 0u) << "the server's CQ outlived its connections";
	EXPECT_EQ(after.pool_in_use, sbase.pool_in_use);
	const zcrpc_worker_stats cafter = WStats(w);
	EXPECT_EQ(cafter.recv_posted, 0u);
	EXPECT_EQ(cafter.cqs, 0u);
	EXPECT_EQ(cafter.pool_in_use, cbase.pool_in_use);
	EXPECT_EQ(after.pool_bad_frees + cafter.pool_bad_frees, 0u);
	zcrpc_worker_destroy(w);
}
