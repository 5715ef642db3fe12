/* zcrpc — the "dns:" resolver, with c-ares:
 *   dns:NAME:PORT              NAME's A and AAAA records, each with PORT
 *   dns:NAME                   NAME's SRV records ("_kv._tcp.example.org"):
 *                              each target's A/AAAA addresses with the
 *                              record's port, lowest priority first
 *   dns://AUTHORITY/NAME[:PORT] the same, asking the DNS server AUTHORITY
 *                              ("IP", "IP:PORT", "[V6]", "[V6]:PORT") only;
 *                              "dns:///NAME..." is the system's
 * An address in place of NAME ("dns:10.0.0.1:80") is the set as it is.
 *
 * DNS may take seconds to answer (or never), and the worker's thread must
 * never wait for it: each resolver has a thread of its own that runs its
 * c-ares channel (poll over c-ares's sockets and an eventfd that wakes it)
 * and reports with zcrpc_resolver_set(), which any thread may call. It
 * resolves at start, again when the channel asks (a backend failed: at
 * most once a second) and when the answer expires: after the smallest TTL
 * of the records used, kept between 1 and 30 s. A failed resolution
 * (NXDOMAIN, a timeout, an answer c-ares cannot parse) is reported as
 * UNAVAILABLE with c-ares's reason, so the channel keeps its set, and is
 * tried again after 1 s, doubling up to 30 s. A name that exists without
 * such records is an empty set (status OK). stop() wakes the thread, which
 * drops what is in flight, and joins it: it never waits for a DNS
 * timeout. */
#include "lb_internal.h"

#include <ares.h>
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#define NS_PER_S 1000000000LL
#define DNS_CLASS_IN 1
#define DNS_TYPE_SRV 33
/* Per try; c-ares doubles it for each round over the servers, so one
 * server that never answers fails the query in 0.5 + 1 s. */
#define DNS_TIMEOUT_MS 500
#define DNS_TRIES 2
/* How long an answer is used: its smallest TTL within these bounds. */
#define TTL_MIN_S 1
#define TTL_MAX_S 30
/* The channel's refreshes (after failures) start a resolution at most
 * this often, so a flapping backend does not turn into a query storm. */
#define REFRESH_GAP_NS (1 * NS_PER_S)
/* Most SRV records followed, per answer. */
#define SRV_MAX 256
#define DNS_NAME_MAX 253
#define AUTH_MAX 64 /* "[V6]:PORT" */

struct dns_res {
	zcrpc_resolver *r;
	char name[ZCRPC_HOST_MAX + 1]; /* a final dot kept, if it had one */
	char port[ZCRPC_PORT_MAX + 1]; /* "": SRV */
	ares_channel ch; /* the thread's once it runs */
	int wake;	 /* eventfd: stop or refresh */
	pthread_t thread;
	pthread_mutex_t mu;
	int stop, refresh; /* under @mu */
	int literal;	   /* an address: reported once, no thread */
	/* the thread's */
	int64_t last_start_ns;
	int backoff_s;
};

struct run;

/* One target of a resolution: NAME itself, or one SRV record's. */
struct target {
	struct run *run;
	char *host; /* the SRV target (NULL: d->name) */
	char port[ZCRPC_PORT_MAX + 1];
	unsigned short prio;
	int status;		  /* of its address lookup */
	struct ares_addrinfo *ai; /* when SUCCESS */
};

/* One resolution, as its callbacks fill it. */
struct run {
	struct dns_res *d;
	int pending; /* queries whose callback has not run */
	int srv_status;
	unsigned ttl; /* smallest seen, seconds */
	struct target *t;
	size_t nt;
};

/* What one report holds (large: on the heap). */
struct report {
	zcrpc_address a[ZCRPC_MAX_BACKENDS];
	char hosts[ZCRPC_MAX_BACKENDS][INET6_ADDRSTRLEN];
	char ports[ZCRPC_MAX_BACKENDS][ZCRPC_PORT_MAX + 1];
};

static pthread_once_t lib_once = PTHREAD_ONCE_INIT;
static int lib_status;

/* c-ares wants one library init per process before any channel; it is
 * never undone, as other channels (of other threads) may be alive. */
static void lib_init(void)
{
	lib_status = ares_library_init(ARES_LIB_INIT_ALL);
}

/* ---- parsing the target ---- */

