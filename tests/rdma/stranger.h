// A server that does not speak zcrpc: a raw rdma_cm listener on its own
// thread that answers every connect request its way — accepting with
// another protocol's private data (or none), or rejecting with it — so that
// a channel meets a backend that answers with the wrong protocol
// (test_balance.cc).
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <thread>

struct rdma_event_channel;
struct rdma_cm_id;

class Stranger
{
      public:
	enum Mode {
		kAcceptWithGarbage, // accepts, private data "HTTP/1.1 400 ..."
		kAcceptWithNothing, // accepts, no private data (as rping does)
		kRejectWithGarbage, // rejects, private data "HTTP/1.1 400 ..."
	};

	Stranger() = default;
	Stranger(const Stranger &) = delete;
	Stranger &operator=(const Stranger &) = delete;
	~Stranger(); // Stop()

	// Listens on @addr (an ephemeral port) and answers in @mode from a
	// thread of its own.
	bool Start(const std::string &addr, Mode mode);
	// Joins the thread and destroys every id it still holds.
	void Stop();

	uint16_t port() const { return port_; }
	// Connect requests answered so far; connections it saw end.
	int answered() const { return answered_.load(); }
	int ended() const { return ended_.load(); }

      private:
	void Run();

	Mode mode_ = kAcceptWithGarbage;
	rdma_event_channel *ch_ = nullptr;
	rdma_cm_id *listen_ = nullptr;
	uint16_t port_ = 0;
	std::atomic<bool> stop_{false};
	std::atomic<int> answered_{0}, ended_{0};
	std::thread thread_;
};
