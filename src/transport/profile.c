/* zcrpc — device profiles (profile.h): which provider a device belongs to,
 * its limits that matter to the data path, and its quirks. */
#include "profile.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The provider, from the device's name as its kernel driver gives it
 * (rxeN, siwN, mlx5_N; a renamed device falls back on the vendor id rxe
 * reports, 0xffffff) and its transport. */
static enum zcrpc__provider provider_of(const char *name,
					const struct ibv_device_attr *attr,
					enum ibv_transport_type tr)
{
	if (strncmp(name, "rxe", 3) == 0 || attr->vendor_id == 0xffffff)
		return ZCRPC_PROV_RXE;
	if (strncmp(name, "siw", 3) == 0 && tr == IBV_TRANSPORT_IWARP)
		return ZCRPC_PROV_SIW;
	if (strncmp(name, "mlx5", 4) == 0)
		return ZCRPC_PROV_MLX5;
	return ZCRPC_PROV_OTHER;
}

/* The capability mask: ZCRPC_DEVICE_CAPS, comma-separated tokens that hide
 * features from the probe, so the fallback paths run over real verbs (the
 * tests over rxe: docs/testing.md "Capability masks"; the benchmark's
 * fallback rows; a device that reports a feature it cannot use): no_mw,
 * no_write_imm,
 * active_first, inline=N (a cap), inline_ask=N (the first ask, to see a
 * refusal), max_qp_wr=N. Unknown tokens are ignored. */
static void apply_mask(struct zcrpc__dev_profile *p)
{
	const char *s = getenv("ZCRPC_DEVICE_CAPS");
	char buf[256], *tok, *save = NULL;

	if (!s || !*s)
		return;
	snprintf(buf, sizeof(buf), "%s", s);
	for (tok = strtok_r(buf, ",", &save); tok;
	     tok = strtok_r(NULL, ",", &save)) {
		unsigned long v;

		if (strcmp(tok, "no_mw") == 0) {
			p->mw_type2 = 0;
			p->max_mw = 0;
		} else if (strcmp(tok, "no_write_imm") == 0) {
			p->write_imm = 0;
		} else if (strcmp(tok, "active_first") == 0) {
			p->active_first = 1;
		} else if (sscanf(tok, "inline_ask=%lu", &v) == 1) {
			p->inline_cap = (uint32_t)v; /* asked first: a refusal */
		} else if (sscanf(tok, "inline=%lu", &v) == 1) {
			if (v < p->inline_cap)
				p->inline_cap = (uint32_t)v;
		} else if (sscanf(tok, "max_qp_wr=%lu", &v) == 1 && v) {
			if (v < p->max_qp_wr)
				p->max_qp_wr = (uint32_t)v;
		} else {
			continue;
		}
		p->masked = 1;
	}
}

void zcrpc__profile_probe(struct zcrpc__dev_profile *p,
			  struct ibv_context *verbs,
			  const struct ibv_device_attr *attr,
			  const struct ibv_port_attr *port)
{
	memset(p, 0, sizeof(*p));
	snprintf(p->name, sizeof(p->name), "%s",
		 ibv_get_device_name(verbs->device));
	p->transport = verbs->device->transport_type;
	p->provider = provider_of(p->name, attr, p->transport);
	p->max_srq_wr = attr->max_srq > 0 && attr->max_srq_wr > 0
				? (uint32_t)attr->max_srq_wr
				: 0;
	p->max_cqe = attr->max_cqe > 0 ? (uint32_t)attr->max_cqe : 0;
	p->max_qp_wr = attr->max_qp_wr > 0 ? (uint32_t)attr->max_qp_wr : 0;
	p->max_sge = attr->max_sge > 0 ? (uint32_t)attr->max_sge : 0;
	p->max_mw = attr->max_mw > 0 ? (uint32_t)attr->max_mw : 0;
	p->link_layer = port ? port->link_layer : IBV_LINK_LAYER_UNSPECIFIED;
	/* Type-2 windows: mlx4, mlx5, irdma, rxe, ionic; none on bnxt_re,
	 * hns, qedr, cxgb4, erdma, efa, siw (and mana cannot bind). */
	p->mw_type2 = p->max_mw > 0 &&
		      (attr->device_cap_flags & (IBV_DEVICE_MEM_WINDOW_TYPE_2A |
						  IBV_DEVICE_MEM_WINDOW_TYPE_2B));
	/* No verbs bit says so: iWARP devices lack it (siw always, cxgb4
	 * unless its kernel enables it); IB and RoCE have it. */
	p->write_imm = p->transport != IBV_TRANSPORT_IWARP;
	p->active_first = p->transport == IBV_TRANSPORT_IWARP;
	/* Asked first, lowered on refusal (conn.c). */
	p->inline_cap = 220;
	/* rxe (Linux 6.1): the bind re-execution of docs/design.md. Other
	 * providers run local operations once; no drain there (untested
	 * here: docs/testing.md). */
	p->bind_needs_drain = p->provider == ZCRPC_PROV_RXE;
	p->selective_signal = 1; /* every provider honours unsignaled WRs */
	apply_mask(p);
}

int zcrpc__profile_describe(const struct zcrpc__dev_profile *p, char *buf,
			    size_t cap)
{
	static const char *const ll[] = {"unspecified", "InfiniBand",
					 "Ethernet"};
	const char *tr = p->transport == IBV_TRANSPORT_IWARP ? "iWARP"
			 : p->link_layer == IBV_LINK_LAYER_ETHERNET ? "RoCE"
								    : "IB";

	return snprintf(buf, cap,
			"%s (%s, %s, link %s): grants %s, bulk ends with %s, "
			"%s first, inline asked %u, max_qp_wr %u, max_sge %u, "
			"srq %u%s",
			p->name, zcrpc__provider_name(p->provider), tr,
			p->link_layer < 3 ? ll[p->link_layer] : "?",
			p->mw_type2 ? "memory windows" : "registrations",
			p->write_imm ? "write with immediate" : "WRITTEN message",
			p->active_first ? "active side sends" : "either side sends",
			p->inline_cap, p->max_qp_wr, p->max_sge, p->max_srq_wr,
			p->masked ? " (masked by ZCRPC_DEVICE_CAPS)" : "");
}

const char *zcrpc__provider_name(enum zcrpc__provider prov)
{
	switch (prov) {
	case ZCRPC_PROV_RXE:
		return "rxe";
	case ZCRPC_PROV_SIW:
		return "siw";
	case ZCRPC_PROV_MLX5:
		return "mlx5";
	default:
		return "other";
	}
}
