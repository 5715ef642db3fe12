// Helpers of the fault and soak tests: the kernel's count of RDMA objects
// (`rdma resource show`), child processes of zcrpc_test_fault_peer, and a
// soak server on its own thread.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "soak_peer.h"

// Counts of `rdma resource show`, summed over the devices: pd, cq, qp,
// cm_id, mr, ctx, srq. Empty when the tool failed.
std::map<std::string, int64_t> RdmaResources();
std::string ResourcesStr(const std::map<std::string, int64_t> &m);
// `rdma resource show pd` and qp (with pids), for failure messages.
std::string ResourceDetail();

// Polls until RdmaResources() equals @base (for pd, cq, qp, cm_id, mr) or
// @timeout passed; returns the last reading.
std::map<std::string, int64_t> WaitResources(const std::map<std::string, int64_t> &base,
					     std::chrono::milliseconds timeout);
bool SameResources(const std::map<std::string, int64_t> &a,
		   const std::map<std::string, int64_t> &b);

std::chrono::milliseconds ScaledMs(int ms);

// The zcrpc_test_fault_peer binary: $ZCRPC_TEST_FAULT_PEER when set (a copy
// for a long run while the tree is rebuilt), else the one built with us.
std::string FaultPeer();

// A child process of zcrpc_test_fault_peer (posix_spawn). With
// @capture_stdout, its stdout is a pipe read with ReadLine().
struct Child {
	pid_t pid = -1;
	int out_fd = -1;
	std::string buffered;
	// Next line of its stdout, or "" after @timeout / EOF.
	std::string ReadLine(std::chrono::milliseconds timeout);
	// SIGKILL (if running) and reap; returns the wait status.
	int Kill();
	// Reaps without signalling (waits up to @timeout, then SIGKILL).
	int Wait(std::chrono::milliseconds timeout);
	~Child();
};

bool SpawnChild(const std::vector<std::string> &args, bool capture_stdout, Child *out);

// The soak server (soak_peer.h) on its own worker and thread.
class SoakServer {
public:
	bool Start(const std::string &addr, const zcrpc_server_opts *o = nullptr);
	uint16_t port() const { return zcrpc_server_get_port(s_); }
	// Runs @fn on the server's thread (between two progress calls) and waits.
	void Run(const std::function<void()> &fn);
	void Stop(); // joins the thread; the test thread may then use w/s
	~SoakServer();
	zcrpc_worker *w() const { return w_; }
	zcrpc_server *s() const { return s_; }
	soak_server *ss() const { return ss_; }
	std::atomic<bool> paused{false};

private:
	zcrpc_worker *w_ = nullptr;
	zcrpc_server *s_ = nullptr;
	soak_server *ss_ = nullptr;
	std::atomic<bool> stop_{false};
	std::atomic<const std::function<void()> *> job_{nullptr};
	std::thread thread_;
};
