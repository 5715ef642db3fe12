// The soak: one server, two clients in this process and two client
// processes that are SIGKILLed and restarted at random, all making calls of
// random sizes (bulk included) with random deadlines and random cancels.
// At the end every count balances: each call completed exactly once with an
// expected status, the data of every OK call was right, every pool slot is
// back, no RNR, and `rdma resource show` is back to its baseline.
//
// The same code runs twice: rdma.Soak.* (CI, 20,000 calls) and, built with
// ZCRPC_SOAK_LONG into zcrpc_long_tests, rdma.SoakLong.* (1,000,000 calls,
// labels long and rdma; scripts/test-long).
#include <chrono>
#include <csignal>
#include <cstdio>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <sys/wait.h>

#include "fault_util.h"
#include "rdma_env.h"

using namespace std::chrono;
using namespace std::chrono_literals;

namespace {

class Soak : public RdmaTest {};
class SoakLong : public RdmaTest {};

void RunSoak(const RxeEnv &env, uint64_t total_calls)
{
	{ // librdmacm keeps one PD per device it has used for the process's
	  // life (`users 0`): warm it up before taking the baseline.
		SoakServer warm;
		ASSERT_TRUE(warm.Start(env.addr0));
		soak_cfg cfg{};
		std::string p = std::to_string(warm.port());
		cfg.addr = env.addr0.c_str();
		cfg.port = p.c_str();
		cfg.calls = 10;
		cfg.in_flight = 4;
		soak_counts c;
		ASSERT_EQ(soak_client_run(&cfg, &c), 0) << c.first_error;
		cfg.src_addr = env.addr1.c_str();
		ASSERT_EQ(soak_client_run(&cfg, &c), 0) << c.first_error;
	}
	auto base = RdmaResources();
	ASSERT_FALSE(base.empty()) << "`rdma resource show` failed (iproute2)";
	int64_t rnr0 = RxeCounter(env, "rcvd_rnr_err") + RxeCounter(env, "send_rnr_err");
	auto t0 = steady_clock::now();
	uint64_t server_calls = 0;
	{
		SoakServer server;
		ASSERT_TRUE(server.Start(env.addr0));
		std::string port = std::to_string(server.port());

		// Two clients in this process: they count every call.
		const int nclients = 2;
		std::vector<soak_counts> counts(nclients);
		std::vector<int> rcs(nclients, -1);
		std::vector<std::thread> threads;
		std::atomic<int> finished{0};
		for (int i = 0; i < nclients; i++) {
			threads.emplace_back([&, i] {
				soak_cfg cfg{};
				// One over rxe loopback, one across the veth pair.
				cfg.addr = env.addr0.c_str();
				cfg.src_addr = i == 1 ? env.addr1.c_str() : nullptr;
				cfg.port = port.c_str();
				cfg.seed = 1000 + static_cast<uint64_t>(i);
				cfg.calls = total_calls / nclients;
				cfg.in_flight = 48;
				cfg.bulk_pct = 3;
				cfg.max_bulk = 256 << 10;
				cfg.slow_pct = 10;
				cfg.deadline_pct = 10;
				cfg.cancel_pct = 5;
				cfg.report_every_s = total_calls > 100000 ? 60 : 0;
				rcs[static_cast<size_t>(i)] =
					soak_client_run(&cfg, &counts[static_cast<size_t>(i)]);
				finished++;
			});
		}

		// Two client processes, killed and restarted at random.
		std::mt19937 rng(4242);
		const int nchildren = 2;
		std::vector<Child> kids(nchildren);
		std::vector<steady_clock::time_point> kill_at(nchildren);
		int spawned = 0, killed = 0, exited_ok = 0, exited_bad = 0;
		auto spawn = [&](int k) {
			Child c;
			std::string seed = std::to_string(rng());
			std::string n = std::to_string(200 + rng() % 2000);
			ASSERT_TRUE(SpawnChild({FaultPeer(), "client", env.addr0, port, seed, n},
					       false, &kids[static_cast<size_t>(k)]));
			spawned++;
			kill_at[static_cast<size_t>(k)] =
				steady_clock::now() + milliseconds(300 + rng() % 2500);
		};
		for (int k = 0; k < nchildren; k++)
			spawn(k);
		while (finished.load() < nclients) {
			std::this_thread::sleep_for(20ms);
			for (int k = 0; k < nchildren; k++) {
				Child &c = kids[static_cast<size_t>(k)];
				int st = 0;
				if (waitpid(c.pid, &st, WNOHANG) == c.pid) {
					c.pid = -1;
					if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
						exited_ok++;
					else
						exited_bad++;
					spawn(k);
				} else if (steady_clock::now() >= kill_at[static_cast<size_t>(k)]) {
					c.Kill();
					killed++;
					spawn(k);
				}
			}
		}
		for (auto &t : threads)
			t.join();
		for (auto &c : kids) {
			if (c.pid > 0) {
				c.Kill();
				killed++;
			}
		}
		double secs = duration<double>(steady_clock::now() - t0).count();

		uint64_t issued = 0, completed = 0, ok = 0, cancelled = 0, deadline = 0, bulk = 0;
		for (int i = 0; i < nclients; i++) {
			auto &c = counts[static_cast<size_t>(i)];
			soak_counts_print(&c, ("client " + std::to_string(i)).c_str());
			EXPECT_EQ(rcs[static_cast<size_t>(i)], 0) << c.first_error;
			EXPECT_EQ(c.issued, total_calls / nclients);
			EXPECT_EQ(c.completed, c.issued) << "calls issued != calls completed";
			EXPECT_EQ(c.duplicates, 0u) << "a call completed twice";
			EXPECT_EQ(c.ok + c.cancelled + c.deadline, c.completed)
				<< "statuses outside OK/CANCELLED/DEADLINE_EXCEEDED";
			EXPECT_EQ(c.unexpected, 0u) << c.first_error;
			EXPECT_EQ(c.bad_data, 0u) << c.first_error;
			EXPECT_EQ(c.pool_in_use, 0u) << "client pool slots not back";
			EXPECT_EQ(c.pool_bad_frees, 0u);
			issued += c.issued;
			completed += c.completed;
			ok += c.ok;
			cancelled += c.cancelled;
			deadline += c.deadline;
			bulk += c.bulk_ok;
		}
		// The mix really happened.
		EXPECT_GT(ok, total_calls / 2);
		EXPECT_GT(bulk, 0u) << "no bulk call succeeded";
		EXPECT_GT(cancelled, 0u) << "no call was cancelled";
		EXPECT_GT(deadline, 0u) << "no deadline expired";
		EXPECT_GE(killed, 2) << "no client process was killed";
		EXPECT_EQ(exited_bad, 0) << "a client process found an imbalance (see its line above)";

		// The server lets go of every dead client and every held call.
		auto until = steady_clock::now() + ScaledMs(20000);
		zcrpc_server_stats ss{};
		for (;;) {
			server.Run([&] {
				zcrpc_server_get_stats(server.s(), &ss,
						       sizeof(ss));
			});
			if ((ss.connections == 0 && ss.running == 0 && ss.queued == 0) ||
			    steady_clock::now() >= until)
				break;
			std::this_thread::sleep_for(20ms);
		}
		server.Stop();
		zcrpc_worker_stats ws{};
		until = steady_clock::now() + ScaledMs(5000);
		do {
			zcrpc_worker_progress(server.w(), 1);
			soak_server_tick(server.ss());
			zcrpc_worker_get_stats(server.w(), &ws, sizeof(ws));
		} while ((ws.conns || ws.pool_in_use) && steady_clock::now() < until);
		zcrpc_server_get_stats(server.s(), &ss, sizeof(ss));
		server_calls = ss.calls;
		EXPECT_EQ(ss.connections, 0u);
		EXPECT_EQ(ss.running, 0u);
		EXPECT_EQ(ss.queued, 0u);
		EXPECT_EQ(soak_server_held(server.ss()), 0u);
		EXPECT_EQ(ws.conns, 0u);
		EXPECT_EQ(ws.pool_in_use, 0u) << "server pool slots not back (capacity "
					      << ws.pool_capacity << ")";
		EXPECT_EQ(ws.pool_bad_frees, 0u);
		EXPECT_GE(server_calls, ok) << "the server saw fewer calls than succeeded";
		std::printf("soak: %llu calls in this process in %.1f s = %.0f calls/s; ok %llu "
			    "cancelled %llu deadline %llu bulk_ok %llu; server saw %llu calls; "
			    "client processes: %d spawned, %d killed, %d finished cleanly\n",
			    static_cast<unsigned long long>(completed), secs, completed / secs,
			    static_cast<unsigned long long>(ok),
			    static_cast<unsigned long long>(cancelled),
			    static_cast<unsigned long long>(deadline),
			    static_cast<unsigned long long>(bulk),
			    static_cast<unsigned long long>(server_calls), spawned, killed, exited_ok);
		EXPECT_EQ(issued, completed);
	}
	int64_t rnr1 = RxeCounter(env, "rcvd_rnr_err") + RxeCounter(env, "send_rnr_err");
	EXPECT_EQ(rnr1, rnr0) << "receiver-not-ready errors during the soak";
	auto end = WaitResources(base, ScaledMs(10000));
	EXPECT_TRUE(SameResources(base, end))
		<< "rdma resources before: " << ResourcesStr(base) << " after: " << ResourcesStr(end)
		<< "\n" << ResourceDetail();
	std::printf("soak: rdma resources before: %s after: %s\n", ResourcesStr(base).c_str(),
		    ResourcesStr(end).c_str());
}

} // namespace

#ifdef ZCRPC_SOAK_LONG
TEST_F(SoakLong, MillionRandomCallsWithClientProcessesKilledAtRandomAllBalance)
{
	RunSoak(env_, 1000000);
}
#else
TEST_F(Soak, TwentyThousandRandomCallsWithClientProcessesKilledAtRandomAllBalance)
{
	RunSoak(env_, 20000);
}
#endif
