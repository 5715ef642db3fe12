/* zcrpc — a connection pinned to a device, port and GID index
 * (zcrpc_connect_opts.device / port / gid_index, docs/devices.md "Choosing
 * the path"): rdma_cm picks the device from the source address, so the pin
 * becomes the source address of the chosen GID (an IPv4-mapped or global
 * IPv6 GID: RoCE), and the resolved route is checked against it. */
#include "internal.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <stdio.h>
#include <string.h>

static const uint8_t v4map[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

/* The address GID @g carries, written to @buf; 0, or -1 when it has none
 * that can be bound: zero, or link-local fe80::/10 (RoCE's default GID
 * needs a scope; InfiniBand's GIDs use that prefix and carry no IP). */
static int gid_addr(const union ibv_gid *g, char *buf, size_t cap)
{
	static const uint8_t zero[16];

	if (!memcmp(g->raw, v4map, sizeof(v4map)))
		return inet_ntop(AF_INET, g->raw + 12, buf, (socklen_t)cap) ? 0 : -1;
	if (!memcmp(g->raw, zero, sizeof(zero)) ||
	    (g->raw[0] == 0xfe && (g->raw[1] & 0xc0) == 0x80))
		return -1;
	return inet_ntop(AF_INET6, g->raw, buf, (socklen_t)cap) ? 0 : -1;
}

/* The name of the interface whose hardware address is @mac; 0 or -1. */
static int netdev_by_mac(const uint8_t mac[6], char name[IF_NAMESIZE])
{
	struct ifaddrs *ifs, *i;
	int rc = -1;

	if (getifaddrs(&ifs))
		return -1;
	for (i = ifs; i && rc; i = i->ifa_next) {
		const struct sockaddr_ll *ll = (const void *)i->ifa_addr;

		if (ll && ll->sll_family == AF_PACKET && ll->sll_halen == 6 &&
		    !memcmp(ll->sll_addr, mac, 6)) {
			snprintf(name, IF_NAMESIZE, "%s", i->ifa_name);
			rc = 0;
		}
	}
	freeifaddrs(ifs);
	return rc;
}

/* iWARP's GIDs carry no IP: the address is the first IPv4 one of the
 * netdev under GID @gi (ibv_query_gid_ex's ndev_ifindex, or the interface
 * whose MAC the GID holds: siw's GID is its netdev's MAC). */
static int netdev_addr(struct ibv_context *verbs, uint32_t port, uint32_t gi,
		       char *buf, size_t cap)
{
	struct ibv_gid_entry e;
	struct ifaddrs *ifs, *i;
	char name[IF_NAMESIZE];
	int rc = -1;

	if (ibv_query_gid_ex(verbs, port, gi, &e, 0) == 0 && e.ndev_ifindex &&
	    if_indextoname(e.ndev_ifindex, name)) {
		/* found by index */
	} else {
		union ibv_gid g;

		if (ibv_query_gid(verbs, (uint8_t)port, (int)gi, &g) ||
		    netdev_by_mac(g.raw, name))
			return -1;
	}
	if (getifaddrs(&ifs))
		return -1;
	for (i = ifs; i && rc; i = i->ifa_next)
		if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET &&
		    !strcmp(i->ifa_name, name) &&
		    inet_ntop(AF_INET, &((struct sockaddr_in *)i->ifa_addr)->sin_addr,
			      buf, (socklen_t)cap))
			rc = 0;
	freeifaddrs(ifs);
	return rc;
}

zcrpc_status zcrpc__pin_source(zcrpc_context *ctx, const char *device,
			       uint32_t port, uint32_t gid_index,
			       struct zcrpc__pin *out, char *why, size_t why_len)
{
	struct ibv_port_attr pa;
	union ibv_gid g;
	int idx = -1, i;

	for (i = 0; i < ctx->ndev; i++)
		if (ctx->dev[i].verbs && !strcmp(ctx->dev[i].prof.name, device))
			idx = i;
	if (idx < 0) {
		snprintf(why, why_len, "no RDMA device %s in the context", device);
		return ZCRPC_INVALID_ARGUMENT;
	}
	if (!port)
		port = 1;
	if (port > ctx->dev[idx].attr.phys_port_cnt ||
	    ibv_query_port(ctx->dev[idx].verbs, (uint8_t)port, &pa)) {
		snprintf(why, why_len, "%s has no port %u", device, port);
		return ZCRPC_INVALID_ARGUMENT;
	}
	if (ctx->dev[idx].prof.transport == IBV_TRANSPORT_IWARP) {
		/* No address in the GID: the netdev's. */
		if (gid_index >= (uint32_t)pa.gid_tbl_len ||
		    netdev_addr(ctx->dev[idx].verbs, port, gid_index, out->src,
				sizeof(out->src))) {
			snprintf(why, why_len,
				 "%s port %u: no IPv4 address on the network "
				 "interface under GID %u",
				 device, port, gid_index);
			return ZCRPC_INVALID_ARGUMENT;
		}
	} else if (gid_index) {
		if (gid_index >= (uint32_t)pa.gid_tbl_len ||
		    ibv_query_gid(ctx->dev[idx].verbs, (uint8_t)port, (int)gid_index, &g) ||
		    gid_addr(&g, out->src, sizeof(out->src))) {
			snprintf(why, why_len,
				 "GID %u of %s port %u carries no IP address to bind "
				 "(an IPv4-mapped or global IPv6 GID is needed)",
				 gid_index, device, port);
			return ZCRPC_INVALID_ARGUMENT;
		}
	} else {
		for (i = 0; i < pa.gid_tbl_len; i++)
			if (!ibv_query_gid(ctx->dev[idx].verbs, (uint8_t)port, i, &g) &&
			    !gid_addr(&g, out->src, sizeof(out->src)))
				break;
		if (i == pa.gid_tbl_len) {
			snprintf(why, why_len,
				 "%s port %u has no GID with an IP address (RoCE needs "
				 "one; InfiniBand connects through IPoIB's address)",
				 device, port);
			return ZCRPC_INVALID_ARGUMENT;
		}
	}
	out->dev_idx = idx;
	out->port = port;
	snprintf(out->device, sizeof(out->device), "%s", device);
	return ZCRPC_OK;
}

int zcrpc__pin_check(const zcrpc_context *ctx, const struct zcrpc__pin *p,
		     const struct rdma_cm_id *id, char *why, size_t why_len)
{
	if (id->verbs == ctx->dev[p->dev_idx].verbs && id->port_num == p->port)
		return 0;
	snprintf(why, why_len,
		 "the route goes over %s port %u, not the pinned %s port %u",
		 id->verbs ? ibv_get_device_name(id->verbs->device) : "(none)",
		 (unsigned)id->port_num, p->device, p->port);
	return -1;
}
