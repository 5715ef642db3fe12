/* zcrpc — target strings and the process's resolvers: "SCHEME:NAME" names
 * a registered resolver (built in: ipv4, ipv6 and file; the application's
 * through zcrpc_resolver_register), "HOST:PORT" one server. The static
 * schemes (ipv4, ipv6, one HOST:PORT) are resolvers too, reporting their
 * list once at start. */
#include "lb_internal.h"

#include <arpa/inet.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define MAX_RESOLVERS 16
#define SCHEME_MAX 31

struct reg {
	zcrpc_resolver_ops ops;
	char scheme[SCHEME_MAX + 1];
};

static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static struct reg regs[MAX_RESOLVERS];
static size_t n_regs;

int zcrpc__target_parse_hostport(const char *s, size_t len, int v6,
				 char *host, char *port)
{
	const char *colon, *h = s, *end = s + len;
	size_t hl, pl, i;
	unsigned char buf[16];
	char tmp[ZCRPC_HOST_MAX + 1];

	if (len && s[0] == '[') { /* [V6]:PORT */
		const char *rb = memchr(s, ']', len);

		if (!v6 || !rb || rb + 1 >= end || rb[1] != ':')
			return -1;
		h = s + 1;
		hl = (size_t)(rb - h);
		colon = rb + 1;
		if (!hl || hl > ZCRPC_HOST_MAX)
			return -1;
		memcpy(tmp, h, hl);
		tmp[hl] = 0;
		if (inet_pton(AF_INET6, tmp, buf) != 1)
			return -1;
	} else {
		if (v6 == 1)
			return -1;
		colon = memchr(s, ':', len);
		if (!colon || memchr(colon + 1, ':', (size_t)(end - colon - 1)))
			return -1;
		hl = (size_t)(colon - s);
		if (!hl || hl > ZCRPC_HOST_MAX)
			return -1;
		for (i = 0; i < hl; i++) /* a name or a dotted quad */
			if (!((s[i] >= 'a' && s[i] <= 'z') ||
			      (s[i] >= 'A' && s[i] <= 'Z') ||
			      (s[i] >= '0' && s[i] <= '9') || s[i] == '.' ||
			      s[i] == '-' || s[i] == '_'))
				return -1;
		memcpy(tmp, h, hl);
		tmp[hl] = 0;
	}
	pl = (size_t)(end - colon - 1);
	if (!pl || pl > 5)
		return -1;
	for (i = 0; i < pl; i++)
		if (colon[1 + i] < '0' || colon[1 + i] > '9')
			return -1;
	memcpy(port, colon + 1, pl);
	port[pl] = 0;
	if (atoi(port) < 1 || atoi(port) > 65535)
		return -1;
	memcpy(host, tmp, hl + 1);
	return 0;
}

/* ---- the static schemes: the list is the name ---- */

struct static_list {
	zcrpc_address *a;
	size_t n;
	char (*hosts)[ZCRPC_HOST_MAX + 1];
	char (*ports)[ZCRPC_PORT_MAX + 1];
};

static void static_stop(void *state, void *arg)
{
	struct static_list *l = state;

	(void)arg;
	if (!l)
		return;
	free(l->a);
	free(l->hosts);
	free(l->ports);
	free(l);
}

/* @v6 as zcrpc__target_parse_hostport's; @one: a single HOST:PORT. */
static zcrpc_status static_start_kind(zcrpc_resolver *r, const char *name,
				      void **state, int v6)
{
	struct static_list *l = calloc(1, sizeof(*l));
	size_t cap = 1, i;
	const char *p;
	zcrpc_status st;
	unsigned char buf[4];

	if (!l)
		return ZCRPC_RESOURCE_EXHAUSTED;
	for (p = name; *p; p++)
		cap += *p == ',';
	if (cap > ZCRPC_MAX_BACKENDS) {
		free(l);
		return ZCRPC_INVALID_ARGUMENT;
	}
	l->a = calloc(cap, sizeof(*l->a));
	l->hosts = calloc(cap, sizeof(*l->hosts));
	l->ports = calloc(cap, sizeof(*l->ports));
	if (!l->a || !l->hosts || !l->ports) {
		static_stop(l, NULL);
		return ZCRPC_RESOURCE_EXHAUSTED;
	}
	for (p = name, i = 0; i < cap; i++) {
		const char *e = strchr(p, ',');
		size_t len = e ? (size_t)(e - p) : strlen(p);

		if (zcrpc__target_parse_hostport(p, len, v6, l->hosts[i],
						 l->ports[i]) ||
		    (v6 == 0 && inet_pton(AF_INET, l->hosts[i], buf) != 1)) {
			static_stop(l, NULL);
			return ZCRPC_INVALID_ARGUMENT;
		}
		l->a[i].host = l->hosts[i];
		l->a[i].port = l->ports[i];
		p = e ? e + 1 : p + len;
	}
	l->n = cap;
	st = zcrpc_resolver_set(r, l->a, l->n, ZCRPC_OK, NULL);
	if (st != ZCRPC_OK) {
		static_stop(l, NULL);
		return st;
	}
	*state = l;
	return ZCRPC_OK;
}

