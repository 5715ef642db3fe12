// Shared helpers for the tests that run over Soft-RoCE in the guest
// (scripts/rxe-vm sets ZCRPC_RXE_*). The fixture FAILS, never skips, when the
// devices are missing: an RDMA test that did not reach rxe proves nothing.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "zcrpc/transport.h"

struct RxeEnv {
	std::string dev0, dev1, addr0, addr1, unreachable, addr0_v6, addr1_v6;
	// The provider of dev0/dev1 (ZCRPC_RXE_PROVIDER): "rxe", or "siw" in
	// the Soft-iWARP guest (scripts/rxe-vm --siw).
	std::string provider;
};

// Whether the test build's capability mask (ZCRPC_DEVICE_CAPS) holds @token.
bool MaskHas(const char *token);

// Reads the environment; empty strings when unset.
RxeEnv GetRxeEnv();

// Scale for time bounds (ZCRPC_TEST_TIME_SCALE, default 1).
double TimeScale();

// @ms milliseconds scaled by TimeScale(): every time bound of the tests.
inline std::chrono::milliseconds Scaled(int ms)
{
	return std::chrono::milliseconds(
		static_cast<int64_t>(ms * TimeScale()));
}

// Sum of one hw_counter over both rxe devices (-1 if unreadable). Over siw
// (no hw_counters) sent_pkts / rcvd_pkts read the guest's TCP OutSegs /
// InSegs, which siw's traffic moves (machine-wide, once for both).
int64_t RxeCounter(const RxeEnv &env, const char *name);

// One hw_counter of one device (-1 if unreadable); siw as above.
int64_t DevCounter(const std::string &dev, const char *name);

// Every counter of every RDMA device's port 1 ("rxe0 cm_tx_msgs/req",
// "rxe0 hw_counters/sent_pkts", ...): the kernel CM's message, retry and
// duplicate counts and the provider's hw_counters.
using DevCounters = std::map<std::string, int64_t>;
DevCounters SnapshotDevCounters();

// The counters that moved from @before to @after, one "name +delta" each,
// separated by spaces ("" if none moved).
std::string CountersMoved(const DevCounters &before, const DevCounters &after);

// What a failed rdma test prints at its first failure (a gtest listener in
// rdma_env.cc, for every test of the binary): the counters moved since the
// test began (the CM step a silent connect stopped at: REQ sent, received,
// retried, answered...) and the rdma_cm ids and QPs alive at that moment.
std::string RdmaDiagnostics(const DevCounters &since);

class RdmaTest : public ::testing::Test {
protected:
	void SetUp() override;
	RxeEnv env_;
};

// Progresses @w until @done() or @timeout; returns done().
bool ProgressUntil(zcrpc_worker *w, const std::function<bool()> &done,
		   std::chrono::milliseconds timeout);

// An echo server on its own worker and thread.
class EchoServer {
public:
	explicit EchoServer(const std::string &addr,
			    const zcrpc_worker_opts *opts = nullptr);
	~EchoServer();
	uint16_t port() const { return port_; }
	int accepted() const { return accepted_.load(); }
	int closed() const { return closed_.load(); }
	zcrpc_status last_close_status() const { return last_close_.load(); }
	uint64_t echoed() const { return echoed_.load(); }
	bool ok() const { return ok_; }

private:
	static void OnAccept(zcrpc_listener *, zcrpc_conn *, void *);
	static void OnRecv(zcrpc_conn *, const void *, size_t, void *);
	static void OnState(zcrpc_conn *, zcrpc_conn_state, zcrpc_status, void *);
	zcrpc_worker *w_ = nullptr;
	zcrpc_listener *l_ = nullptr;
	uint16_t port_ = 0;
	bool ok_ = false;
	std::atomic<bool> stop_{false};
	std::atomic<int> accepted_{0}, closed_{0};
	std::atomic<zcrpc_status> last_close_{ZCRPC_OK};
	std::atomic<uint64_t> echoed_{0};
	std::thread thread_;
};
