/* zcrpc — admission with a pre-shared key (docs/protocol.md §1 and §2).
 *
 * Server: a listener with a key puts a fresh 32-byte nonce in its ACCEPT
 * hello, posts only ZCRPC_AUTH_RECV_INITIAL receives and holds the accepted
 * connection (state CONNECTING; nothing reaches the application) until its
 * first message, AUTH, proves the key: HMAC-SHA-256(key, nonce ||
 * identity), compared in constant time. Then it posts the rest of the
 * window, answers AUTH_REPLY OK (which returns the extra credits) and hands
 * the connection to on_accept. Any other first message, or a proof that
 * does not match, is answered AUTH_REPLY UNAUTHENTICATED; the connection
 * closes once that reply is sent. The handshake deadline covers all of it.
 *
 * Client: proves the key as soon as the ACCEPT hello arrives and reports
 * ESTABLISHED on AUTH_REPLY OK; a refusal, a server that asks for no key,
 * or a key the client lacks close it with UNAUTHENTICATED.
 */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include "../core/le.h"

#define ZCRPC_AUTH_REPLY_LEN 8 /* status (u32), recv_depth (u32) */

struct zcrpc__auth {
	uint8_t key[ZCRPC_PSK_MAX];
	size_t key_len;
	char identity[ZCRPC_IDENTITY_MAX];
	size_t identity_len;
	uint8_t nonce[ZCRPC_HELLO_NONCE_LEN]; /* server: its own; client: unused */
	uint8_t sent[ZCRPC_AUTH_PROOF_LEN];   /* client: the proof last sent */
	unsigned has_sent : 1;
	unsigned done : 1; /* proof verified (server) or accepted (client) */
	char why[128];	   /* server: why the proof was refused */
};

int zcrpc__hmac_sha256(const void *key, size_t key_len, const void *data,
		       size_t data_len, uint8_t out[32])
{
	unsigned int n = 0;

	if (key_len > (size_t)0x7fffffff)
		return -1;
	if (!HMAC(EVP_sha256(), key, (int)key_len, data, data_len, out, &n) ||
	    n != 32)
		return -1;
	return 0;
}

int zcrpc__auth_proof(const void *key, size_t key_len, const uint8_t *nonce,
		      const char *identity, size_t identity_len,
		      uint8_t out[ZCRPC_AUTH_PROOF_LEN])
{
	uint8_t msg[ZCRPC_HELLO_NONCE_LEN + ZCRPC_IDENTITY_MAX];
	int rc;

	if (identity_len > ZCRPC_IDENTITY_MAX)
		return -1;
	memcpy(msg, nonce, ZCRPC_HELLO_NONCE_LEN);
	if (identity_len)
		memcpy(msg + ZCRPC_HELLO_NONCE_LEN, identity, identity_len);
	rc = zcrpc__hmac_sha256(key, key_len, msg,
				ZCRPC_HELLO_NONCE_LEN + identity_len, out);
	OPENSSL_cleanse(msg, sizeof(msg));
	return rc;
}

zcrpc_status zcrpc__auth_client_init(zcrpc_conn *c, const void *psk,
				     size_t psk_len, const char *identity)
{
	size_t idlen = identity ? strlen(identity) : 0;
	struct zcrpc__auth *a;

	if (!psk)
		return psk_len ? ZCRPC_INVALID_ARGUMENT : ZCRPC_OK;
	if (psk_len < ZCRPC_PSK_MIN || psk_len > ZCRPC_PSK_MAX ||
	    idlen > ZCRPC_IDENTITY_MAX)
		return ZCRPC_INVALID_ARGUMENT;
	a = calloc(1, sizeof(*a));
	if (!a)
		return ZCRPC_RESOURCE_EXHAUSTED;
	memcpy(a->key, psk, psk_len);
	a->key_len = psk_len;
	if (idlen)
		memcpy(a->identity, identity, idlen);
	a->identity_len = idlen;
	c->auth = a;
	return ZCRPC_OK;
}

