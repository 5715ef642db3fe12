// Helpers of the balancing and resolver tests (lb_util.h): zcrpc_test_lb_peer
// processes, the client that loads them, their counts.
#include "lb_util.h"

#include <algorithm>
#include <cstdio>
#include <utility>

#include "rdma_env.h"

using namespace std::chrono;
using namespace std::chrono_literals;

const char *const kLbWho = "/lb.Test/Who";
const char *const kLbFail = "/lb.Test/Fail";
const char *const kLbStats = "/lb.Test/Stats";

bool LbPeer::Start(const std::string &addr, const std::string &nm, uint16_t p,
		   const std::string &registry, int ttl_s)
{
	name = nm;
	child = std::make_unique<Child>();
	std::vector<std::string> args = {ZCRPC_TEST_LB_PEER, "server", addr,
					 std::to_string(p), nm};
	if (!registry.empty()) {
		args.push_back(registry);
		args.push_back(std::to_string(ttl_s));
	}
	if (!SpawnChild(args, true, child.get()))
		return false;
	std::string line = child->ReadLine(Scaled(10000));
	unsigned v = 0;
	if (std::sscanf(line.c_str(), "listening %u", &v) != 1)
		return false;
	port = static_cast<uint16_t>(v);
	return true;
}

::testing::AssertionResult StartLbPeers(std::vector<LbPeer> &peers, int n,
					const std::string &addr,
					const std::string &registry, int ttl_s)
{
	for (int i = 0; i < n; i++) {
		peers.emplace_back();
		std::string name = "s" + std::to_string(peers.size() - 1);
		if (!peers.back().Start(addr, name, 0, registry, ttl_s))
			return ::testing::AssertionFailure() << "peer " << i;
	}
	return ::testing::AssertionSuccess();
}

LbClient::~LbClient()
{
	zcrpc_channel_destroy(ch);
	zcrpc_worker_destroy(w);
}

zcrpc_status LbClient::Open(const std::string &target, const char *policy,
			    int keepalive_ms)
{
	zcrpc_worker_opts wo;
	zcrpc_worker_opts_init(&wo);
	wo.keepalive_ms = static_cast<uint32_t>(keepalive_ms);
	zcrpc_status st = zcrpc_worker_create(&wo, &w);
	if (st != ZCRPC_OK)
		return st;
	zcrpc_channel_opts o;
	zcrpc_channel_opts_init(&o);
	o.lb_policy = policy;
	o.backoff_initial_ms = 50;
	o.backoff_max_ms = 400;
	o.connect_timeout_ms = 2000;
	return zcrpc_channel_create_target(w, target.c_str(), &o, &ch);
}

void LbClient::Done(zcrpc_channel *, const zcrpc_reply *r, void *arg)
{
	auto *ctx = static_cast<std::pair<LbClient *, uint64_t> *>(arg);
	LbOutcome &o = ctx->first->out[ctx->second];
	if (o.completions++ == 0)
		ctx->first->completed++;
	o.status = r->status;
	o.message = r->message ? r->message : "";
	o.server.assign(static_cast<const char *>(r->data), r->len);
	ctx->first->live--;
	delete ctx;
}

zcrpc_status LbClient::Start(const char *method, const std::string *key,
			     int64_t timeout_us, uint64_t flags)
{
	uint64_t id = next_id++;
	std::string req(reinterpret_cast<const char *>(&id), 8);
	if (key)
		req += *key;
	zcrpc_call_opts co;
	zcrpc_call_opts_init(&co);
	co.timeout_us = timeout_us;
	co.flags = flags;
	if (key) {
		co.hash_key = key->data();
		co.hash_key_len = key->size();
	}
	auto *ctx = new std::pair<LbClient *, uint64_t>(this, id);
	zcrpc_status st = zcrpc_call_async(ch, zcrpc_method_id(method),
					   req.data(), req.size(), &co, Done,
					   ctx, nullptr);
	if (st != ZCRPC_OK)
		delete ctx;
	else
		live++;
	return st;
}

bool LbClient::Load(int n, int depth, milliseconds t, uint64_t flags)
{
	int target = completed + n;
	auto until = steady_clock::now() + t;
	int started = 0;
	while (steady_clock::now() < until) {
		while (live < depth && started < n) {
			if (Start(kLbWho, nullptr, 5000000, flags) != ZCRPC_OK)
				return false;
			started++;
		}
		zcrpc_worker_progress(w, 1);
		if (completed >= target && live == 0)
			return true;
	}
	return false;
}

bool LbClient::Drain(milliseconds t)
{
	return ProgressUntil(w, [&] { return live == 0; }, t);
}