static int port_ok(const char *s, size_t len)
{
	unsigned v = 0;
	size_t i;

	if (!len || len > 5)
		return 0;
	for (i = 0; i < len; i++) {
		if (s[i] < '0' || s[i] > '9')
			return 0;
		v = v * 10 + (unsigned)(s[i] - '0');
	}
	return v >= 1 && v <= 65535;
}

/* A DNS name: labels of 1..63 letters, digits, '-' or '_' ("_kv._tcp"),
 * 253 bytes at most, an optional final dot. */
static int dns_name_ok(const char *s, size_t len)
{
	size_t i, label = 0;

	if (len && s[len - 1] == '.')
		len--;
	if (!len || len > DNS_NAME_MAX)
		return 0;
	for (i = 0; i < len; i++) {
		char c = s[i];

		if (c == '.') {
			if (!label)
				return 0;
			label = 0;
			continue;
		}
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		      (c >= '0' && c <= '9') || c == '-' || c == '_'))
			return 0;
		if (++label > 63)
			return 0;
	}
	return label > 0;
}

/* "IP", "IP:PORT", "[V6]", "[V6]:PORT" (@len bytes at @s) into c-ares's
 * server list form "IP:PORT" / "[V6]:PORT" in @csv. Nonzero when it does
 * not parse. */
static int parse_authority(const char *s, size_t len, char *csv, size_t cap)
{
	char ip[AUTH_MAX + 1];
	unsigned char buf[16];
	const char *port = "53", *end = s + len, *colon;
	char pbuf[6];
	size_t iplen;
	int v6 = 0;

	if (!len || len > AUTH_MAX)
		return -1;
	if (s[0] == '[') {
		const char *rb = memchr(s, ']', len);

		if (!rb)
			return -1;
		iplen = (size_t)(rb - s - 1);
		memcpy(ip, s + 1, iplen);
		colon = rb + 1 < end ? rb + 1 : NULL;
		if (colon && *colon != ':')
			return -1;
		v6 = 1;
	} else {
		colon = memchr(s, ':', len);
		iplen = colon ? (size_t)(colon - s) : len;
		memcpy(ip, s, iplen);
	}
	ip[iplen] = 0;
	if (inet_pton(v6 ? AF_INET6 : AF_INET, ip, buf) != 1)
		return -1;
	if (colon) {
		size_t pl = (size_t)(end - colon - 1);

		if (!port_ok(colon + 1, pl))
			return -1;
		memcpy(pbuf, colon + 1, pl);
		pbuf[pl] = 0;
		port = pbuf;
	}
	return snprintf(csv, cap, v6 ? "[%s]:%s" : "%s:%s", ip, port) >=
	       (int)cap;
}

/* Splits the target's @name into @d's name and port and the authority's
 * server list (@csv, "" for the system's). Nonzero when it does not
 * parse. */
static int parse_target(const char *name, struct dns_res *d, char *csv,
			size_t cap)
{
	char host[ZCRPC_HOST_MAX + 1];
	const char *colon;
	size_t len;

	csv[0] = 0;
	if (!strncmp(name, "//", 2)) {
		const char *auth = name + 2, *slash = strchr(auth, '/');

		if (!slash)
			return -1;
		if (slash > auth &&
		    parse_authority(auth, (size_t)(slash - auth), csv, cap))
			return -1;
		name = slash + 1;
	}
	len = strlen(name);
	if (!len)
		return -1;
	if (name[0] == '[') { /* a literal, as getaddrinfo would take it */
		if (zcrpc__target_parse_hostport(name, len, 1, host, d->port))
			return -1;
		snprintf(d->name, sizeof(d->name), "%s", host);
		return 0;
	}
	colon = strchr(name, ':');
	if (colon) {
		if (zcrpc__target_parse_hostport(name, len, 0, host, d->port) ||
		    !dns_name_ok(host, strlen(host)))
			return -1;
		snprintf(d->name, sizeof(d->name), "%s", host);
		return 0;
	}
	if (!dns_name_ok(name, len))
		return -1;
	snprintf(d->name, sizeof(d->name), "%s", name);
	d->port[0] = 0;
	return 0;
}

/* ---- one resolution ---- */

static void ttl_seen(struct run *run, int ttl)
{
	unsigned t = ttl < 0 ? 0 : (unsigned)ttl;

	if (t < run->ttl)
		run->ttl = t;
}

static void addr_cb(void *arg, int status, int timeouts,
		    struct ares_addrinfo *ai)
{
	struct target *t = arg;

	(void)timeouts;
	t->run->pending--;
	t->status = status;
	if (status == ARES_SUCCESS)
		t->ai = ai;
	else if (ai)
		ares_freeaddrinfo(ai);
}

