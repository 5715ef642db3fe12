/* zcrpc — admission with a pre-shared key: constants, the HMAC, and the
 * test hooks (docs/protocol.md §1 and §2). Not installed. Usable from C++
 * tests; the connection-side functions are in internal.h.
 *
 * AUTH (message type 3, client -> server, the client's first message):
 *   0  identity length (u16, <= 64)
 *   2  reserved (u16, 0)
 *   4  proof: HMAC-SHA-256(key, nonce || identity), 32 bytes
 *  36  identity (identity length bytes)
 * AUTH_REPLY (type 4, server -> client):
 *   0  status (u32): 0 OK, or 16 UNAUTHENTICATED
 *   4  recv_depth (u32): the server's whole receive window (OK only)
 */
#ifndef ZCRPC_AUTH_H
#define ZCRPC_AUTH_H

#include <stddef.h>
#include <stdint.h>

#include "zcrpc/transport.h"

#ifdef __cplusplus
extern "C" {
#endif

enum zcrpc__auth_phase {
	ZCRPC_AUTH_NONE = 0,
	ZCRPC_AUTH_SERVER_WAIT = 1,   /* established; waiting for AUTH */
	ZCRPC_AUTH_SERVER_FAILED = 2, /* refused; AUTH_REPLY going out */
	ZCRPC_AUTH_CLIENT_WAIT = 3,   /* AUTH sent; waiting for AUTH_REPLY */
};

#define ZCRPC_AUTH_PROOF_LEN 32
#define ZCRPC_AUTH_HDR_LEN (4 + ZCRPC_AUTH_PROOF_LEN) /* AUTH before identity */
#define ZCRPC_AUTH_RECV_INITIAL 2 /* receives a server posts before AUTH */

/* HMAC-SHA-256(@key, @data) into @out; 0 on success. */
int zcrpc__hmac_sha256(const void *key, size_t key_len, const void *data,
		       size_t data_len, uint8_t out[32]);

/* The proof: HMAC-SHA-256(key, nonce (32 bytes) || identity); 0 on
 * success, -1 when @identity_len exceeds ZCRPC_IDENTITY_MAX. */
int zcrpc__auth_proof(const void *key, size_t key_len, const uint8_t *nonce,
		      const char *identity, size_t identity_len,
		      uint8_t out[ZCRPC_AUTH_PROOF_LEN]);

#ifdef __cplusplus
}
#endif

#ifdef ZCRPC_TESTING
#include "test_hooks.h" /* the test modes (ZCRPC_AUTH_TEST_*) */
#endif

#endif /* ZCRPC_AUTH_H */
