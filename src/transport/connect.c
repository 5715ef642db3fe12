/* zcrpc — the active side. rdma_getaddrinfo + rdma_create_ep resolve the
 * address and route synchronously (librdmacm uses fixed 2 s timeouts each),
 * so they run on a setup thread; the worker enforces the connect deadline,
 * and an endpoint that finishes after it is destroyed unused. The finished
 * id gets its QP on the worker's PD, is migrated to the worker's CM channel
 * and rdma_connect()ed, so ESTABLISHED/REJECTED/UNREACHABLE arrive as
 * events. */
#include "internal.h"

#include <errno.h>
#include <stddef.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hello.h"
#include "../core/abi.h"

/* rdma_create_ep's steps for an active endpoint (a synchronous id, its
 * address and route resolved), with the ToS set before the route is:
 * rdma_create_ep offers no point in between. -1 with errno. */
static int create_ep_tos(struct zcrpc__job *job, struct rdma_addrinfo *res)
{
	struct rdma_cm_id *id;
	int e;

	if (rdma_create_id(NULL, &id, NULL, RDMA_PS_TCP))
		return -1;
	if (rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &job->tos,
			    sizeof(job->tos)) ||
	    rdma_resolve_addr(id, res->ai_src_addr, res->ai_dst_addr, 2000) ||
	    rdma_resolve_route(id, 2000)) {
		e = errno;
		rdma_destroy_id(id);
		errno = e;
		return -1;
	}
	job->id = id;
	return 0;
}

static void *job_main(void *arg)
{
	struct zcrpc__job *job = arg;
	zcrpc_worker *w = job->w;
	struct rdma_addrinfo hints, *res = NULL;
	uint64_t one = 1;
	int rc;

	memset(&hints, 0, sizeof(hints));
	hints.ai_port_space = RDMA_PS_TCP;
	hints.ai_qp_type = IBV_QPT_RC;
	if (job->src_addr) {
		struct rdma_addrinfo shints = hints, *sres = NULL;

		shints.ai_flags = RAI_PASSIVE;
		rc = rdma_getaddrinfo(job->src_addr, NULL, &shints, &sres);
		if (rc) {
			job->err = rc == -1 ? errno : rc;
			snprintf(job->detail, sizeof(job->detail),
				 "bad source address %s", job->src_addr);
			goto done;
		}
		hints.ai_src_addr = sres->ai_src_addr;
		hints.ai_src_len = sres->ai_src_len;
		rc = rdma_getaddrinfo(job->host, job->port, &hints, &res);
		rdma_freeaddrinfo(sres);
	} else {
		rc = rdma_getaddrinfo(job->host, job->port, &hints, &res);
	}
	if (rc) {
		job->err = rc == -1 ? errno : rc;
		snprintf(job->detail, sizeof(job->detail),
			 "cannot resolve %s port %s: %s", job->host, job->port,
			 rc == -1 ? strerror(errno) : gai_strerror(rc));
		goto done;
	}
	/* NULL PD and QP attributes: the worker makes the QP itself. */
	if (job->tos ? create_ep_tos(job, res)
		     : rdma_create_ep(&job->id, res, NULL, NULL)) {
		job->err = errno ? errno : EHOSTUNREACH;
		job->id = NULL;
		snprintf(job->detail, sizeof(job->detail),
			 "no RDMA route to %s port %s: %s", job->host,
			 job->port, strerror(job->err));
	}
	rdma_freeaddrinfo(res);
done:
	pthread_mutex_lock(&w->job_lock);
	job->done_next = w->done_jobs;
	w->done_jobs = job;
	pthread_mutex_unlock(&w->job_lock);
	if (write(w->evfd, &one, sizeof(one)) < 0) {
		/* eventfd overflow cannot happen with 1 per job */
	}
	return NULL;
}

static void job_free(struct zcrpc__job *job)
{
	if (job->id)
		rdma_destroy_ep(job->id);
	free(job->host);
	free(job->port);
	free(job->src_addr);
	free(job);
}

void zcrpc__job_abandon(zcrpc_conn *c)
{
	if (!c->job)
		return;
	pthread_mutex_lock(&c->w->job_lock);
	c->job->conn = NULL;
	pthread_mutex_unlock(&c->w->job_lock);
	c->job = NULL;
}

/* Continues a connection whose resolution finished: QP, receives, migrate,
 * rdma_connect with the handshake. */
static void job_continue(zcrpc_conn *c, struct zcrpc__job *job)
{
	struct rdma_conn_param param;
	uint8_t pdata[ZCRPC_HELLO_MAX_CONNECT];
	struct rdma_cm_id *id = job->id;
	zcrpc_status st;

	c->job = NULL;
	if (job->err) {
		zcrpc__conn_fail(c, ZCRPC_UNAVAILABLE, "%s", job->detail);
		return;
	}
	if (job->pinned && zcrpc__pin_check(c->w->ctx, &job->pin, id, job->detail,
					    sizeof(job->detail))) {
		zcrpc__conn_fail(c, ZCRPC_FAILED_PRECONDITION, "%s", job->detail);
		return; /* the job's id goes with the job */
	}
	job->id = NULL; /* the connection owns it now */
	st = zcrpc__conn_setup(c, id);
	if (st != ZCRPC_OK) {
		zcrpc__conn_fail(c, st, "connection setup failed");
		return;
	}
	if (rdma_migrate_id(id, c->w->cm_ch)) {
		zcrpc__conn_fail(c, ZCRPC_INTERNAL, "rdma_migrate_id: %s",
				 strerror(errno));
		return;
	}
	c->migrated = 1;
	zcrpc__conn_fill_param(c, &param, pdata, sizeof(pdata),
			       ZCRPC_HELLO_CONNECT);
	c->connect_sent_ns = zcrpc__now_ns();
	if (rdma_connect(id, &param)) {
		zcrpc__conn_fail(c, zcrpc_status_from_errno(errno) == ZCRPC_INVALID_ARGUMENT
					    ? ZCRPC_INVALID_ARGUMENT
					    : ZCRPC_UNAVAILABLE,
				 "rdma_connect: %s", strerror(errno));
	}
}