zcrpc_status zcrpc__auth_server_init(zcrpc_conn *c, const zcrpc_listener *l)
{
	struct zcrpc__auth *a = calloc(1, sizeof(*a));

	if (!a)
		return ZCRPC_RESOURCE_EXHAUSTED;
	memcpy(a->key, l->psk, l->opts.psk_len);
	a->key_len = l->opts.psk_len;
	if (RAND_bytes(a->nonce, sizeof(a->nonce)) != 1) {
		OPENSSL_cleanse(a, sizeof(*a));
		free(a);
		return ZCRPC_INTERNAL;
	}
	c->auth = a;
	c->recv_initial = ZCRPC_AUTH_RECV_INITIAL;
	return ZCRPC_OK;
}

void zcrpc__auth_free(zcrpc_conn *c)
{
	if (!c->auth)
		return;
	OPENSSL_cleanse(c->auth, sizeof(*c->auth));
	free(c->auth);
	c->auth = NULL;
}

void zcrpc__auth_fill_hello(const zcrpc_conn *c, struct zcrpc_hello *h)
{
	if (!c->auth)
		return;
	h->features |= ZCRPC_FEAT_AUTH;
	if (c->passive)
		memcpy(h->nonce, c->auth->nonce, sizeof(h->nonce));
}

/* ---- server --------------------------------------------------------------- */

int zcrpc__auth_server_hold(zcrpc_conn *c)
{
	if (!c->auth || c->auth->done)
		return 0;
	if (c->auth_phase == ZCRPC_AUTH_NONE)
		c->auth_phase = ZCRPC_AUTH_SERVER_WAIT;
	return 1;
}

static void put_reply(uint8_t *buf, zcrpc_status st, uint32_t recv_depth)
{
	zcrpc__put_le32(buf, (uint32_t)st);
	zcrpc__put_le32(buf + 4, recv_depth);
}

/* Refuses the proof: counts it, answers AUTH_REPLY UNAUTHENTICATED as the
 * connection's last message; it closes once that is sent. */
__attribute__((format(printf, 2, 3))) static void refuse(zcrpc_conn *c,
							  const char *fmt,
							  ...)
{
	struct zcrpc__auth *a = c->auth;
	uint8_t reply[ZCRPC_AUTH_REPLY_LEN];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(a->why, sizeof(a->why), fmt, ap);
	va_end(ap);
	c->w->rejected_auth++;
	zcrpc__worker_seterr(c->w, "refused a connection: %s", a->why);
	c->auth_phase = ZCRPC_AUTH_SERVER_FAILED;
	put_reply(reply, ZCRPC_UNAUTHENTICATED, 0);
	if (zcrpc__conn_send_ctrl(c, ZCRPC_MSG_AUTH_REPLY, reply, sizeof(reply),
				  1) != ZCRPC_OK)
		zcrpc__conn_fail(c, ZCRPC_UNAUTHENTICATED,
				 "authentication failed: %s", a->why);
}

static void server_verify(zcrpc_conn *c, const uint8_t *p, uint32_t byte_len)
{
	struct zcrpc__auth *a = c->auth;
	const uint8_t *m = p + ZCRPC_MSG_HDR_LEN;
	uint8_t want[ZCRPC_AUTH_PROOF_LEN], reply[ZCRPC_AUTH_REPLY_LEN];
	uint32_t len, idlen;
	int match;

	if (byte_len < ZCRPC_MSG_HDR_LEN || p[0] != ZCRPC_MSG_AUTH) {
		refuse(c, "the first message was not AUTH (type %u, %u bytes)",
		       byte_len ? p[0] : 0u, byte_len);
		return;
	}
	len = zcrpc__get_le32(p + 4);
	if (len != byte_len - ZCRPC_MSG_HDR_LEN || len < ZCRPC_AUTH_HDR_LEN ||
	    p[1] != 0 || zcrpc__get_le16(p + 2) != 0) {
		refuse(c, "malformed AUTH message (%u bytes)", byte_len);
		return;
	}
	idlen = zcrpc__get_le16(m);
	if (zcrpc__get_le16(m + 2) != 0 || idlen > ZCRPC_IDENTITY_MAX ||
	    len != ZCRPC_AUTH_HDR_LEN + idlen) {
		refuse(c, "malformed AUTH message (identity length %u in %u bytes)",
		       idlen, len);
		return;
	}
	if (zcrpc__auth_proof(a->key, a->key_len, a->nonce,
			      (const char *)m + ZCRPC_AUTH_HDR_LEN, idlen, want)) {
		refuse(c, "computing the HMAC failed");
		return;
	}
	match = CRYPTO_memcmp(want, m + 4, ZCRPC_AUTH_PROOF_LEN) == 0;
	OPENSSL_cleanse(want, sizeof(want));
	if (!match) {
		refuse(c, "the proof does not match the key and this connection's nonce (identity \"%.*s\")",
		       (int)idlen, (const char *)m + ZCRPC_AUTH_HDR_LEN);
		return;
	}
	/* Admitted: the rest of the window, the AUTH slot back, and every
	 * credit that makes in the reply; then the application sees it. */
	a->done = 1;
	c->auth_phase = ZCRPC_AUTH_NONE;
	c->share_min = c->recv_depth < c->w->opts.recv_share
			       ? c->recv_depth
			       : c->w->opts.recv_share;
	zcrpc__srq_raise(c, c->share_min); /* what the budget has free */
	c->share_min = c->share;
	zcrpc__conn_recv_done(c, 0);
	if (c->state == ZCRPC_CONN_CLOSED)
		return;
	put_reply(reply, ZCRPC_OK, c->share);
	if (zcrpc__conn_send_ctrl(c, ZCRPC_MSG_AUTH_REPLY, reply, sizeof(reply),
				  0) != ZCRPC_OK) {
		zcrpc__conn_fail(c, ZCRPC_UNAVAILABLE,
				 "cannot send the authentication reply");
		return;
	}
	zcrpc__conn_established(c);
}

