// Failover across two guests (issue 16; docs/balancing.md): a round_robin
// target channel in guest A over two servers, one in A (this process, its
// own worker and thread) and one in guest B (peer_server). B's server is
// killed under load, then restarted; then B's link is cut and restored.
// Each time: the calls in flight on B fail once (UNAVAILABLE), the later
// ones go to A's server within the detection bound and succeed, none
// completes twice, and B is picked again once it is back.
#include <atomic>
#include <cstring>
#include <memory>
#include <chrono>
#include <future>
#include <iostream>
#include <map>
#include <string>
#include <thread>

#include "rdma2_env.h"
#include "zcrpc/balance.h"
#include "zcrpc/rpc.h"

using namespace std::chrono;

namespace
{

constexpr uint32_t kKeepaliveMs = 200;

// An echo server of peer_server's Echo method on its own worker and thread.
class LocalServer
{
      public:
	bool Start(const std::string &addr, int port)
	{
		if (zcrpc_worker_create(nullptr, &w_) != ZCRPC_OK ||
		    zcrpc_server_create(w_, nullptr, &s_) != ZCRPC_OK ||
		    zcrpc_server_register(
			    s_, "/zcrpc.test.Peer/Echo",
			    [](zcrpc_server_call *c, const zcrpc_request *r, void *) {
				    zcrpc_server_call_reply(c, ZCRPC_OK, nullptr, r->data, r->len,
							    nullptr);
			    },
			    nullptr) != ZCRPC_OK ||
		    zcrpc_server_listen(s_, addr.c_str(), std::to_string(port).c_str()) !=
			    ZCRPC_OK)
			return false;
		th_ = std::thread([this] {
			while (!stop_)
				zcrpc_worker_progress(w_, 1);
		});
		return true;
	}
	~LocalServer()
	{
		stop_ = true;
		if (th_.joinable())
			th_.join();
		zcrpc_server_destroy(s_);
		zcrpc_worker_destroy(w_);
	}

      private:
	zcrpc_worker *w_ = nullptr;
	zcrpc_server *s_ = nullptr;
	std::atomic<bool> stop_{false};
	std::thread th_;
};

struct Outcome {
	int callbacks = 0;
	zcrpc_status status = ZCRPC_OK;
	std::string message;
};

// A target channel kept busy with @depth echo calls, each tracked.
class Load
{
      public:
	zcrpc_worker *w = nullptr;
	zcrpc_channel *ch = nullptr;
	std::map<uint64_t, Outcome> out;
	uint64_t next = 1;
	int live = 0, depth = 0;

