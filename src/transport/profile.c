/* zcrpc — device profiles (profile.h): which provider a device belongs to,
 * its limits that matter to the data path, and its quirks. */
#include "profile.h"

#include <stdio.h>
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

void zcrpc__profile_probe(struct zcrpc__dev_profile *p,
			  struct ibv_context *verbs,
			  const struct ibv_device_attr *attr)
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
	/* rxe (Linux 6.1): the bind re-execution of docs/design.md. Other
	 * providers run local operations once; no drain there (untested
	 * here: docs/testing.md). */
	p->bind_needs_drain = p->provider == ZCRPC_PROV_RXE;
	p->selective_signal = 1; /* every provider honours unsignaled WRs */
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
