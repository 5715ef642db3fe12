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
 *
 * Mutual (both hellos carry MUTUAL; a client with a key requires it): the
 * client's AUTH carries a nonce of its own too, and the server's
 * AUTH_REPLY OK carries the server's proof. Both proofs are HMACs with the
 * key over a role byte, both nonces and the server's address as the
 * client dialed it (the server's local address of the connection), so a
 * stranger without the key can neither answer the client nor relay one
 * side's proof to the other: at another address the proofs differ.
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

#include <netinet/in.h>

#define ZCRPC_AUTH_REPLY_LEN 8 /* status (u32), recv_depth (u32) */
/* ... and, mutual, the server's proof */
#define ZCRPC_AUTH_REPLY_MUTUAL_LEN (ZCRPC_AUTH_REPLY_LEN + ZCRPC_AUTH_PROOF_LEN)
#define ADDR_MAX 19 /* family byte, an IPv6 address, the port */

struct zcrpc__auth {
	uint8_t key[ZCRPC_PSK_MAX];
	size_t key_len;
	char identity[ZCRPC_IDENTITY_MAX];
	size_t identity_len;
	uint8_t nonce[ZCRPC_HELLO_NONCE_LEN]; /* the server's (client: from
					       * its hello, for mutual) */
	uint8_t cnonce[ZCRPC_HELLO_NONCE_LEN]; /* mutual: the client's */
	uint8_t addr[ADDR_MAX];		       /* mutual: the server's address */
	size_t addr_len;
	uint8_t sent[ZCRPC_AUTH_PROOF_LEN];   /* client: the proof last sent */
	unsigned has_sent : 1;
	unsigned done : 1; /* proof verified (server) or accepted (client) */
	unsigned mutual : 1;   /* both hellos carried MUTUAL */
	unsigned stranger : 1; /* tests: a server without the key */
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

/* The server's address of @c's connection, as the client dialed it (its
 * peer) or as the server has it (local): a family byte (4 or 6), the
 * address (an IPv4-mapped IPv6 one as IPv4) and the port; 0 bytes when
 * unknown. */
static size_t server_addr(const zcrpc_conn *c, int local, uint8_t *out)
{
	const struct sockaddr *sa = local ? rdma_get_local_addr(c->id)
					  : rdma_get_peer_addr(c->id);
	static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

	if (!sa)
		return 0;
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)(const void *)sa;

		out[0] = 4;
		memcpy(out + 1, &in->sin_addr, 4);
		memcpy(out + 5, &in->sin_port, 2);
		return 7;
	}
	if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *in6 =
			(const struct sockaddr_in6 *)(const void *)sa;

		if (!memcmp(&in6->sin6_addr, mapped, sizeof(mapped))) {
			out[0] = 4;
			memcpy(out + 1, (const uint8_t *)&in6->sin6_addr + 12, 4);
			memcpy(out + 5, &in6->sin6_port, 2);
			return 7;
		}
		out[0] = 6;
		memcpy(out + 1, &in6->sin6_addr, 16);
		memcpy(out + 17, &in6->sin6_port, 2);
		return ADDR_MAX;
	}
	return 0;
}

/* A mutual proof: HMAC-SHA-256(key, "zcrpc mutual " || @role ('C' the
 * client's, 'S' the server's) || server nonce || client nonce || server
 * address || identity); 0 on success. */