	bool Open(const std::string &target)
	{
		zcrpc_worker_opts wo = ClientWorkerOpts(kKeepaliveMs);
		zcrpc_channel_opts o;
		zcrpc_channel_opts_init(&o);
		o.lb_policy = "round_robin";
		o.connect_timeout_ms = 2000;
		o.backoff_initial_ms = 100;
		o.backoff_max_ms = 500;
		return zcrpc_worker_create(&wo, &w) == ZCRPC_OK &&
		       zcrpc_channel_create_target(w, target.c_str(), &o, &ch) == ZCRPC_OK;
	}
	~Load()
	{
		zcrpc_channel_destroy(ch);
		zcrpc_worker_destroy(w);
	}
	static void Done(zcrpc_channel *, const zcrpc_reply *r, void *arg)
	{
		auto *ctx = static_cast<std::pair<Load *, uint64_t> *>(arg);
		Outcome &o = ctx->first->out[ctx->second];
		o.callbacks++;
		o.status = r->status;
		o.message = r->message ? r->message : "";
		if (r->status == ZCRPC_OK &&
		    (r->len != 8 || std::memcmp(r->data, &ctx->second, 8) != 0))
			o.status = ZCRPC_DATA_LOSS; // not our bytes back
		ctx->first->live--;
		delete ctx;
	}
	void Top()
	{
		while (live < depth) {
			uint64_t id = next++;
			zcrpc_call_opts co;
			zcrpc_call_opts_init(&co);
			co.timeout_us = 20'000'000;
			auto *ctx = new std::pair<Load *, uint64_t>(this, id);
			if (zcrpc_call_async(ch, EchoMethod(), &id, 8, &co, Done, ctx, nullptr) !=
			    ZCRPC_OK) {
				delete ctx;
				ADD_FAILURE() << "a call did not start";
				return;
			}
			live++;
		}
	}
	void Run(milliseconds t)
	{
		auto end = steady_clock::now() + t;
		while (steady_clock::now() < end) {
			Top();
			zcrpc_worker_progress(w, 1);
		}
	}
	void Drain(milliseconds t)
	{
		depth = 0;
		auto end = steady_clock::now() + t;
		while (live && steady_clock::now() < end)
			zcrpc_worker_progress(w, 1);
	}
	// Runs `$ZCRPC_VMCTL @args` on another thread while the load goes on.
	int CtlUnderLoad(const std::string &args)
	{
		auto f = std::async(std::launch::async, [&] { return VmCtl(args); });
		while (f.wait_for(0ms) != std::future_status::ready) {
			Top();
			zcrpc_worker_progress(w, 1);
		}
		return f.get();
	}
	uint64_t Picks(int i)
	{
		zcrpc_backend_info b[2];
		zcrpc_channel_get_backends(ch, b, 2, sizeof(b[0]));
		return b[i].picks;
	}
	zcrpc_backend_state State(int i)
	{
		zcrpc_backend_info b[2];
		zcrpc_channel_get_backends(ch, b, 2, sizeof(b[0]));
		return b[i].state;
	}
	// From id @from on: failed calls (each must be UNAVAILABLE), calls
	// completed twice.
	int Failed(uint64_t from, uint64_t to)
	{
		int n = 0;
		for (auto &kv : out)
			if (kv.first >= from && kv.first < to && kv.second.status != ZCRPC_OK) {
				n++;
				EXPECT_EQ(kv.second.status, ZCRPC_UNAVAILABLE) << kv.second.message;
			}
		return n;
	}
	int Twice()
	{
		int n = 0;
		for (auto &kv : out)
			n += kv.second.callbacks > 1;
		return n;
	}
};

class Balance2 : public Rdma2Test
{
      protected:
	// The detection bound: as rdma2.PeerDeath's (4 x (1.5 keepalive + a
	// retry round) + 3 s for the control request), scaled.
	milliseconds Bound() const
	{
		zcrpc_worker_opts wo = ClientWorkerOpts(kKeepaliveMs);
		return Scaled(4 * (1.5 * wo.keepalive_ms + RetryRoundMs(wo)) + 3000);
	}
	// After a failure of B at id @at: the load runs past the detection
	// bound; calls started after it all succeed and none goes to B.
	void ExpectFailover(Load &l, uint64_t at, const char *what)
	{
		l.Run(Bound());
		uint64_t after = l.next;
		uint64_t b0 = l.Picks(1);
		l.Run(Scaled(1500));
		l.Drain(Scaled(30000));
		EXPECT_EQ(l.live, 0);
		int cut = l.Failed(at, after), later = l.Failed(after, l.next);
		EXPECT_LE(cut, 16) << what << ": more failed than were in flight";
		EXPECT_GT(cut, 0) << what << ": no call was in flight on B (the test proves less)";
		EXPECT_EQ(later, 0) << what << ": calls after the detection bound failed";
		EXPECT_EQ(l.Picks(1), b0) << what << ": B was picked while down";
		EXPECT_EQ(l.Twice(), 0);
		std::cout << "[rdma2] " << what << ": " << cut << " calls in flight failed; "
			  << (l.next - after) << " later calls all succeeded on A\n";
	}
	// B comes back: it is picked again within @t.
	void ExpectBack(Load &l, milliseconds t, const char *what)
	{
		uint64_t b0 = l.Picks(1);
		l.depth = 16;
		auto end = steady_clock::now() + t;
		while (l.Picks(1) == b0 && steady_clock::now() < end)
			l.Run(200ms);
		EXPECT_GT(l.Picks(1), b0) << what << ": B was never picked again";
		l.Drain(Scaled(30000));
	}
};

} // namespace

TEST_F(Balance2, AServerKilledOrPartitionedInTheOtherGuestFailsOverToTheOneHereAndComesBack)
{
	LocalServer a;
	ASSERT_TRUE(a.Start(env_.self, 7631));
	auto b = std::make_unique<PeerServer>(env_, 7632, "-t 14 -r 6 -k 1000");
	ASSERT_TRUE(b->ok());
	Load l;
	ASSERT_TRUE(l.Open("ipv4:" + env_.self + ":7631," + env_.peer + ":7632"));
	l.depth = 16;
	l.Run(Scaled(1500));
	ASSERT_GT(l.Picks(0), 50u);
	ASSERT_GT(l.Picks(1), 50u);
	ASSERT_EQ(l.Failed(0, l.next), 0);

	// B's server killed (SIGKILL: no GOAWAY) under load.
	uint64_t at = l.next;
	touched_peer_ = true;
	b->Kill([&](const std::string &cmd) { return l.CtlUnderLoad(cmd); });
	ExpectFailover(l, at, "B's server killed");
	b = std::make_unique<PeerServer>(env_, 7632, "-t 14 -r 6 -k 1000");
	ASSERT_TRUE(b->ok());
	ExpectBack(l, Scaled(15000), "B's server restarted");

	// B's guest cut off under load, then back.
	l.depth = 16;
	l.Run(Scaled(500));
	at = l.next;
	ASSERT_EQ(l.CtlUnderLoad("link-down"), 0);
	ExpectFailover(l, at, "B's link cut");
	ASSERT_EQ(l.CtlUnderLoad("link-up"), 0);
	ExpectBack(l, Scaled(30000), "B's link restored");
	EXPECT_EQ(l.Twice(), 0);
}