/* The offset after the name at @off of the message @a (@len bytes), or
 * -1 when it runs past. */
static int skip_name(const unsigned char *a, int len, int off)
{
	while (off < len) {
		unsigned c = a[off];

		if (!c)
			return off + 1;
		if ((c & 0xc0) == 0xc0) /* a pointer ends the name */
			return off + 2 <= len ? off + 2 : -1;
		if (c & 0xc0)
			return -1;
		off += 1 + (int)c;
	}
	return -1;
}

/* The smallest TTL of the SRV records in the answer @a (@len bytes), or
 * @best when smaller: c-ares's ares_srv_reply has no TTL. c-ares parsed
 * the answer already; this only walks it, refusing to run past. */
static unsigned srv_ttl(const unsigned char *a, int len, unsigned best)
{
	unsigned qd, an, i;
	int off = 12;

	if (len < 12)
		return best;
	qd = (unsigned)a[4] << 8 | a[5];
	an = (unsigned)a[6] << 8 | a[7];
	for (i = 0; i < qd; i++) {
		off = skip_name(a, len, off);
		if (off < 0 || off + 4 > len)
			return best;
		off += 4;
	}
	for (i = 0; i < an; i++) {
		unsigned type;
		uint32_t ttl;

		off = skip_name(a, len, off);
		if (off < 0 || off + 10 > len)
			return best;
		type = (unsigned)a[off] << 8 | a[off + 1];
		ttl = (uint32_t)a[off + 4] << 24 | (uint32_t)a[off + 5] << 16 |
		      (uint32_t)a[off + 6] << 8 | a[off + 7];
		if (ttl > 0x7fffffff) /* RFC 2181 8: as if 0 */
			ttl = 0;
		if (type == DNS_TYPE_SRV && ttl < best)
			best = ttl;
		off += 10 + ((int)a[off + 8] << 8 | a[off + 9]);
		if (off > len)
			return best;
	}
	return best;
}

static void lookup(struct run *run, struct target *t)
{
	struct ares_addrinfo_hints h;

	memset(&h, 0, sizeof(h));
	h.ai_family = AF_UNSPEC;
	h.ai_socktype = SOCK_STREAM; /* each address once */
	t->run = run;
	t->status = ARES_ENOTFOUND;
	run->pending++;
	/* may call back at once (the hosts file, a literal) */
	ares_getaddrinfo(run->d->ch, t->host ? t->host : run->d->name, NULL,
			 &h, addr_cb, t);
}

/* A target "." says the service is not there (RFC 2782); port 0 cannot
 * be connected to. */
static int srv_usable(const struct ares_srv_reply *s)
{
	return s->host[0] && strcmp(s->host, ".") && s->port &&
	       strlen(s->host) <= ZCRPC_HOST_MAX;
}

static void srv_cb(void *arg, int status, int timeouts, unsigned char *abuf,
		   int alen)
{
	struct run *run = arg;
	struct ares_srv_reply *srv = NULL, *s;
	size_t n = 0, i;

	(void)timeouts;
	run->pending--;
	run->srv_status = status;
	if (status != ARES_SUCCESS)
		return; /* EDESTRUCTION too: nothing more is asked */
	status = ares_parse_srv_reply(abuf, alen, &srv);
	run->srv_status = status;
	if (status != ARES_SUCCESS)
		goto out;
	run->ttl = srv_ttl(abuf, alen, run->ttl);
	for (s = srv; s && n < SRV_MAX; s = s->next)
		n += srv_usable(s);
	if (!n)
		goto out;
	run->t = calloc(n, sizeof(*run->t));
	if (!run->t) {
		run->srv_status = ARES_ENOMEM;
		goto out;
	}
	for (s = srv; s && run->nt < n; s = s->next) {
		struct target *t = &run->t[run->nt];

		if (!srv_usable(s))
			continue;
		t->host = strdup(s->host);
		if (!t->host) {
			run->srv_status = ARES_ENOMEM;
			goto out;
		}
		snprintf(t->port, sizeof(t->port), "%u", s->port);
		t->prio = s->priority;
		run->nt++;
	}
	/* Only once all are there: a lookup may call back at once. */
	for (i = 0; i < run->nt; i++)
		lookup(run, &run->t[i]);
out:
	ares_free_data(srv);
}

static int stopping(struct dns_res *d)
{
	int s;

	pthread_mutex_lock(&d->mu);
	s = d->stop;
	pthread_mutex_unlock(&d->mu);
	return s;
}

