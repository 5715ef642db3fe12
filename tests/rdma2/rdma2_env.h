// Shared helpers for the tests that run across two guests (scripts/rxe-vm
// --two): the test (client) runs in guest A, servers run in guest B through
// the control CLI ZCRPC_VMCTL (scripts/rxe-vm-ctl). The fixture FAILS, never
// skips, when the control CLI or the device is missing.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include <gtest/gtest.h>

#include "zcrpc/rpc.h"

struct Rxe2Env {
	std::string vmctl, dev, self, peer;
};

// Reads ZCRPC_VMCTL and ZCRPC_RXE2_*; empty strings when unset.
Rxe2Env GetRxe2Env();

// Runs `$ZCRPC_VMCTL ARGS` through the shell (ARGS are shell words);
// returns its exit status and sets *out to its stdout and stderr.
int VmCtl(const std::string &args, std::string *out = nullptr);

// Runs a shell command in this guest (A); like VmCtl.
int Shell(const std::string &cmd, std::string *out = nullptr);

// One hw_counter of rxe device @dev in guest A (-1 if unreadable), and the
// same in guest B (through peer-run).
int64_t LocalCounter(const std::string &dev, const char *name);
int64_t PeerCounter(const std::string &dev, const char *name);

// @ms scaled by ZCRPC_TEST_TIME_SCALE.
std::chrono::milliseconds Scaled(double ms);

// The first number after @key in @text (-1 if none), e.g. "dropped 12".
int64_t NumberAfter(const std::string &text, const std::string &key);

class Rdma2Test : public ::testing::Test {
protected:
	void SetUp() override;
	// Thaws guest B, restores the link and removes netem/nft rules this
	// test set, whatever happened: the next test starts clean.
	void TearDown() override;
	Rxe2Env env_;
	bool touched_peer_ = false; // froze B or cut the link
	bool netem_ = false, nft_ = false;
};

// The peer server (tests/rdma2/peer_server.c) in guest B, started with
// peer-run --bg; SIGTERMed (then waited for) when it goes out of scope.
class PeerServer {
public:
	PeerServer(const Rxe2Env &env, int port, const std::string &opts = "");
	~PeerServer();
	bool ok() const { return ok_; }
	std::string port() const { return std::to_string(port_); }
	// Stops it; returns what it printed.
	std::string Stop();
	// SIGKILLs it (no shutdown, no GOAWAY) and waits for it to go;
	// @ctl runs the control commands (VmCtl when empty), so a test can
	// keep its load going meanwhile.
	void Kill(const std::function<int(const std::string &)> &ctl = {});

private:
	std::string handle_, out_;
	int port_;
	bool ok_ = false, stopped_ = false;
};

// The rdma2 methods' ids.
uint32_t EchoMethod();
uint32_t HoldMethod();

// Worker settings of the rdma2 clients: ACK timeout 2^14 x 4.096 us
// (67 ms), retry_count 6, keepalive @keepalive_ms.
zcrpc_worker_opts ClientWorkerOpts(uint32_t keepalive_ms);

// What one round of (retry_count + 1) ACK timeouts lasts, in ms.
double RetryRoundMs(const zcrpc_worker_opts &o);