void zcrpc__auth_last_sent(zcrpc_conn *c)
{
	if (c->state == ZCRPC_CONN_CLOSED)
		return;
	zcrpc__conn_fail(c, ZCRPC_UNAUTHENTICATED, "authentication failed: %s",
			 c->auth ? c->auth->why : "refused");
}

/* ---- client --------------------------------------------------------------- */

int zcrpc__auth_client_start(zcrpc_conn *c, const struct zcrpc_hello *h)
{
	struct zcrpc__auth *a = c->auth;
	uint8_t buf[ZCRPC_AUTH_HDR_LEN + ZCRPC_IDENTITY_MAX];
	const uint8_t *proof;
	zcrpc_status st;

	if (!(h->features & ZCRPC_FEAT_AUTH)) {
		if (!a)
			return 0; /* neither side has a key */
		zcrpc__conn_fail(c, ZCRPC_UNAUTHENTICATED,
				 "the server does not ask for the pre-shared key (it has none configured): not connecting unauthenticated");
		return 1;
	}
	if (!a) {
		zcrpc__conn_fail(c, ZCRPC_UNAUTHENTICATED,
				 "the server requires a pre-shared key and this client has none");
		return 1;
	}
	c->auth_phase = ZCRPC_AUTH_CLIENT_WAIT;
#ifdef ZCRPC_TESTING
	if (c->test_auth_mode == ZCRPC_AUTH_TEST_SILENT)
		return 1;
	if (c->test_auth_mode == ZCRPC_AUTH_TEST_DATA_FIRST) {
		st = zcrpc__conn_send_ctrl(c, ZCRPC_MSG_DATA, "hello", 5, 0);
		goto sent;
	}
#endif
	if (zcrpc__auth_proof(a->key, a->key_len, h->nonce, a->identity,
			      a->identity_len, a->sent)) {
		zcrpc__conn_fail(c, ZCRPC_INTERNAL, "computing the HMAC failed");
		return 1;
	}
#ifdef ZCRPC_TESTING
	if (c->test_auth_mode == ZCRPC_AUTH_TEST_PROOF)
		memcpy(a->sent, c->test_auth_proof, sizeof(a->sent));
#endif
	proof = a->sent;
	zcrpc__put_le16(buf, (uint16_t)a->identity_len);
	zcrpc__put_le16(buf + 2, 0);
	memcpy(buf + 4, proof, ZCRPC_AUTH_PROOF_LEN);
	if (a->identity_len)
		memcpy(buf + ZCRPC_AUTH_HDR_LEN, a->identity, a->identity_len);
	st = zcrpc__conn_send_ctrl(c, ZCRPC_MSG_AUTH, buf,
				   ZCRPC_AUTH_HDR_LEN + a->identity_len, 0);
	if (st == ZCRPC_OK)
		a->has_sent = 1;
#ifdef ZCRPC_TESTING
sent:
#endif
	if (st != ZCRPC_OK)
		zcrpc__conn_fail(c, st == ZCRPC_INVALID_ARGUMENT
					    ? ZCRPC_FAILED_PRECONDITION
					    : ZCRPC_UNAVAILABLE,
				 "cannot send the key proof: %s",
				 st == ZCRPC_INVALID_ARGUMENT
					 ? "the server's max_msg is too small for it"
					 : zcrpc_status_str(st));
	return 1;
}