void zcrpc__jobs_handle_done(zcrpc_worker *w)
{
	struct zcrpc__job *done, *job;

	pthread_mutex_lock(&w->job_lock);
	done = w->done_jobs;
	w->done_jobs = NULL;
	pthread_mutex_unlock(&w->job_lock);

	while ((job = done)) {
		zcrpc_conn *c;

		done = job->done_next;
		pthread_join(job->thread, NULL);
		zcrpc__list_remove(&job->link);
		c = job->conn; /* no lock needed: the thread has exited */
		if (c)
			job_continue(c, job);
		job_free(job);
	}
}

void zcrpc__jobs_join_all(zcrpc_worker *w)
{
	struct zcrpc__list *it;

	while ((it = zcrpc__list_first(&w->jobs))) {
		struct zcrpc__job *job =
			zcrpc__container_of(it, struct zcrpc__job, link);

		zcrpc__list_remove(it);
		pthread_join(job->thread, NULL);
		job_free(job);
	}
	w->done_jobs = NULL;
}

void zcrpc_connect_opts_init_sized(zcrpc_connect_opts *caller, size_t size)
{
	zcrpc_connect_opts d, *opts = &d;

	memset(opts, 0, sizeof(*opts));
	opts->size = sizeof(*opts);
	opts->timeout_ms = 10000;
	zcrpc__abi_init(caller, size, opts, sizeof(*opts));
}

zcrpc_status zcrpc_connect(zcrpc_worker *w, const char *host,
			   const char *port, const zcrpc_connect_opts *opts,
			   const zcrpc_conn_handlers *handlers,
			   zcrpc_conn **out)
{
	zcrpc_connect_opts o;
	zcrpc_conn_handlers h;
	struct zcrpc__job *job;
	zcrpc_conn *c;
	zcrpc_status st;

	if (!w || !host || !port || !handlers || !out ||
	    zcrpc__copy_handlers(&h, handlers) != ZCRPC_OK)
		return ZCRPC_INVALID_ARGUMENT;
	zcrpc_connect_opts_init(&o);
	if (opts) {
		if (ZCRPC__ABI_IN(&o, opts, ZCRPC__MIN_CONNECT_OPTS) !=
			    ZCRPC_OK ||
		    o.timeout_ms <= 0)
			return ZCRPC_INVALID_ARGUMENT;
		if ((o.recv_depth && (o.recv_depth < ZCRPC_MIN_QUEUE_DEPTH ||
				      o.recv_depth > ZCRPC_MAX_QUEUE_DEPTH)) ||
		    o.send_depth > ZCRPC_MAX_QUEUE_DEPTH || o.tos > 255)
			return ZCRPC_INVALID_ARGUMENT;
	}
	job = calloc(1, sizeof(*job));
	if (!job)
		return ZCRPC_RESOURCE_EXHAUSTED;
	job->host = strdup(host);
	job->port = strdup(port);
	if (o.device) {
		char why[200];

		if (o.src_addr) {
			job_free(job);
			zcrpc__set_last_error("a pinned device and a source address "
					      "exclude each other");
			return ZCRPC_INVALID_ARGUMENT;
		}
		st = zcrpc__pin_source(w->ctx, o.device, o.port, o.gid_index,
				       &job->pin, why, sizeof(why));
		if (st != ZCRPC_OK) {
			job_free(job);
			zcrpc__set_last_error("%s", why);
			return st;
		}
		job->pinned = 1;
		o.src_addr = job->pin.src;
	}
	job->src_addr = o.src_addr ? strdup(o.src_addr) : NULL;
	job->tos = (uint8_t)o.tos;
	if (!job->host || !job->port || (o.src_addr && !job->src_addr))
		goto err_job;
	c = zcrpc__conn_alloc(w, &h);
	if (!c)
		goto err_job;
	st = zcrpc__auth_client_init(c, o.psk, o.psk_len, o.identity);
	if (st != ZCRPC_OK) {
		zcrpc__conn_free(c);
		job_free(job);
		return st;
	}
	c->timeout_ms = o.timeout_ms;
	c->recv_depth = o.recv_depth;
	c->sq_depth = o.send_depth;
	c->job = job;
	job->conn = c;
	job->w = w;
	if (pthread_create(&job->thread, NULL, job_main, job))
		goto err_conn;
	zcrpc__list_push_front(&w->jobs, &job->link);
	c->connect_start_ns = zcrpc__now_ns();
	zcrpc__conn_set_deadline(c, c->connect_start_ns +
					    (int64_t)o.timeout_ms * 1000000LL);
	*out = c;
	return ZCRPC_OK;

err_conn:
	zcrpc__conn_free(c);
err_job:
	job_free(job);
	return ZCRPC_RESOURCE_EXHAUSTED;
}
