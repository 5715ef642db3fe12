// Helpers of the balancing and resolver tests (test_balance.cc,
// test_resolve_dns.cc, test_resolve_etcd.cc): server processes of
// zcrpc_test_lb_peer (lb_peer.c), a client that keeps calls of theirs in
// flight over a target channel and records what each did, the servers' own
// counts, and an "ipv4:" target naming them.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "fault_util.h"
#include "zcrpc/balance.h"
#include "zcrpc/rpc.h"

// The methods of zcrpc_test_lb_peer: Who replies the server's name (the
// request: an 8-byte request id, then anything), Fail replies UNAVAILABLE,
// Stats "calls C distinct D duplicates U".
extern const char *const kLbWho;
extern const char *const kLbFail;
extern const char *const kLbStats;

// One zcrpc_test_lb_peer process, replying its name to Who.
struct LbPeer {
	std::string name;
	uint16_t port = 0;
	std::unique_ptr<Child> child;

	// Spawns it serving on @addr:@p (0: an ephemeral port), announced in
	// @registry (with a lease of @ttl_s seconds) when not empty, and waits
	// until it says it listens.
	bool Start(const std::string &addr, const std::string &nm,
		   uint16_t p = 0, const std::string &registry = "",
		   int ttl_s = 2);
};

// Starts @n more peers on @addr into @peers, each named "s" + its index
// there (announced in @registry when not empty).
::testing::AssertionResult StartLbPeers(std::vector<LbPeer> &peers, int n,
					const std::string &addr,
					const std::string &registry = "",
					int ttl_s = 2);

// What one call did, by its request id.
struct LbOutcome {
	int completions = 0;
	zcrpc_status status = ZCRPC_OK;
	std::string server, message;
};

// A client worker and a target channel, and the calls started on it: each
// call's request id is next_id at its start (from 1), its outcome out[id]
// once it completed.
struct LbClient {
	zcrpc_worker *w = nullptr;
	zcrpc_channel *ch = nullptr;
	std::map<uint64_t, LbOutcome> out;
	uint64_t next_id = 1;
	int live = 0;	   // calls in flight
	int completed = 0; // request ids completed at least once

	LbClient() = default;
	LbClient(const LbClient &) = delete;
	LbClient &operator=(const LbClient &) = delete;
	~LbClient();

	// A worker (keepalive @keepalive_ms) and a channel over @target with
	// @policy (backoff 50..400 ms, connect timeout 2 s).
	zcrpc_status Open(const std::string &target,
			  const char *policy = "round_robin",
			  int keepalive_ms = 200);

	// Starts one call of @method with a fresh request id (and @key, also
	// the call's hash key).
	zcrpc_status Start(const char *method = kLbWho,
			   const std::string *key = nullptr,
			   int64_t timeout_us = 5000000, uint64_t flags = 0);

	// Keeps @depth Who calls (with @flags) in flight until @n more
	// completed (or @t).
	bool Load(int n, int depth, std::chrono::milliseconds t,
		  uint64_t flags = 0);

	// Progresses until no call is in flight (or @t).
	bool Drain(std::chrono::milliseconds t);

	// Calls answered OK per server name, from @first_id on.
	std::map<std::string, int> PerServer(uint64_t first_id = 0) const;
	// Calls that failed, from @first_id on.
	int Failed(uint64_t first_id = 0) const;
	// The first failure from @first_id on ("STATUS: message"), "" if none.
	std::string FirstFailure(uint64_t first_id = 0) const;
	// Calls that completed more than once.
	int Twice() const;

	// The channel's backends: how many; "host port" of each; the ports;
	// how many are READY.
	size_t BackendCount() const;
	std::vector<std::string> Backends() const;
	std::set<std::string> BackendPorts() const;
	size_t Ready() const;
	// Progresses until the channel has @n backends (or @t).
	bool WaitBackends(size_t n, std::chrono::milliseconds t);

	// Calls one at a time until one fails with a message that is not
	// "not resolved yet" (or @t): that message, its status in *@st.
	std::string FailureMessage(std::chrono::milliseconds t,
				   zcrpc_status *st);

	// Destroys the channel; how long that took.
	std::chrono::milliseconds Close();

      private:
	static void Done(zcrpc_channel *, const zcrpc_reply *r, void *arg);
};

// A server's own counts (Stats), asked over a plain channel to @addr:@port.
struct ServerCounts {
	uint64_t calls = 0, distinct = 0, duplicates = 0;
	bool ok = false;
};
ServerCounts AskCounts(const std::string &addr, uint16_t port);

// "ipv4:" naming each of @peers on @addr.
std::string Ipv4Target(const std::string &addr,
		       const std::vector<LbPeer> &peers);
