/* zcrpc — the bodies of the transport's test hooks (test_hooks.h): fault
 * injection and diagnosis for the test suites. Built only into
 * zcrpc_internal, the library the tests link (ZCRPC_TESTING, the
 * ZCRPC_TEST_SOURCES of CMakeLists.txt); the shipped libzcrpc has none of
 * it (unit.no_test_hooks_in_libzcrpc checks). The library reads what these
 * set at the test points of internal.h. */
#include "internal.h"

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

static atomic_int next_cqe;  /* zcrpc__test_next_cq_entries; 0 = normal */
static uint32_t write_piece; /* zcrpc__test_write_piece; 0 = the device's */
static int zero_writes_ok;   /* zcrpc__test_allow_zero_writes */

/* ---- what the library reads -------------------------------------------- */

uint32_t zcrpc__testing_cq_entries(uint32_t cqe)
{
	int small = atomic_exchange(&next_cqe, 0);

	return small > 0 ? (uint32_t)small : cqe; /* an undersized CQ */
}

uint32_t zcrpc__testing_write_piece(uint32_t own)
{
	return write_piece && write_piece < own ? write_piece : own;
}

int zcrpc__testing_zero_writes(void)
{
	return zero_writes_ok;
}

/* ---- the hooks ---------------------------------------------------------- */

void zcrpc__test_next_cq_entries(int entries)
{
	atomic_store(&next_cqe, entries);
}

void zcrpc__test_write_piece(uint32_t bytes)
{
	write_piece = bytes;
}

void zcrpc__test_allow_zero_writes(int on)
{
	zero_writes_ok = on;
}

void zcrpc__worker_test_auth_stranger(zcrpc_worker *w, int on)
{
	if (w)
		w->test_auth_stranger = on;
}

void zcrpc__worker_test_clear_features(zcrpc_worker *w, uint32_t bits)
{
	if (w)
		w->test_no_features = bits;
}

zcrpc_status zcrpc__conn_test_break_qp(zcrpc_conn *c)
{
	struct ibv_qp_attr attr;

	if (!c || !c->id || !c->id->qp || c->torn_down)
		return ZCRPC_INVALID_ARGUMENT;
	memset(&attr, 0, sizeof(attr));
	attr.qp_state = IBV_QPS_ERR;
	if (ibv_modify_qp(c->id->qp, &attr, IBV_QP_STATE))
		return ZCRPC_INTERNAL;
	c->test_broken = 1;
	c->disconnected = 1; /* never rdma_disconnect */
	zcrpc__conn_clear_deadline(c);
	return ZCRPC_OK;
}

zcrpc_status zcrpc__conn_test_no_flow_control(zcrpc_conn *c)
{
	if (!c || c->state != ZCRPC_CONN_ESTABLISHED || c->closing)
		return ZCRPC_FAILED_PRECONDITION;
	c->credits += 1u << 20;
	c->peer_recv_depth += 1u << 20;
	c->test_no_flow = 1; /* the peer's credit returns are not checked */
	return ZCRPC_OK;
}

zcrpc_status zcrpc__conn_test_auth(zcrpc_conn *c, int mode,
				   const uint8_t *proof)
{
	if (!c || !c->auth || c->passive || mode < ZCRPC_AUTH_TEST_NORMAL ||
	    mode > ZCRPC_AUTH_TEST_PROOF ||
	    (mode == ZCRPC_AUTH_TEST_PROOF && !proof))
		return ZCRPC_INVALID_ARGUMENT;
	c->test_auth_mode = (uint8_t)mode;
	if (proof)
		memcpy(c->test_auth_proof, proof, ZCRPC_AUTH_PROOF_LEN);
	return ZCRPC_OK;
}

zcrpc_status zcrpc__conn_test_auth_sent(const zcrpc_conn *c, uint8_t *proof)
{
	const uint8_t *sent = c ? zcrpc__auth_sent_proof(c) : NULL;

	if (!sent || !proof)
		return ZCRPC_INVALID_ARGUMENT;
	memcpy(proof, sent, ZCRPC_AUTH_PROOF_LEN);
	return ZCRPC_OK;
}

uint64_t zcrpc__worker_test_epoll_reads(const zcrpc_worker *w)
{
	return w->epoll_reads;
}

zcrpc_status zcrpc__worker_test_async_event(zcrpc_worker *w, zcrpc_conn *c,
					    enum ibv_event_type type)
{
	if (!w || !c || !c->dev || !c->id || !c->id->qp)
		return ZCRPC_INVALID_ARGUMENT;
	zcrpc__worker_async_event(w, c->dev->idx, type, c->id->qp->qp_num,
				  type == IBV_EVENT_CQ_ERR ? (const void *)c->cq
							   : NULL,
				  c->id->port_num);
	return ZCRPC_OK;
}

zcrpc_status zcrpc__worker_test_port_event(zcrpc_worker *w, zcrpc_conn *c,
					   int port, enum ibv_event_type type)
{
	if (!w || !c || !c->dev ||
	    (type != IBV_EVENT_PORT_ERR && type != IBV_EVENT_PORT_ACTIVE))
		return ZCRPC_INVALID_ARGUMENT;
	zcrpc__worker_async_event(w, c->dev->idx, type, 0, NULL, port);
	return ZCRPC_OK;
}

/* Long for its one fprintf of every field a hang diagnosis needs. */
void zcrpc__worker_test_dump(zcrpc_worker *w, FILE *out)
{
	struct zcrpc__list *it;
	zcrpc_conn *c;
	int64_t now = zcrpc__now_ns();

	fprintf(out, "worker: next_keepalive in %lld ms\n",
		w->keepalive.due_ns
			? (long long)((w->keepalive.due_ns - now) / 1000000)
			: -1LL);
	zcrpc__foreach_conn(c, it, w) {
		struct zcrpc__write_op *op;
		int nwq = 0;

		for (op = c->wq; op; op = op->next)
			nwq++;
		fprintf(out,
			"conn %p: state %d closing %u drain %u dead %u torn %u broken %u "
			"ka_out %u idle %lld ms sq %llu..%llu posted to %llu (room %d, mw.used %u, "
			"inv waiting %d) wq %d credits %u owed %u detail '%s'\n",
			(void *)c, (int)c->state, c->closing, c->drain_close, c->dead,
			c->torn_down, c->test_broken, c->ka_outstanding,
			(long long)((now - c->last_active_ns) / 1000000),
			(unsigned long long)c->sq_head, (unsigned long long)c->sq_tail,
			(unsigned long long)c->sq_posted,
			c->sq ? zcrpc__sq_room(c) : -1, c->mw.used,
			c->mw.inv_head != NULL, nwq, c->credits, c->owed, c->detail);
	}
}
