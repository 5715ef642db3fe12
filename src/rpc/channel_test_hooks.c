/* zcrpc — the channel's test hooks (declared in src/transport/test_hooks.h),
 * in a file of their own: ZCRPC_TEST_SOURCES, built into zcrpc_internal (the
 * library the tests link) and never into the installed one. */
#include "client_internal.h"
#include "../transport/test_hooks.h"

#include <stdio.h>

/* Prints @ch's calls that are not free, by state (diagnosis of hangs). */
void zcrpc__channel_test_dump(zcrpc_channel *ch, FILE *out)
{
	static const char *const names[] = {"free", "queued", "sent", "writing",
					    "reply_bulk", "reply_revoking", "done",
					    "zombie"};
	uint32_t i;

	fprintf(out, "channel: conn %p up %d draining %p q_len %u\n",
		(void *)ch->conn, ch->conn_up, (void *)ch->draining, ch->q_len);
	for (i = 0; i < ch->calls.n; i++) {
		struct ccall *c = zcrpc__call_table_at(&ch->calls, i);

		if (c->state == CS_FREE)
			continue;
		fprintf(out,
			"call %u: %s conn %p bulk %zu granted %u revoking %u "
			"wps %u grant %p deadline in %lld ms\n",
			i, names[c->state], (void *)c->conn, c->bulk_len, c->granted,
			c->revoking, c->write_pending_status, (void *)c->reply_grant,
			(long long)((c->deadline_ns - zcrpc__now_ns()) / 1000000));
	}
}
