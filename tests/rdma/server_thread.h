// A zcrpc RPC server on its own worker and thread, for the guest tests: the
// setup several test files wrote for themselves (tests/rdma/test_storm.cc and
// the newer cases of test_limits.cc use this one). Echo is registered at
// kServerThreadEcho; counters are read on the worker's own thread.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "zcrpc/rpc.h"

extern const char *const kServerThreadEcho;

class ServerThread
{
      public:
	zcrpc_worker *w = nullptr;
	zcrpc_server *s = nullptr;
	std::atomic<int> connects{0}, disconnects{0};
	// The most handshakes in progress any progress turn saw.
	std::atomic<uint32_t> max_handshakes_seen{0};
	// The longest zcrpc_worker_progress() call, ns (a turn that found
	// nothing sleeps up to 1 ms): printed by tests, never asserted.
	std::atomic<int64_t> max_turn_ns{0};

	// Echo server listening on @addr (port chosen by the system), on a
	// worker made with @wo (NULL: defaults). @o's on_connect,
	// on_disconnect and arg are the helper's own.
	bool Start(const std::string &addr, zcrpc_server_opts o,
		   const zcrpc_worker_opts *wo = nullptr);
	uint16_t port() const
	{
		return zcrpc_server_get_port(s);
	}
	std::string port_str() const
	{
		return std::to_string(port());
	}
	// The worker's and the server's counters, read on the worker's thread.
	zcrpc_worker_stats WorkerStats();
	zcrpc_server_stats ServerStats();
	// Runs @f on the worker's thread and waits for it.
	void OnWorker(const std::function<void()> &f);
	// Sleeps until @pred(worker stats) holds or @t passed; returns it.
	bool
	WaitStats(const std::function<bool(const zcrpc_worker_stats &)> &pred,
		  std::chrono::milliseconds t);
	// The server's connections alive now (worker thread's view).
	std::vector<zcrpc_conn *> Conns();
	// The worker's error string (zcrpc_worker_get_error), copied.
	std::string Error();
	~ServerThread();

      private:
	static void Echo(zcrpc_server_call *c, const zcrpc_request *r, void *);
	std::atomic<bool> stop_{false};
	std::thread thread_;
	std::mutex mu_; // conns_, touched on the worker's thread and by Conns()
	std::vector<zcrpc_conn *> conns_;
};
