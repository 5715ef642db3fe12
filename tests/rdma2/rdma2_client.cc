#include "rdma2_client.h"

#include "../../src/transport/test_hooks.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "rdma2_env.h"

using namespace std::chrono;

Rdma2Client::Rdma2Client(const std::string &host, const std::string &port,
			 const zcrpc_worker_opts &wo, int connect_timeout_ms)
	: wo_(wo)
{
	if (zcrpc_worker_create(&wo_, &w_) != ZCRPC_OK)
		return;
	zcrpc_channel_opts co;
	zcrpc_channel_opts_init(&co);
	co.connect_timeout_ms = connect_timeout_ms;
	co.backoff_initial_ms = 100;
	co.backoff_max_ms = 500;
	if (zcrpc_channel_create(w_, host.c_str(), port.c_str(), &co, &ch_) != ZCRPC_OK)
		ch_ = nullptr;
}

Rdma2Client::~Rdma2Client()
{
	zcrpc_channel_destroy(ch_);
	zcrpc_worker_destroy(w_);
}

uint8_t Rdma2Client::Pattern(uint32_t seed, size_t i)
{
	uint32_t x = seed * 2654435761u + static_cast<uint32_t>(i) * 40503u;
	return static_cast<uint8_t>((x >> 13) ^ (x >> 24) ^ (i >> 8));
}

void Rdma2Client::Fill(void *dst, size_t len, void *ctx)
{
	auto *c = static_cast<TrackedCall *>(ctx);
	auto *p = static_cast<uint8_t *>(dst);
	size_t from = 0;
	if (c->hold_ms) {
		memcpy(p, &c->hold_ms, 4);
		from = 4;
	}
	for (size_t i = from; i < len; i++)
		p[i] = Pattern(c->seed, i);
}

zcrpc_status Rdma2Client::Start(size_t len, int64_t timeout_us, uint32_t hold_ms)
{
	calls_.emplace_back();
	TrackedCall &c = calls_.back();
	c.owner = this;
	c.len = hold_ms && len < 4 ? 4 : len;
	c.seed = next_seed_++;
	c.hold_ms = hold_ms;
	zcrpc_call_opts o;
	zcrpc_call_opts_init(&o);
	o.timeout_us = timeout_us;
	zcrpc_status st = zcrpc_call_start(ch_, hold_ms ? HoldMethod() : EchoMethod(), c.len,
					   Fill, &c, &o, OnReply, &c, nullptr);
	if (st != ZCRPC_OK)
		calls_.pop_back();
	return st;
}

void Rdma2Client::OnReply(zcrpc_channel *, const zcrpc_reply *r, void *arg)
{
	auto *c = static_cast<TrackedCall *>(arg);
	if (c->callbacks++ == 0)
		c->owner->completed_++;
	c->status = r->status;
	c->message = r->message ? r->message : "";
	c->done_at = steady_clock::now();
	if (r->status != ZCRPC_OK) {
		c->owner->failed_++;
		return;
	}
	auto *p = static_cast<const uint8_t *>(r->data);
	if (r->len != c->len || r->attachment_len != 0) {
		c->corrupt = true;
		return;
	}
	size_t from = c->hold_ms ? 4 : 0;
	if (from && memcmp(p, &c->hold_ms, 4) != 0)
		c->corrupt = true;
	for (size_t i = from; i < r->len && !c->corrupt; i++)
		c->corrupt = p[i] != Pattern(c->seed, i);
}

void Rdma2Client::Progress()
{
	// A short sleep when idle: guest A has one vCPU, shared with the
	// control CLI the tests run meanwhile.
	zcrpc_worker_progress(w_, 2);
	while (pump_n_ && !failed_ && outstanding() < pump_n_)
		if (Start(pump_len_, pump_timeout_us_) != ZCRPC_OK)
			break;
}

bool Rdma2Client::ProgressUntil(const std::function<bool()> &done, milliseconds timeout)
{
	auto end = steady_clock::now() + timeout;
	while (!done() && steady_clock::now() < end)
		Progress();
	return done();
}

int Rdma2Client::CtlWhileProgressing(const std::string &args, steady_clock::time_point *started,
				     steady_clock::time_point *finished)
{
	auto t0 = steady_clock::now();
	auto f = std::async(std::launch::async, [args] { return VmCtl(args); });
	while (f.wait_for(seconds(0)) != std::future_status::ready)
		Progress();
	if (started)
		*started = t0;
	if (finished)
		*finished = steady_clock::now();
	return f.get();
}

int Rdma2Client::Twice() const
{
	int n = 0;
	for (const auto &c : calls_)
		n += c.callbacks > 1;
	return n;
}

int Rdma2Client::Corrupt() const
{
	int n = 0;
	for (const auto &c : calls_)
		n += c.corrupt;
	return n;
}

void Rdma2Client::Dump() const
{
	zcrpc__channel_test_dump(ch_, stderr);
	zcrpc__worker_test_dump(w_, stderr);
	fflush(stderr);
	if (system("grep -H . /sys/class/infiniband/*/ports/1/hw_counters/* 1>&2; "
		   "ip -s link show 1>&2; tc -s qdisc show 1>&2") != 0)
		std::fprintf(stderr, "(diagnostics incomplete)\n");
}
