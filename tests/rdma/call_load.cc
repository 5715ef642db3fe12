// CallLoad (call_load.h): channels keeping verified Echo calls in flight.
#include "call_load.h"

#include "server_thread.h"

using namespace std::chrono;

namespace
{
uint8_t Byte(uint32_t ch, uint64_t seq, size_t k)
{
	return static_cast<uint8_t>(
		((ch + 1) * 0x9E3779B1u + seq * 2654435761u + k * 131u) >> 7);
}
std::vector<uint8_t> Payload(uint32_t ch, uint64_t seq, uint32_t len)
{
	std::vector<uint8_t> p(len);
	for (size_t k = 0; k < len; k++)
		p[k] = Byte(ch, seq, k);
	return p;
}
} // namespace

CallLoad::CallLoad(const std::string &host, uint16_t port,
		   const CallLoadOpts &o)
    : host_(host), port_(std::to_string(port)), o_(o)
{
}

CallLoad::~CallLoad()
{
	Close();
}

void CallLoad::Error(const std::string &e)
{
	std::lock_guard<std::mutex> g(mu_);
	if (first_error_.empty())
		first_error_ = e;
}

std::string CallLoad::FirstError()
{
	std::lock_guard<std::mutex> g(mu_);
	return first_error_;
}

void CallLoad::Done(zcrpc_channel *, const zcrpc_reply *r, void *a)
{
	auto *rec = static_cast<Rec *>(a);
	CallLoad *self = rec->self;
	if (++rec->completions > 1) {
		self->twice++;
		self->Error("call " + std::to_string(rec->seq) +
			    " completed twice");
		return;
	}
	self->inflight_[rec->ch]--;
	if (r->status != ZCRPC_OK) {
		self->failed++;
		self->Error("channel " + std::to_string(rec->ch) + " call " +
			    std::to_string(rec->seq) + ": " +
			    zcrpc_status_str(r->status) + ": " +
			    (r->message ? r->message : ""));
	} else if (r->len != rec->len ||
		   Payload(rec->ch, rec->seq, rec->len) !=
			   std::vector<uint8_t>(
				   static_cast<const uint8_t *>(r->data),
				   static_cast<const uint8_t *>(r->data) +
					   r->len)) {
		self->bad_data++;
		self->Error("channel " + std::to_string(rec->ch) + " call " +
			    std::to_string(rec->seq) +
			    ": reply payload differs");
	} else {
		self->ok++;
	}
	self->completed++;
}

bool CallLoad::Submit(int ch)
{
	uint64_t seq = seq_[ch];
	uint32_t len = static_cast<uint32_t>(
		1 + (seq * 37 + static_cast<uint64_t>(ch) * 11) % o_.max_len);
	std::vector<uint8_t> p = Payload(static_cast<uint32_t>(ch), seq, len);
	recs_.push_back(Rec{this, static_cast<uint32_t>(ch), seq, len, 0});
	zcrpc_call_opts co;
	zcrpc_call_opts_init(&co);
	co.timeout_us = o_.timeout_us;
	zcrpc_status st = zcrpc_call_async(
		chs_[ch], zcrpc_method_id(kServerThreadEcho), p.data(),
		p.size(), &co, Done, &recs_.back(), nullptr);
	if (st != ZCRPC_OK) {
		recs_.pop_back();
		if (st == ZCRPC_RESOURCE_EXHAUSTED && o_.allow_refused) {
			refused++;
			return false;
		}
		failed++;
		Error(std::string("call_async: ") + zcrpc_status_str(st));
		return false;
	}
	seq_[ch]++;
	inflight_[ch]++;
	submitted++;
	return true;
}

void CallLoad::Run(milliseconds warm_timeout)
{
	RunBody(warm_timeout);
	if (state_.load() == 0)
		state_ = -1;
	finished_ = true;
}