static int mutual_proof(const struct zcrpc__auth *a, const void *key,
			size_t key_len, char role, const char *identity,
			size_t identity_len, uint8_t out[ZCRPC_AUTH_PROOF_LEN])
{
	uint8_t msg[14 + 2 * ZCRPC_HELLO_NONCE_LEN + ADDR_MAX + ZCRPC_IDENTITY_MAX];
	size_t n = 0;
	int rc;

	if (identity_len > ZCRPC_IDENTITY_MAX)
		return -1;
	memcpy(msg, "zcrpc mutual ", 13);
	n = 13;
	msg[n++] = (uint8_t)role;
	memcpy(msg + n, a->nonce, ZCRPC_HELLO_NONCE_LEN);
	n += ZCRPC_HELLO_NONCE_LEN;
	memcpy(msg + n, a->cnonce, ZCRPC_HELLO_NONCE_LEN);
	n += ZCRPC_HELLO_NONCE_LEN;
	memcpy(msg + n, a->addr, a->addr_len);
	n += a->addr_len;
	if (identity_len)
		memcpy(msg + n, identity, identity_len);
	n += identity_len;
	rc = zcrpc__hmac_sha256(key, key_len, msg, n, out);
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
#ifdef ZCRPC_TESTING
	a->stranger = c->w->test_auth_stranger != 0;
#endif
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
	uint8_t want[ZCRPC_AUTH_PROOF_LEN], reply[ZCRPC_AUTH_REPLY_MUTUAL_LEN];
	uint8_t other[ZCRPC_PSK_MAX];
	uint32_t len, idlen;
	size_t i;
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
	a->mutual = (c->features & ZCRPC_FEAT_MUTUAL) != 0;
	if (zcrpc__get_le16(m + 2) != 0 || idlen > ZCRPC_IDENTITY_MAX ||
	    len != ZCRPC_AUTH_HDR_LEN + idlen +
			   (a->mutual ? ZCRPC_HELLO_NONCE_LEN : 0)) {
		refuse(c, "malformed AUTH message (identity length %u in %u bytes)",
		       idlen, len);
		return;
	}
	if (a->mutual) { /* the client's nonce follows its identity */
		memcpy(a->cnonce, m + ZCRPC_AUTH_HDR_LEN + idlen,
		       ZCRPC_HELLO_NONCE_LEN);
		a->addr_len = server_addr(c, 1, a->addr);
	}
	if (a->mutual ? mutual_proof(a, a->key, a->key_len, 'C',
				     (const char *)m + ZCRPC_AUTH_HDR_LEN,
				     idlen, want)
		      : zcrpc__auth_proof(a->key, a->key_len, a->nonce,
					  (const char *)m + ZCRPC_AUTH_HDR_LEN,
					  idlen, want)) {
		refuse(c, "computing the HMAC failed");
		return;
	}
	match = CRYPTO_memcmp(want, m + 4, ZCRPC_AUTH_PROOF_LEN) == 0 ||
		a->stranger; /* tests: takes anything */
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
	if (a->mutual) { /* the key, proven back */
		for (i = 0; i < a->key_len; i++) /* a stranger's: not the key */
			other[i] = (uint8_t)(a->key[i] ^ (a->stranger ? 0x5a : 0));
		if (mutual_proof(a, other, a->key_len, 'S',
				 (const char *)m + ZCRPC_AUTH_HDR_LEN, idlen,
				 reply + ZCRPC_AUTH_REPLY_LEN)) {
			OPENSSL_cleanse(other, sizeof(other));
			zcrpc__conn_fail(c, ZCRPC_INTERNAL,
					 "computing the HMAC failed");
			return;
		}
		OPENSSL_cleanse(other, sizeof(other));
	}
	if (zcrpc__conn_send_ctrl(c, ZCRPC_MSG_AUTH_REPLY, reply,
				  a->mutual ? ZCRPC_AUTH_REPLY_MUTUAL_LEN
					    : ZCRPC_AUTH_REPLY_LEN,
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
	uint8_t buf[ZCRPC_AUTH_HDR_LEN + ZCRPC_IDENTITY_MAX + ZCRPC_HELLO_NONCE_LEN];
	const uint8_t *proof;
	zcrpc_status st;
	size_t len;

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
	if (!(c->features & ZCRPC_FEAT_MUTUAL)) {
		zcrpc__conn_fail(c, ZCRPC_UNAUTHENTICATED,
				 "the server cannot prove the pre-shared key (its hello lacks MUTUAL): not trusting it");
		return 1;
	}
	a->mutual = 1;
	memcpy(a->nonce, h->nonce, sizeof(a->nonce));
	a->addr_len = server_addr(c, 0, a->addr);
	if (RAND_bytes(a->cnonce, sizeof(a->cnonce)) != 1) {
		zcrpc__conn_fail(c, ZCRPC_INTERNAL, "no random bytes for the nonce");
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
	if (mutual_proof(a, a->key, a->key_len, 'C', a->identity,
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
	len = ZCRPC_AUTH_HDR_LEN + a->identity_len;
	memcpy(buf + len, a->cnonce, ZCRPC_HELLO_NONCE_LEN);
	len += ZCRPC_HELLO_NONCE_LEN;
	st = zcrpc__conn_send_ctrl(c, ZCRPC_MSG_AUTH, buf, len, 0);
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
	uint8_t want[ZCRPC_AUTH_PROOF_LEN];
	uint32_t st, depth, got, rlen;
	int match;

	/* a refusal carries no proof; an OK of a mutual connection does */
	rlen = byte_len >= ZCRPC_MSG_HDR_LEN + 4 && zcrpc__get_le32(m) == ZCRPC_OK
		       ? ZCRPC_AUTH_REPLY_MUTUAL_LEN
		       : ZCRPC_AUTH_REPLY_LEN;
	if (byte_len != ZCRPC_MSG_HDR_LEN + rlen ||
	    p[0] != ZCRPC_MSG_AUTH_REPLY || p[1] != 0 ||
	    zcrpc__get_le32(p + 4) != rlen) {
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
	if (mutual_proof(c->auth, c->auth->key, c->auth->key_len, 'S',
			 c->auth->identity, c->auth->identity_len, want)) {
		zcrpc__conn_fail(c, ZCRPC_INTERNAL, "computing the HMAC failed");
		return;
	}
	match = CRYPTO_memcmp(want, m + ZCRPC_AUTH_REPLY_LEN,
			      ZCRPC_AUTH_PROOF_LEN) == 0;
	OPENSSL_cleanse(want, sizeof(want));
	if (!match) {
		zcrpc__conn_fail(c, ZCRPC_UNAUTHENTICATED,
				 "the server's proof of the pre-shared key does not match: it does not have the key (not the server it claims to be)");
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
