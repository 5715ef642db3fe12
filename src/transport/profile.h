/* zcrpc — a device's profile: what zcrpc learned about it once, at context
 * creation, and the quirks the data path follows (docs/design.md "Device
 * profiles"). The capability probe of the hardware issue fills in more;
 * the data path asks the profile, never the device's name. Private. */
#ifndef ZCRPC_TRANSPORT_PROFILE_H
#define ZCRPC_TRANSPORT_PROFILE_H

#include <stddef.h>
#include <stdint.h>

#include <infiniband/verbs.h>

enum zcrpc__provider {
	ZCRPC_PROV_OTHER = 0,
	ZCRPC_PROV_RXE,	 /* Soft-RoCE (rdma_rxe) */
	ZCRPC_PROV_SIW,	 /* Soft-iWARP (siw) */
	ZCRPC_PROV_MLX5, /* NVIDIA ConnectX-4 and later */
};

struct zcrpc__dev_profile {
	enum zcrpc__provider provider;
	char name[IBV_SYSFS_NAME_MAX]; /* ibv_get_device_name() */
	enum ibv_transport_type transport; /* IB (IB or RoCE) or iWARP */
	uint32_t max_srq_wr;		   /* 0: no shared receive queue */
	uint32_t max_cqe, max_qp_wr;
	uint32_t max_sge;	 /* per send or receive WR */
	uint32_t max_mw;	 /* memory windows the device can allocate */
	uint32_t inline_cap;	 /* largest inline size to ask for first */
	uint8_t link_layer;	 /* IBV_LINK_LAYER_* of port 1 */
	/* Grants bind type-2 memory windows (mw.c); without them, grants are
	 * registrations of their own (mr_spare.c). */
	unsigned mw_type2 : 1;
	/* RDMA WRITE with immediate data can be sent and received; without
	 * it a write ends with a WRITTEN message (docs/protocol.md §4). */
	unsigned write_imm : 1;
	/* iWARP: the passive side sends nothing before the active side's
	 * first message arrives (rdma_connect(3)). */
	unsigned active_first : 1;
	/* The capability mask ZCRPC_DEVICE_CAPS hid features. */
	unsigned masked : 1;
	/* Quirk: a BIND_MW or LOCAL_INV must wait until the send queue
	 * drained (rxe re-executes one a retransmission rewinds over:
	 * send_queue.c). Devices without it post them in order with the
	 * rest. */
	unsigned bind_needs_drain : 1;
	/* Sends may go unsignaled (send_queue.c signals every 16th and each
	 * whose completion returns something); off: every WR signaled. */
	unsigned selective_signal : 1;
};

/* Fills @p from the device's attributes and port 1's (queried by the
 * caller; @port NULL when that failed). The capability mask of
 * ZCRPC_DEVICE_CAPS is applied last (profile.c). */
void zcrpc__profile_probe(struct zcrpc__dev_profile *p,
			  struct ibv_context *verbs,
			  const struct ibv_device_attr *attr,
			  const struct ibv_port_attr *port);
/* Writes a one-line description of @p (what was detected, the path it
 * selects) into @buf; returns snprintf's count. */
int zcrpc__profile_describe(const struct zcrpc__dev_profile *p, char *buf,
			    size_t cap);
const char *zcrpc__provider_name(enum zcrpc__provider prov);

#endif /* ZCRPC_TRANSPORT_PROFILE_H */
