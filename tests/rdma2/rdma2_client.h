// The client side of the rdma2 tests: one worker and one channel to the
// peer server, driven by the test's thread, with every call tracked: how
// many times its callback ran, its status, when, and whether the reply's
// bytes are the pattern the request carried.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <string>

#include "zcrpc/rpc.h"

struct TrackedCall {
	class Rdma2Client *owner = nullptr;
	size_t len = 0;
	uint32_t seed = 0;
	uint32_t hold_ms = 0; // Hold call when non-zero
	int callbacks = 0;
	zcrpc_status status = ZCRPC_OK;
	bool corrupt = false;
	std::string message;
	std::chrono::steady_clock::time_point done_at;
};

class Rdma2Client {
public:
	Rdma2Client(const std::string &host, const std::string &port,
		    const zcrpc_worker_opts &wo, int connect_timeout_ms = 3000);
	~Rdma2Client();
	bool ok() const { return ch_ != nullptr; }
	zcrpc_worker *worker() const { return w_; }
	const zcrpc_worker_opts &opts() const { return wo_; }

	// Starts an Echo call of @len pattern bytes (a Hold call for
	// @hold_ms when non-zero); returns its status (OK = started).
	zcrpc_status Start(size_t len, int64_t timeout_us, uint32_t hold_ms = 0);
	// One zcrpc_worker_progress(w, 2).
	void Progress();
	// Progresses until @done() or @timeout; returns done().
	bool ProgressUntil(const std::function<bool()> &done,
			   std::chrono::milliseconds timeout);
	// Runs `$ZCRPC_VMCTL @args` on another thread while progressing;
	// returns its status and sets *started/*finished.
	int CtlWhileProgressing(const std::string &args,
				std::chrono::steady_clock::time_point *started = nullptr,
				std::chrono::steady_clock::time_point *finished = nullptr);

	// Keeps @n Echo calls of @len bytes in flight from every Progress()
	// until the first call fails (0 = off).
	void Pump(size_t n, size_t len, int64_t timeout_us)
	{
		pump_n_ = n;
		pump_len_ = len;
		pump_timeout_us_ = timeout_us;
	}
	bool any_failed() const { return failed_ > 0; }

	size_t started() const { return calls_.size(); }
	size_t completed() const { return completed_; }
	size_t outstanding() const { return calls_.size() - completed_; }
	const std::deque<TrackedCall> &calls() const { return calls_; }
	// Calls whose callback ran more than once, or whose OK reply was not
	// the bytes sent.
	int Twice() const;
	int Corrupt() const;

	static uint8_t Pattern(uint32_t seed, size_t i);
	// Prints the channel's and the worker's internal state (after a hang).
	void Dump() const;

private:
	static void OnReply(zcrpc_channel *ch, const zcrpc_reply *r, void *arg);
	static void Fill(void *dst, size_t len, void *ctx);
	zcrpc_worker_opts wo_;
	zcrpc_worker *w_ = nullptr;
	zcrpc_channel *ch_ = nullptr;
	std::deque<TrackedCall> calls_; // stable addresses: callbacks point here
	size_t completed_ = 0, failed_ = 0;
	size_t pump_n_ = 0, pump_len_ = 0;
	int64_t pump_timeout_us_ = 0;
	uint32_t next_seed_ = 1;
};
