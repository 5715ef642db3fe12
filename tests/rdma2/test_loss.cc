// T27: a lossy, slow link. netem drops a share of the packets and delays the
// rest by 5 ms on both guests' eth0 (so both directions), and N Echo calls
// of 16 B to 256 KiB (above the 16 KiB bulk threshold they take the RDMA
// WRITE path), 8 in flight, run over it. At 1 % and 5 % every call
// completes OK with the bytes it sent; at 20 % and 30 % (label `long`) each
// completes once, with its bytes or with UNAVAILABLE / DEADLINE_EXCEEDED,
// never corrupt. `tc -s` proves netem dropped packets.
#include <chrono>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "rdma2_client.h"
#include "rdma2_env.h"

using namespace std::chrono;

namespace {

constexpr size_t kSizes[] = {16, 100, 1000, 4000, 4096, 10000, 16384, 16385, 65536, 262144};
constexpr size_t kInFlight = 4;

class Loss : public Rdma2Test {
protected:
	// N calls of kSizes[i % ...] up to @max_size bytes.
	void Run(int port, int loss_pct, size_t n, bool all_ok, size_t max_size = 262144);
	void Netem(int loss_pct)
	{
		netem_ = true;
		std::string q = "netem loss " + std::to_string(loss_pct) + "% delay 5ms";
		std::string out;
		ASSERT_EQ(Shell("tc qdisc replace dev eth0 root " + q, &out), 0) << out;
		ASSERT_EQ(VmCtl("peer-run tc qdisc replace dev eth0 root " + q, &out), 0) << out;
	}
	static int64_t Drops(const std::string &tc_out)
	{
		return NumberAfter(tc_out, "dropped ");
	}
};

void Loss::Run(int port, int loss_pct, size_t n, bool all_ok, size_t max_size)
{
	std::vector<size_t> sizes;
	for (size_t sz : kSizes)
		if (sz <= max_size)
			sizes.push_back(sz);
	// The library's default ACK timeout (2^16 x 4.096 us = 268 ms) on
	// both sides, retry_count 6.
	PeerServer srv(env_, port, "-t 16 -r 6");
	ASSERT_TRUE(srv.ok());
	zcrpc_worker_opts wo = ClientWorkerOpts(1000);
	wo.ack_timeout_exp = 16;
	Rdma2Client c(env_.peer, srv.port(), wo, 10000);
	ASSERT_TRUE(c.ok());
	ASSERT_EQ(c.Start(64, 10'000'000), ZCRPC_OK);
	ASSERT_TRUE(c.ProgressUntil([&] { return c.completed() == 1; }, Scaled(20000)));
	ASSERT_EQ(c.calls()[0].status, ZCRPC_OK) << c.calls()[0].message;

	const char *names[] = {"completer_retry_err", "duplicate_request", "retry_exceeded_err",
			       "out_of_seq_request", "rcvd_seq_err", "sent_pkts"};
	std::map<std::string, int64_t> before;
	for (const char *name : names)
		before[name] = LocalCounter(env_.dev, name);
	Netem(loss_pct);
	auto t0 = steady_clock::now();
	const int64_t timeout_us = all_ok ? 120'000'000 : 30'000'000;
	size_t next = 0;
	auto end = t0 + Scaled(1200000);
	while (c.completed() < n + 1 && steady_clock::now() < end) {
		while (next < n && c.outstanding() < kInFlight) {
			ASSERT_EQ(c.Start(sizes[next % sizes.size()], timeout_us), ZCRPC_OK);
			next++;
		}
		c.Progress();
	}
	auto secs = duration_cast<milliseconds>(steady_clock::now() - t0).count() / 1000.0;
	ASSERT_EQ(c.completed(), n + 1) << c.outstanding() << " calls never completed";
	c.ProgressUntil([] { return false; }, Scaled(500));

	std::map<zcrpc_status, int> by_status;
	uint64_t bytes = 0;
	for (size_t i = 1; i < c.calls().size(); i++) {
		const auto &call = c.calls()[i];
		by_status[call.status]++;
		EXPECT_EQ(call.callbacks, 1) << "call " << i;
		if (call.status == ZCRPC_OK)
			bytes += 2 * call.len;
		else if (all_ok && by_status[call.status] <= 3)
			ADD_FAILURE() << "call " << i << " (" << call.len << " B) failed "
				      << zcrpc_status_str(call.status) << ": " << call.message;
		else
			EXPECT_TRUE(call.status == ZCRPC_UNAVAILABLE ||
				    call.status == ZCRPC_DEADLINE_EXCEEDED)
				<< "call " << i << ": " << zcrpc_status_str(call.status);
	}
	if (all_ok)
		EXPECT_EQ(by_status[ZCRPC_OK], static_cast<int>(n)) << "not every call succeeded";
	EXPECT_EQ(c.Corrupt(), 0);
	EXPECT_EQ(c.Twice(), 0);

	std::string tc_a, tc_b;
	EXPECT_EQ(Shell("tc -s qdisc show dev eth0", &tc_a), 0);
	EXPECT_EQ(VmCtl("peer-run tc -s qdisc show dev eth0", &tc_b), 0);
	int64_t drops_a = Drops(tc_a), drops_b = Drops(tc_b);
	EXPECT_GT(drops_a + drops_b, 0) << "netem dropped nothing:\n" << tc_a << tc_b;

	std::cout << "[rdma2] netem loss " << loss_pct << "% delay 5ms: " << n << " calls of 16 B.."
		  << max_size / 1024 << " KiB in "
		  << secs << " s (" << bytes / 1e6 / secs << " MB/s of verified payload);";
	for (const auto &[st, count] : by_status)
		std::cout << " " << zcrpc_status_str(st) << " " << count;
	std::cout << "; netem dropped " << drops_a << " (A) + " << drops_b << " (B) packets; A:";
	for (const char *name : names)
		std::cout << " " << name << " +" << LocalCounter(env_.dev, name) - before[name];
	std::cout << "\n";
	std::string server_says = srv.Stop();
	if (HasFailure())
		std::cout << "[rdma2] peer server:\n" << server_says;
}

TEST_F(Loss, OnePercentAndDelayEveryCallVerified)
{
	Run(7621, 1, 500, true);
}

TEST_F(Loss, FivePercentAndDelayEveryCallVerified)
{
	Run(7622, 5, 500, true, 65536);
}

// Label `long` as well (not in CI): see tests/CMakeLists.txt.
TEST_F(Loss, LongTwentyPercentAndDelayNeverCorruptNeverTwice)
{
	Run(7623, 20, 500, false);
}

TEST_F(Loss, LongThirtyPercentAndDelayNeverCorruptNeverTwice)
{
	Run(7624, 30, 500, false);
}

} // namespace