static void client_result(zcrpc_conn *c, const uint8_t *p, uint32_t byte_len)
{
	const uint8_t *m = p + ZCRPC_MSG_HDR_LEN;
	uint32_t st, depth, got;

	if (byte_len != ZCRPC_MSG_HDR_LEN + ZCRPC_AUTH_REPLY_LEN ||
	    p[0] != ZCRPC_MSG_AUTH_REPLY || p[1] != 0 ||
	    zcrpc__get_le32(p + 4) != ZCRPC_AUTH_REPLY_LEN) {
		zcrpc__conn_fail(c, ZCRPC_INTERNAL,
				 "protocol violation: type %u (%u bytes) before the authentication result",
				 byte_len ? p[0] : 0u, byte_len);
		return;
	}
	st = zcrpc__get_le32(m);
	depth = zcrpc__get_le32(m + 4);
	got = zcrpc__get_le16(p + 2);
	if (st != ZCRPC_OK) {
		zcrpc__conn_fail(c, ZCRPC_UNAUTHENTICATED,
				 "the server refused the pre-shared key proof (%s)",
				 st < ZCRPC_STATUS_COUNT
					 ? zcrpc_status_str((zcrpc_status)st)
					 : "unknown status");
		return;
	}
	if (depth < c->peer_recv_depth || depth > ZCRPC_MAX_QUEUE_DEPTH ||
	    got > depth - c->credits) {
		zcrpc__conn_fail(c, ZCRPC_INTERNAL,
				 "protocol violation: authentication reply grants %u credits of a %u-slot window",
				 got, depth);
		return;
	}
	c->peer_recv_depth = depth;
	c->credits += got;
	c->auth->done = 1;
	c->auth_phase = ZCRPC_AUTH_NONE;
	zcrpc__conn_recv_done(c, 0);
	if (c->state != ZCRPC_CONN_CLOSED)
		zcrpc__conn_established(c);
}

void zcrpc__auth_peer_closed(zcrpc_conn *c)
{
	/* The verdict may still wait in the CQ: read it first. */
	zcrpc__conn_poll(c);
	if (c->state == ZCRPC_CONN_CONNECTING &&
	    c->auth_phase == ZCRPC_AUTH_CLIENT_WAIT)
		zcrpc__conn_fail(c, ZCRPC_UNAVAILABLE,
				 "the server closed the connection before answering the key proof");
}

/* ---- both ----------------------------------------------------------------- */

void zcrpc__auth_on_msg(zcrpc_conn *c, uint32_t pos, const uint8_t *p,
			uint32_t byte_len)
{
	(void)pos; /* c->cur_recv */
	if (c->state == ZCRPC_CONN_CLOSED)
		return;
	switch (c->auth_phase) {
	case ZCRPC_AUTH_SERVER_WAIT:
		server_verify(c, p, byte_len);
		break;
	case ZCRPC_AUTH_CLIENT_WAIT:
		client_result(c, p, byte_len);
		break;
	default: /* refused: whatever else arrives is dropped */
		break;
	}
}

void zcrpc__auth_on_imm(zcrpc_conn *c, uint32_t pos)
{
	(void)pos;
	if (c->state == ZCRPC_CONN_CLOSED)
		return;
	if (c->auth_phase == ZCRPC_AUTH_SERVER_WAIT)
		refuse(c, "the first message was an RDMA WRITE with immediate");
	else if (c->auth_phase == ZCRPC_AUTH_CLIENT_WAIT)
		zcrpc__conn_fail(c, ZCRPC_INTERNAL,
				 "protocol violation: a write with immediate before the authentication result");
}

#ifdef ZCRPC_TESTING
/* For zcrpc__conn_test_auth_sent (test_hooks.c): the proof the last AUTH
 * carried, or NULL. */
const uint8_t *zcrpc__auth_sent_proof(const zcrpc_conn *c)
{
	return c->auth && c->auth->has_sent ? c->auth->sent : NULL;
}
#endif
