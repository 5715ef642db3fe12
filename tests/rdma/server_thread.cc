// ServerThread (server_thread.h): an Echo server on its own worker and thread.
#include "server_thread.h"

#include <algorithm>

const char *const kServerThreadEcho = "/zcrpc.test.ServerThread/Echo";

bool ServerThread::Start(const std::string &addr, zcrpc_server_opts o,
			 const zcrpc_worker_opts *wo)
{
	o.on_connect = [](zcrpc_server *, zcrpc_conn *c, void *a) {
		auto *self = static_cast<ServerThread *>(a);
		std::lock_guard<std::mutex> g(self->mu_);
		self->conns_.push_back(c);
		self->connects++;
	};
	o.on_disconnect = [](zcrpc_server *, zcrpc_conn *c, zcrpc_status,
			     void *a) {
		auto *self = static_cast<ServerThread *>(a);
		std::lock_guard<std::mutex> g(self->mu_);
		self->conns_.erase(std::remove(self->conns_.begin(),
					       self->conns_.end(), c),
				   self->conns_.end());
		self->disconnects++;
	};
	o.arg = this;
	if (zcrpc_worker_create(wo, &w) != ZCRPC_OK ||
	    zcrpc_server_create(w, &o, &s) != ZCRPC_OK ||
	    zcrpc_server_register(s, kServerThreadEcho, Echo, this) !=
		    ZCRPC_OK ||
	    zcrpc_server_listen(s, addr.c_str(), "0") != ZCRPC_OK)
		return false;
	thread_ = std::thread([this] {
		while (!stop_.load(std::memory_order_relaxed)) {
			auto t = std::chrono::steady_clock::now();
			zcrpc_worker_progress(w, 1);
			int64_t ns =
				std::chrono::duration_cast<
					std::chrono::nanoseconds>(
					std::chrono::steady_clock::now() - t)
					.count();
			if (ns > max_turn_ns.load(std::memory_order_relaxed))
				max_turn_ns = ns;
			zcrpc_worker_stats st;
			zcrpc_worker_get_stats(w, &st, sizeof(st));
			if (st.handshakes >
			    max_handshakes_seen.load(std::memory_order_relaxed))
				max_handshakes_seen = st.handshakes;
		}
	});
	return true;
}

void ServerThread::OnWorker(const std::function<void()> &f)
{
	if (!thread_.joinable()) {
		f();
		return;
	}
	struct Job {
		const std::function<void()> *f;
		std::atomic<bool> done{false};
	} job{&f};
	if (zcrpc_worker_post(
		    w,
		    [](zcrpc_worker *, void *a) {
			    auto *j = static_cast<Job *>(a);
			    (*j->f)();
			    j->done = true;
		    },
		    &job) != ZCRPC_OK)
		return;
	while (!job.done.load())
		std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

zcrpc_worker_stats ServerThread::WorkerStats()
{
	zcrpc_worker_stats ws{};
	OnWorker([&] { zcrpc_worker_get_stats(w, &ws, sizeof(ws)); });
	return ws;
}

zcrpc_server_stats ServerThread::ServerStats()
{
	zcrpc_server_stats ss{};
	OnWorker([&] { zcrpc_server_get_stats(s, &ss, sizeof(ss)); });
	return ss;
}

bool ServerThread::WaitStats(
	const std::function<bool(const zcrpc_worker_stats &)> &pred,
	std::chrono::milliseconds t)
{
	auto end = std::chrono::steady_clock::now() + t;
	while (!pred(WorkerStats()) && std::chrono::steady_clock::now() < end)
		std::this_thread::sleep_for(std::chrono::milliseconds(5));
	return pred(WorkerStats());
}

std::vector<zcrpc_conn *> ServerThread::Conns()
{
	std::lock_guard<std::mutex> g(mu_);
	return conns_;
}

std::string ServerThread::Error()
{
	std::string e;
	OnWorker([&] { e = zcrpc_worker_get_error(w); });
	return e;
}

ServerThread::~ServerThread()
{
	stop_ = true;
	if (thread_.joinable())
		thread_.join();
	zcrpc_server_destroy(s);
	zcrpc_worker_destroy(w);
}

void ServerThread::Echo(zcrpc_server_call *c, const zcrpc_request *r, void *)
{
	zcrpc_server_call_reply(c, ZCRPC_OK, nullptr, r->data, r->len, nullptr);
}