static zcrpc_status ipv4_start(zcrpc_resolver *r, const char *name,
			       void **state, void *arg)
{
	(void)arg;
	return static_start_kind(r, name, state, 0);
}

static zcrpc_status ipv6_start(zcrpc_resolver *r, const char *name,
			       void **state, void *arg)
{
	(void)arg;
	return static_start_kind(r, name, state, 1);
}

/* "HOST:PORT" (a name allowed) or "[V6]:PORT": one server. */
static zcrpc_status one_start(zcrpc_resolver *r, const char *name,
			      void **state, void *arg)
{
	(void)arg;
	if (strchr(name, ','))
		return ZCRPC_INVALID_ARGUMENT;
	return static_start_kind(r, name, state, -1);
}

static const zcrpc_resolver_ops builtin[] = {
	{sizeof(zcrpc_resolver_ops), "ipv4", ipv4_start, NULL, static_stop,
	 NULL, 0},
	{sizeof(zcrpc_resolver_ops), "ipv6", ipv6_start, NULL, static_stop,
	 NULL, 0},
};

static const zcrpc_resolver_ops one_server = {
	sizeof(zcrpc_resolver_ops), "", one_start, NULL, static_stop, NULL, 0};

static int scheme_ok(const char *s, size_t len)
{
	size_t i;

	if (!len || len > SCHEME_MAX ||
	    !((s[0] >= 'a' && s[0] <= 'z') || (s[0] >= 'A' && s[0] <= 'Z')))
		return 0;
	for (i = 0; i < len; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') ||
		      (s[i] >= 'A' && s[i] <= 'Z') ||
		      (s[i] >= '0' && s[i] <= '9') || s[i] == '+' ||
		      s[i] == '-' || s[i] == '.'))
			return 0;
	return 1;
}

/* The resolver of scheme @s (@len bytes) into *@ops; 0 when none. */
static int find_scheme(const char *s, size_t len, zcrpc_resolver_ops *ops)
{
	size_t i;
	int found = 0;

	for (i = 0; i < sizeof(builtin) / sizeof(builtin[0]); i++)
		if (strlen(builtin[i].scheme) == len &&
		    !memcmp(builtin[i].scheme, s, len)) {
			*ops = builtin[i];
			return 1;
		}
	if (len == 4 && !memcmp(s, "file", 4)) {
		*ops = zcrpc__resolve_file;
		return 1;
	}
	if (len == 3 && !memcmp(s, "dns", 3)) {
		*ops = zcrpc__resolve_dns;
		return 1;
	}
	if (len == 4 && !memcmp(s, "etcd", 4)) {
		*ops = zcrpc__resolve_etcd;
		return 1;
	}
	pthread_mutex_lock(&reg_mu);
	for (i = 0; i < n_regs && !found; i++)
		if (strlen(regs[i].scheme) == len &&
		    !memcmp(regs[i].scheme, s, len)) {
			*ops = regs[i].ops;
			found = 1;
		}
	pthread_mutex_unlock(&reg_mu);
	return found;
}

zcrpc_status zcrpc__target_resolver(const char *target,
				    zcrpc_resolver_ops *ops,
				    const char **name)
{
	const char *colon = strchr(target, ':');

	if (!colon)
		return ZCRPC_INVALID_ARGUMENT;
	if (scheme_ok(target, (size_t)(colon - target)) &&
	    find_scheme(target, (size_t)(colon - target), ops)) {
		*name = colon + 1;
		return ZCRPC_OK;
	}
	/* no scheme: one HOST:PORT, checked when it starts */
	*ops = one_server;
	*name = target;
	return ZCRPC_OK;
}

zcrpc_status zcrpc_resolver_register(const zcrpc_resolver_ops *caller)
{
	zcrpc_resolver_ops ops, tmp;
	zcrpc_status st = ZCRPC_OK;
	size_t len, i;

	if (!caller || caller->size < offsetof(zcrpc_resolver_ops, interval_ms))
		return ZCRPC_INVALID_ARGUMENT;
	memset(&ops, 0, sizeof(ops));
	memcpy(&ops, caller,
	       caller->size < sizeof(ops) ? caller->size : sizeof(ops));
	ops.size = sizeof(ops);
	if (!ops.scheme || !ops.start || !ops.stop || ops.interval_ms < 0)
		return ZCRPC_INVALID_ARGUMENT;
	len = strlen(ops.scheme);
	if (!scheme_ok(ops.scheme, len))
		return ZCRPC_INVALID_ARGUMENT;
	if (find_scheme(ops.scheme, len, &tmp))
		return ZCRPC_ALREADY_EXISTS;
	pthread_mutex_lock(&reg_mu);
	for (i = 0; i < n_regs; i++) /* one registered meanwhile */
		if (!strcmp(regs[i].scheme, ops.scheme))
			st = ZCRPC_ALREADY_EXISTS;
	if (st != ZCRPC_OK) {
	} else if (n_regs == MAX_RESOLVERS) {
		st = ZCRPC_RESOURCE_EXHAUSTED;
	} else {
		memcpy(regs[n_regs].scheme, ops.scheme, len + 1);
		regs[n_regs].ops = ops;
		regs[n_regs].ops.scheme = regs[n_regs].scheme;
		n_regs++;
	}
	pthread_mutex_unlock(&reg_mu);
	return st;
}