static void drain(int fd)
{
	uint64_t v;

	while (read(fd, &v, sizeof(v)) == (ssize_t)sizeof(v))
		;
}

/* Runs c-ares until @run's queries all called back: 0, or -1 when stop
 * came first (what was in flight dropped). */
static int drive(struct dns_res *d, struct run *run)
{
	while (run->pending) {
		struct pollfd p[ARES_GETSOCK_MAXNUM + 1];
		ares_socket_t s[ARES_GETSOCK_MAXNUM];
		struct timeval tv, *tvp, cap = {1, 0};
		unsigned bits;
		int i, n = 1, rc, ms;

		p[0].fd = d->wake;
		p[0].events = POLLIN;
		/* The bits as ARES_GETSOCK_READABLE/WRITABLE read them, but
		 * unsigned: their 1 << 31 overflows an int. */
		bits = (unsigned)ares_getsock(d->ch, s, ARES_GETSOCK_MAXNUM);
		for (i = 0; i < ARES_GETSOCK_MAXNUM; i++) {
			short ev = 0;

			if (bits & (1u << i))
				ev |= POLLIN;
			if (bits & (1u << (i + ARES_GETSOCK_MAXNUM)))
				ev |= POLLOUT;
			if (!ev)
				continue;
			p[n].fd = s[i];
			p[n].events = ev;
			n++;
		}
		tvp = ares_timeout(d->ch, &cap, &tv);
		ms = (int)(tvp->tv_sec * 1000 + (tvp->tv_usec + 999) / 1000);
		rc = poll(p, (nfds_t)n, ms);
		if (rc < 0 && errno != EINTR)
			rc = 0; /* only c-ares's timeouts then */
		if (rc > 0 && p[0].revents) {
			drain(d->wake);
			if (stopping(d)) {
				/* every callback runs now (EDESTRUCTION),
				 * while @run is there to take it */
				ares_destroy(d->ch);
				d->ch = NULL;
				return -1;
			}
			rc--;
		}
		if (rc <= 0) { /* its timeouts: retries, failures */
			ares_process_fd(d->ch, ARES_SOCKET_BAD,
					ARES_SOCKET_BAD);
			continue;
		}
		for (i = 1; i < n; i++) {
			short ev = p[i].revents;

			if (!ev)
				continue;
			/* an error is for c-ares's read to find */
			ares_process_fd(d->ch,
					ev & (POLLIN | POLLERR | POLLHUP)
						? p[i].fd
						: ARES_SOCKET_BAD,
					ev & POLLOUT ? p[i].fd
						     : ARES_SOCKET_BAD);
		}
	}
	return 0;
}

static void fail(struct dns_res *d, const char *target, int status)
{
	/* what does not fit the channel's 200 bytes is cut there */
	char why[2 * ZCRPC_HOST_MAX + 64];

	if (target)
		snprintf(why, sizeof(why), "dns: %s: %s: %s", d->name, target,
			 ares_strerror(status));
	else
		snprintf(why, sizeof(why), "dns: %s: %s", d->name,
			 ares_strerror(status));
	zcrpc_resolver_set(d->r, NULL, 0, ZCRPC_UNAVAILABLE, why);
}

/* @nd's address, numeric, into @buf; NULL for a family not IP. */
static const char *ntop(const struct ares_addrinfo_node *nd, char *buf,
			size_t len)
{
	const void *sa = nd->ai_addr;

	if (nd->ai_family == AF_INET)
		return inet_ntop(AF_INET,
				 &((const struct sockaddr_in *)sa)->sin_addr,
				 buf, (socklen_t)len);
	if (nd->ai_family == AF_INET6)
		return inet_ntop(AF_INET6,
				 &((const struct sockaddr_in6 *)sa)->sin6_addr,
				 buf, (socklen_t)len);
	return NULL;
}

