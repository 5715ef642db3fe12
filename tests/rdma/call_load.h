// A saturating call load for the guest tests (tests/rdma/test_storm.cc,
// test_limits.cc): on its own worker and thread, N channels each keep D
// Echo calls in flight, every reply verified byte for byte and every call
// counted when it completes, so a test can assert that nothing was lost or
// completed twice and that calls kept completing while something else ran.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "zcrpc/rpc.h"

struct CallLoadOpts {
	int channels = 8;
	int depth = 32;		  // calls in flight per channel
	std::string src;	  // source address, or "" for the route's
	uint32_t window = 64;	  // zcrpc_channel_opts.window
	uint32_t max_pending = 0; // 0: the default
	size_t max_len = 512;	  // request sizes 1..max_len
	int64_t timeout_us = 30000000;
	// call_async refusing RESOURCE_EXHAUSTED (the channel's queue full)
	// is counted in refused and retried later; otherwise an error.
	bool allow_refused = false;
};

class CallLoad
{
      public:
	CallLoad(const std::string &host, uint16_t port, const CallLoadOpts &o);
	~CallLoad();
	// Connects the channels (a verified call each), then keeps the load
	// running until Stop(). Returns false when the warm-up failed.
	bool Start(std::chrono::milliseconds warm_timeout);
	// Stops issuing and waits (progressing) until every call submitted
	// completed or @t passed; the channels stay open, idle.
	void Stop(std::chrono::milliseconds t);
	// Closes the channels in order and ends the thread.
	void Close();
	// The worker's counters, read on its thread (or after Close()).
	zcrpc_worker_stats WorkerStats();

	std::atomic<uint64_t> submitted{0}, completed{0}, ok{0}, refused{0};
	std::atomic<uint64_t> failed{0}, bad_data{0}, twice{0};
	// The longest zcrpc_worker_progress() call while loaded, ns (printed).
	std::atomic<int64_t> max_turn_ns{0};
	// The first failure, bad reply or submit error, for the test's message.
	std::string FirstError();
	// Channel counters summed over the channels (after Close()).
	zcrpc_channel_stats channel_stats{};

      private:
	struct Rec {
		CallLoad *self;
		uint32_t ch;
		uint64_t seq;
		uint32_t len;
		int completions;
	};
	static void Done(zcrpc_channel *, const zcrpc_reply *r, void *a);
	void Run(std::chrono::milliseconds warm_timeout);
	void RunBody(std::chrono::milliseconds warm_timeout);
	bool Submit(int ch);
	void Error(const std::string &e);

	std::string host_, port_;
	CallLoadOpts o_;
	zcrpc_worker *w_ = nullptr;
	std::vector<zcrpc_channel *> chs_;
	std::vector<int> inflight_;
	std::vector<uint64_t> seq_;
	std::deque<Rec> recs_;
	std::atomic<int> state_{0}; // 1 warm, -1 warm-up failed
	std::atomic<bool> stop_{false}, close_{false}, drained_{false};
	std::atomic<int64_t> drain_ms_{0};
	std::mutex mu_;
	std::string first_error_;
	std::thread thread_;
	std::atomic<bool> want_stats_{false}, have_stats_{false},
		finished_{false};
	zcrpc_worker_stats stats_{};
};
