/* zcrpc-info — what zcrpc detects on each RDMA device of this machine and
 * the data path it will use there, as ibv_devinfo does for verbs
 * (docs/design.md "Device profiles"). Usage: zcrpc-info [-v]. Exit status
 * 0 when at least one device is usable, 1 otherwise. */
#include <stdio.h>
#include <string.h>

#include "zcrpc/transport.h"

static const char *transport_name(uint32_t t)
{
	return t == ZCRPC_TRANSPORT_IWARP ? "iWARP"
	       : t == ZCRPC_TRANSPORT_ROCE ? "RoCE"
					   : "InfiniBand";
}

static const char *port_state(uint32_t s)
{
	static const char *const names[] = {"NOP",    "DOWN",	"INIT",
					    "ARMED",  "ACTIVE", "ACTIVE_DEFER"};

	return s < sizeof(names) / sizeof(names[0]) ? names[s] : "?";
}

int main(int argc, char **argv)
{
	int verbose = argc > 1 && strcmp(argv[1], "-v") == 0;
	zcrpc_context *ctx = NULL;
	zcrpc_status st;
	int i, n;

	if (argc > 1 && !verbose) {
		fprintf(stderr, "usage: %s [-v]\n", argv[0]);
		return 2;
	}
	st = zcrpc_context_create(&ctx);
	if (st != ZCRPC_OK) {
		fprintf(stderr, "zcrpc-info: %s: %s\n", zcrpc_status_str(st),
			zcrpc_last_error());
		return 1;
	}
	n = zcrpc_context_device_count(ctx);
	for (i = 0; i < n; i++) {
		zcrpc_device_info d;

		if (zcrpc_context_get_device_info(ctx, i, &d, sizeof(d)) !=
		    ZCRPC_OK)
			continue;
		printf("%s\n", d.name);
		printf("  provider:     %s (%s)\n", d.provider,
		       transport_name(d.transport));
		printf("  port 1:       %s, active MTU %u\n",
		       port_state(d.port_state), d.active_mtu);
		printf("  grants:       %s\n",
		       d.grant_path == ZCRPC_GRANT_WINDOW
			       ? "type-2 memory windows"
			       : "registrations (no type-2 memory windows)");
		printf("  bulk ends:    %s\n",
		       d.write_end == ZCRPC_WRITE_END_IMM
			       ? "RDMA WRITE with immediate"
			       : "RDMA WRITE + WRITTEN message");
		printf("  first send:   %s\n",
		       d.active_first ? "the active side (iWARP)" : "either side");
		printf("  inline asked: %u bytes\n", d.inline_ask);
		if (verbose)
			printf("  limits:       max_qp_wr %u, max_sge %u, "
			       "max_srq_wr %u, max_cqe %u, max_mw %u, "
			       "max_msg_sz %u\n  summary:      %s\n",
			       d.max_qp_wr, d.max_sge, d.max_srq_wr, d.max_cqe,
			       d.max_mw, d.max_msg_sz, d.summary);
	}
	if (zcrpc_context_skipped_devices(ctx))
		printf("%d more devices not used (a context uses at most %d)\n",
		       zcrpc_context_skipped_devices(ctx), n);
	zcrpc_context_destroy(ctx);
	return n > 0 ? 0 : 1;
}