/* Reports what @run found; returns how many addresses (-1: a failure). */
static int report(struct dns_res *d, struct run *run)
{
	struct report *rp;
	size_t order[SRV_MAX], i, j, n = 0;
	const struct target *bad = NULL;

	if (run->srv_status == ARES_ENODATA) { /* the name, no records */
		zcrpc_resolver_set(d->r, NULL, 0, ZCRPC_OK, NULL);
		return 0;
	}
	if (run->srv_status != ARES_SUCCESS) {
		fail(d, NULL, run->srv_status);
		return -1;
	}
	rp = malloc(sizeof(*rp));
	if (!rp) {
		fail(d, NULL, ARES_ENOMEM);
		return -1;
	}
	/* lowest priority first, in the answer's order within one */
	for (i = 0; i < run->nt; i++) {
		for (j = i; j > 0 && run->t[order[j - 1]].prio > run->t[i].prio;
		     j--)
			order[j] = order[j - 1];
		order[j] = i;
	}
	for (i = 0; i < run->nt; i++) {
		const struct target *t = &run->t[order[i]];
		const struct ares_addrinfo_node *nd;
		const struct ares_addrinfo_cname *c;

		if (t->status != ARES_SUCCESS) {
			if (t->status != ARES_ENODATA && !bad)
				bad = t;
			continue;
		}
		for (c = t->ai->cnames; c; c = c->next)
			ttl_seen(run, c->ttl);
		for (nd = t->ai->nodes; nd && n < ZCRPC_MAX_BACKENDS;
		     nd = nd->ai_next) {
			if (!ntop(nd, rp->hosts[n], sizeof(rp->hosts[n])))
				continue;
			ttl_seen(run, nd->ai_ttl);
			snprintf(rp->ports[n], sizeof(rp->ports[n]), "%s",
				 t->port);
			rp->a[n].host = rp->hosts[n];
			rp->a[n].port = rp->ports[n];
			n++;
		}
	}
	if (!n && bad) { /* nothing found, and not for want of records */
		free(rp);
		fail(d, bad->host, bad->status);
		return -1;
	}
	zcrpc_resolver_set(d->r, rp->a, n, ZCRPC_OK, NULL);
	free(rp);
	return (int)n;
}

static void run_free(struct run *run)
{
	size_t i;

	for (i = 0; i < run->nt; i++) {
		free(run->t[i].host);
		if (run->t[i].ai)
			ares_freeaddrinfo(run->t[i].ai);
	}
	free(run->t);
}

/* Resolves once and reports: how many seconds the answer stands, or -1
 * when stop came meanwhile. */
static int resolve(struct dns_res *d)
{
	struct run run;
	int n, next;

	memset(&run, 0, sizeof(run));
	run.d = d;
	run.ttl = TTL_MAX_S;
	if (d->port[0]) { /* A/AAAA: one target, the name itself */
		run.srv_status = ARES_SUCCESS;
		run.t = calloc(1, sizeof(*run.t));
		if (!run.t) {
			fail(d, NULL, ARES_ENOMEM);
			return TTL_MIN_S;
		}
		run.nt = 1;
		memcpy(run.t->port, d->port, sizeof(d->port));
		lookup(&run, run.t);
	} else {
		run.pending = 1;
		ares_query(d->ch, d->name, DNS_CLASS_IN, DNS_TYPE_SRV, srv_cb,
			   &run);
	}
	if (drive(d, &run)) {
		run_free(&run);
		return -1;
	}
	n = report(d, &run);
	if (n > 0) {
		next = run.ttl < TTL_MIN_S ? TTL_MIN_S : (int)run.ttl;
		d->backoff_s = TTL_MIN_S;
	} else { /* nothing to use: look again soon, then less often */
		next = d->backoff_s;
		d->backoff_s = d->backoff_s * 2 > TTL_MAX_S ? TTL_MAX_S
							    : d->backoff_s * 2;
	}
	run_free(&run);
	return next;
}

static void *dns_thread(void *arg)
{
	struct dns_res *d = arg;
	int64_t due = zcrpc__now_ns(), now;

	for (;;) {
		struct pollfd p = {d->wake, POLLIN, 0};
		int stop, refresh, next;
		int64_t ms;

		pthread_mutex_lock(&d->mu);
		stop = d->stop;
		refresh = d->refresh;
		d->refresh = 0;
		pthread_mutex_unlock(&d->mu);
		if (stop)
			break;
		if (refresh && d->last_start_ns + REFRESH_GAP_NS < due)
			due = d->last_start_ns + REFRESH_GAP_NS;
		now = zcrpc__now_ns();
		if (now >= due) {
			d->last_start_ns = now;
			next = resolve(d);
			if (next < 0)
				break;
			due = now + next * NS_PER_S;
			continue;
		}
		ms = (due - now + 999999) / 1000000;
		if (poll(&p, 1, (int)ms) > 0)
			drain(d->wake);
	}
	return NULL;
}

static void wake(struct dns_res *d)
{
	uint64_t one = 1;

	/* full only after 2^64 - 2 wakes nobody drained: cannot be */
	if (write(d->wake, &one, sizeof(one)) < 0)
		return;
}

