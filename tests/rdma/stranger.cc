// A server that does not speak zcrpc (stranger.h).
#include "stranger.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <rdma/rdma_cma.h>

#include <cstring>
#include <set>

namespace
{
// What an HTTP server would say to a stranger; 32+ bytes, so a zcrpc
// client reads it as a whole handshake and finds its magic wrong.
const char kGarbage[] = "HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n";
} // namespace

Stranger::~Stranger() { Stop(); }

bool Stranger::Start(const std::string &addr, Mode mode)
{
	mode_ = mode;
	ch_ = rdma_create_event_channel();
	if (!ch_)
		return false;
	if (rdma_create_id(ch_, &listen_, nullptr, RDMA_PS_TCP))
		return false;
	sockaddr_in sa{};
	sa.sin_family = AF_INET;
	if (inet_pton(AF_INET, addr.c_str(), &sa.sin_addr) != 1 ||
	    rdma_bind_addr(listen_, reinterpret_cast<sockaddr *>(&sa)) ||
	    rdma_listen(listen_, 16))
		return false;
	port_ = ntohs(rdma_get_src_port(listen_));
	thread_ = std::thread([this] { Run(); });
	return true;
}

void Stranger::Run()
{
	std::set<rdma_cm_id *> conns;

	auto drop = [&](rdma_cm_id *id) {
		if (id->qp)
			rdma_destroy_qp(id);
		rdma_destroy_id(id);
		conns.erase(id);
	};
	while (!stop_.load()) {
		pollfd p{ch_->fd, POLLIN, 0};
		if (poll(&p, 1, 50) <= 0)
			continue;
		rdma_cm_event *ev = nullptr;
		if (rdma_get_cm_event(ch_, &ev))
			continue;
		rdma_cm_id *id = ev->id;
		rdma_cm_event_type type = ev->event;
		rdma_ack_cm_event(ev);
		switch (type) {
		case RDMA_CM_EVENT_CONNECT_REQUEST: {
			answered_++;
			rdma_conn_param cp{};
			if (mode_ != kAcceptWithNothing) {
				cp.private_data = kGarbage;
				cp.private_data_len = sizeof(kGarbage) - 1;
			}
			if (mode_ == kRejectWithGarbage) {
				rdma_reject(id, cp.private_data, cp.private_data_len);
				rdma_destroy_id(id);
				break;
			}
			ibv_qp_init_attr qa{};
			qa.qp_type = IBV_QPT_RC;
			qa.cap.max_send_wr = qa.cap.max_recv_wr = 1;
			qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
			conns.insert(id);
			cp.responder_resources = cp.initiator_depth = 1;
			cp.rnr_retry_count = 7;
			if (rdma_create_qp(id, nullptr, &qa) || rdma_accept(id, &cp)) {
				rdma_reject(id, nullptr, 0);
				drop(id);
			}
			break;
		}
		case RDMA_CM_EVENT_DISCONNECTED:
		case RDMA_CM_EVENT_CONNECT_ERROR:
		case RDMA_CM_EVENT_UNREACHABLE:
		case RDMA_CM_EVENT_REJECTED:
			if (conns.count(id)) {
				ended_++;
				drop(id);
			}
			break;
		default: // ESTABLISHED, TIMEWAIT_EXIT
			break;
		}
	}
	while (!conns.empty())
		drop(*conns.begin());
}

void Stranger::Stop()
{
	stop_ = true;
	if (thread_.joinable())
		thread_.join();
	if (listen_)
		rdma_destroy_id(listen_);
	listen_ = nullptr;
	if (ch_)
		rdma_destroy_event_channel(ch_);
	ch_ = nullptr;
}