std::map<std::string, int> LbClient::PerServer(uint64_t first_id) const
{
	std::map<std::string, int> m;
	for (auto &kv : out)
		if (kv.first >= first_id && kv.second.status == ZCRPC_OK)
			m[kv.second.server]++;
	return m;
}

int LbClient::Failed(uint64_t first_id) const
{
	int n = 0;
	for (auto &kv : out)
		n += kv.first >= first_id && kv.second.status != ZCRPC_OK;
	return n;
}

std::string LbClient::FirstFailure(uint64_t first_id) const
{
	for (auto &kv : out)
		if (kv.first >= first_id && kv.second.status != ZCRPC_OK)
			return std::string(zcrpc_status_str(kv.second.status)) +
			       ": " + kv.second.message;
	return "";
}

int LbClient::Twice() const
{
	int n = 0;
	for (auto &kv : out)
		n += kv.second.completions > 1;
	return n;
}

size_t LbClient::BackendCount() const
{
	zcrpc_backend_info b[16];
	return zcrpc_channel_get_backends(ch, b, 16, sizeof(b[0]));
}

std::vector<std::string> LbClient::Backends() const
{
	zcrpc_backend_info b[16];
	size_t n = zcrpc_channel_get_backends(ch, b, 16, sizeof(b[0]));
	std::vector<std::string> v;
	for (size_t i = 0; i < n && i < 16; i++)
		v.push_back(std::string(b[i].host) + " " + b[i].port);
	return v;
}

std::set<std::string> LbClient::BackendPorts() const
{
	zcrpc_backend_info b[16];
	size_t n = std::min<size_t>(
		zcrpc_channel_get_backends(ch, b, 16, sizeof(b[0])), 16);
	std::set<std::string> s;
	for (size_t i = 0; i < n; i++)
		s.insert(b[i].port);
	return s;
}

size_t LbClient::Ready() const
{
	zcrpc_backend_info b[16];
	size_t n = std::min<size_t>(
		zcrpc_channel_get_backends(ch, b, 16, sizeof(b[0])), 16);
	size_t up = 0;
	for (size_t i = 0; i < n; i++)
		up += b[i].state == ZCRPC_BACKEND_READY;
	return up;
}

bool LbClient::WaitBackends(size_t n, milliseconds t)
{
	return ProgressUntil(w, [&] { return BackendCount() == n; }, t);
}

std::string LbClient::FailureMessage(milliseconds t, zcrpc_status *st)
{
	auto until = steady_clock::now() + t;
	std::string msg;
	*st = ZCRPC_OK;
	while (steady_clock::now() < until) {
		uint64_t id = next_id;
		if (Start(kLbWho, nullptr, 1000000) != ZCRPC_OK)
			break;
		ProgressUntil(w, [&] { return live == 0; }, Scaled(5000));
		const LbOutcome &o = out[id];
		if (o.completions && o.status != ZCRPC_OK) {
			*st = o.status;
			msg = o.message;
			if (msg.find("not resolved yet") == std::string::npos)
				return msg;
		}
		ProgressUntil(w, [] { return false; }, 50ms);
	}
	return msg;
}

milliseconds LbClient::Close()
{
	auto t0 = steady_clock::now();
	zcrpc_channel_destroy(ch);
	ch = nullptr;
	return duration_cast<milliseconds>(steady_clock::now() - t0);
}

ServerCounts AskCounts(const std::string &addr, uint16_t port)
{
	ServerCounts c;
	zcrpc_worker *w = nullptr;
	zcrpc_channel *ch = nullptr;
	if (zcrpc_worker_create(nullptr, &w) != ZCRPC_OK)
		return c;
	std::string p = std::to_string(port);
	if (zcrpc_channel_create(w, addr.c_str(), p.c_str(), nullptr, &ch) ==
	    ZCRPC_OK) {
		zcrpc_result r;
		if (zcrpc_call(ch, zcrpc_method_id(kLbStats), nullptr, 0,
			       nullptr, &r, sizeof(r)) == ZCRPC_OK) {
			std::string s(static_cast<char *>(r.data), r.len);
			unsigned long long a, b, d;
			if (std::sscanf(s.c_str(),
					"calls %llu distinct %llu "
					"duplicates %llu",
					&a, &b, &d) == 3) {
				c.calls = a, c.distinct = b, c.duplicates = d,
				c.ok = true;
			}
		}
		zcrpc_result_free(&r);
		zcrpc_channel_destroy(ch);
	}
	zcrpc_worker_destroy(w);
	return c;
}

std::string Ipv4Target(const std::string &addr,
		       const std::vector<LbPeer> &peers)
{
	std::string t = "ipv4:";
	for (size_t i = 0; i < peers.size(); i++)
		t += (i ? "," : "") + addr + ":" +
		     std::to_string(peers[i].port);
	return t;
}