void CallLoad::RunBody(milliseconds warm_timeout)
{
	if (zcrpc_worker_create(nullptr, &w_) != ZCRPC_OK) {
		Error("zcrpc_worker_create failed");
		state_ = -1;
		return;
	}
	zcrpc_channel_opts co;
	zcrpc_channel_opts_init(&co);
	co.window = o_.window;
	co.max_calls = 4 * o_.window;
	if (o_.max_pending)
		co.max_pending = o_.max_pending;
	co.src_addr = o_.src.empty() ? nullptr : o_.src.c_str();
	chs_.assign(o_.channels, nullptr);
	inflight_.assign(o_.channels, 0);
	seq_.assign(o_.channels, 0);
	for (int i = 0; i < o_.channels; i++)
		if (zcrpc_channel_create(w_, host_.c_str(), port_.c_str(), &co,
					 &chs_[i]) != ZCRPC_OK) {
			Error("zcrpc_channel_create failed");
			state_ = -1;
			return;
		}
	// Warm-up: one verified call on each channel.
	for (int i = 0; i < o_.channels; i++)
		Submit(i);
	auto end = steady_clock::now() + warm_timeout;
	while (completed.load() < submitted.load() && steady_clock::now() < end)
		zcrpc_worker_progress(w_, 1);
	state_ = ok.load() == static_cast<uint64_t>(o_.channels) ? 1 : -1;
	while (!close_.load()) {
		if (!stop_.load()) {
			for (int i = 0; i < o_.channels; i++)
				while (inflight_[i] < o_.depth && Submit(i)) {
				}
		} else if (!drained_.load() &&
			   completed.load() == submitted.load()) {
			drained_ = true;
		}
		auto t = steady_clock::now();
		zcrpc_worker_progress(w_, 1);
		int64_t ns = duration_cast<nanoseconds>(steady_clock::now() - t)
				     .count();
		if (ns > max_turn_ns.load(std::memory_order_relaxed))
			max_turn_ns = ns;
		if (want_stats_.exchange(false)) {
			zcrpc_worker_get_stats(w_, &stats_, sizeof(stats_));
			have_stats_ = true;
		}
	}
	for (auto *ch : chs_) {
		zcrpc_channel_stats cs;
		zcrpc_channel_get_stats(ch, &cs, sizeof(cs));
		channel_stats.calls_started += cs.calls_started;
		channel_stats.calls_ok += cs.calls_ok;
		channel_stats.calls_failed += cs.calls_failed;
		channel_stats.queue_full += cs.queue_full;
		channel_stats.reconnects += cs.reconnects;
		channel_stats.late_replies += cs.late_replies;
		zcrpc_channel_destroy(ch);
	}
	chs_.clear();
	// Let the CLOSE messages go out before the worker goes.
	auto until = steady_clock::now() + milliseconds(200);
	while (steady_clock::now() < until)
		zcrpc_worker_progress(w_, 1);
	zcrpc_worker_get_stats(w_, &stats_, sizeof(stats_));
}

bool CallLoad::Start(milliseconds warm_timeout)
{
	thread_ = std::thread([this, warm_timeout] { Run(warm_timeout); });
	auto end = steady_clock::now() + warm_timeout + seconds(5);
	while (state_.load() == 0 && steady_clock::now() < end)
		std::this_thread::sleep_for(milliseconds(2));
	return state_.load() == 1;
}

void CallLoad::Stop(milliseconds t)
{
	stop_ = true;
	auto end = steady_clock::now() + t;
	while (!drained_.load() && !finished_.load() &&
	       steady_clock::now() < end)
		std::this_thread::sleep_for(milliseconds(2));
}

zcrpc_worker_stats CallLoad::WorkerStats()
{
	if (!thread_.joinable())
		return stats_;
	have_stats_ = false;
	want_stats_ = true;
	while (!have_stats_.load() && !finished_.load())
		std::this_thread::sleep_for(milliseconds(1));
	return stats_;
}

void CallLoad::Close()
{
	stop_ = true;
	close_ = true;
	if (thread_.joinable())
		thread_.join();
	if (w_) {
		zcrpc_worker_destroy(w_);
		w_ = nullptr;
	}
}