/* ---- the hooks ---- */

static int is_literal(const char *name)
{
	unsigned char buf[16];

	return inet_pton(AF_INET, name, buf) == 1 ||
	       inet_pton(AF_INET6, name, buf) == 1;
}

static zcrpc_status dns_start(zcrpc_resolver *r, const char *name,
			      void **state, void *arg)
{
	struct ares_options ao;
	char csv[AUTH_MAX + 8], *no_domains[1] = {NULL};
	struct dns_res *d;
	sigset_t all, old;
	int mask = ARES_OPT_TIMEOUTMS | ARES_OPT_TRIES, rc;
	zcrpc_status st = ZCRPC_RESOURCE_EXHAUSTED;

	(void)arg;
	d = calloc(1, sizeof(*d));
	if (!d)
		return ZCRPC_RESOURCE_EXHAUSTED;
	if (parse_target(name, d, csv, sizeof(csv))) {
		st = ZCRPC_INVALID_ARGUMENT;
		goto err;
	}
	if (d->port[0] && is_literal(d->name)) { /* nothing to ask DNS */
		zcrpc_address a = {d->name, d->port};

		st = zcrpc_resolver_set(r, &a, 1, ZCRPC_OK, NULL);
		if (st != ZCRPC_OK)
			goto err;
		d->literal = 1;
		*state = d;
		return ZCRPC_OK;
	}
	pthread_once(&lib_once, lib_init);
	if (lib_status != ARES_SUCCESS) {
		st = ZCRPC_INTERNAL;
		goto err;
	}
	d->r = r;
	d->backoff_s = TTL_MIN_S;
	memset(&ao, 0, sizeof(ao));
	ao.timeout = DNS_TIMEOUT_MS;
	ao.tries = DNS_TRIES;
	if (csv[0]) {
		/* That server answers for the name as given: no hosts file,
		 * no search domains of the system's configuration. */
		ao.lookups = (char *)"b";
		ao.domains = no_domains;
		ao.ndomains = 0;
		mask |= ARES_OPT_LOOKUPS | ARES_OPT_DOMAINS;
	}
	rc = ares_init_options(&d->ch, &ao, mask);
	if (rc != ARES_SUCCESS) {
		st = rc == ARES_ENOMEM ? ZCRPC_RESOURCE_EXHAUSTED
				       : ZCRPC_UNAVAILABLE;
		goto err;
	}
	if (csv[0] &&
	    (rc = ares_set_servers_ports_csv(d->ch, csv)) != ARES_SUCCESS) {
		st = rc == ARES_ENOMEM ? ZCRPC_RESOURCE_EXHAUSTED
				       : ZCRPC_INVALID_ARGUMENT;
		goto err_ares;
	}
	d->wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (d->wake < 0)
		goto err_ares;
	if (pthread_mutex_init(&d->mu, NULL))
		goto err_fd;
	/* The thread takes no signal: they are the application's. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	rc = pthread_create(&d->thread, NULL, dns_thread, d);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc)
		goto err_mu;
	pthread_setname_np(d->thread, "zcrpc-dns"); /* for ps and gdb */
	*state = d;
	return ZCRPC_OK;

err_mu:
	pthread_mutex_destroy(&d->mu);
err_fd:
	close(d->wake);
err_ares:
	ares_destroy(d->ch);
err:
	free(d);
	return st;
}

static void dns_refresh(void *state, void *arg)
{
	struct dns_res *d = state;

	(void)arg;
	if (d->literal)
		return;
	pthread_mutex_lock(&d->mu);
	d->refresh = 1;
	pthread_mutex_unlock(&d->mu);
	wake(d);
}

static void dns_stop(void *state, void *arg)
{
	struct dns_res *d = state;

	(void)arg;
	if (d->literal) {
		free(d);
		return;
	}
	pthread_mutex_lock(&d->mu);
	d->stop = 1;
	pthread_mutex_unlock(&d->mu);
	wake(d);
	pthread_join(d->thread, NULL);
	if (d->ch) /* the thread destroyed it when stop found it asking */
		ares_destroy(d->ch);
	close(d->wake);
	pthread_mutex_destroy(&d->mu);
	free(d);
}

const zcrpc_resolver_ops zcrpc__resolve_dns = {
	sizeof(zcrpc_resolver_ops), "dns", dns_start, dns_refresh, dns_stop,
	NULL, 0};
