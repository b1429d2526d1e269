/*
 * tls.c - OpenSSL contexts for DoT and DoH, listeners and backends (tls.h).
 */
#include "dnslb/core/tls.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <openssl/core_names.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/ocsp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509v3.h>

#define MAX_OCSP	(64 * 1024)	/* bytes of one OCSP response file */

/* The ticket keys, newest first: [0] encrypts, all of them decrypt. */
struct ticket_ring {
	pthread_rwlock_t lock;
	uint8_t (*keys)[DLB_TLS_TICKET_KEY];
	size_t n, cap;
};

struct dlb_tls_server {
	struct dlb_tls_server_opts o;	/* strings owned */
	pthread_mutex_t mu;		/* guards ctx */
	SSL_CTX *ctx;			/* the current context */
	struct ticket_ring ring;
	double rotated_at;		/* dlb_tls_server_maintain's clock; 0: not started */
	int64_t next_rotation;		/* wall clock, s, for showTLSContexts(); 0: never (atomic) */
	pthread_mutex_t keylog_mu;
	FILE *keylog;
};

struct dlb_tls_client {
	struct dlb_tls_client_opts o;	/* strings owned */
	int refs;			/* atomic */
	SSL_CTX *ctx;
	pthread_mutex_t keylog_mu;
	FILE *keylog;
};

/* What one SSL_CTX carries for its callbacks (its ex_data, freed with it). */
struct ctx_extra {
	struct dlb_tls_server *srv;	/* NULL for a client context */
	struct dlb_tls_client *cli;
	X509 *leaf[DLB_TLS_MAX_CERTS];	/* borrowed from the context */
	uint8_t *ocsp[DLB_TLS_MAX_CERTS];
	size_t ocsp_len[DLB_TLS_MAX_CERTS];
	size_t n;
};

static int extra_idx = -1;
static pthread_once_t extra_once = PTHREAD_ONCE_INIT;

/*
 * What a server-side SSL met in its handshake (dlb_tls_handshake_info), in
 * its ex_data at conn_idx as an integer: no allocation of ours. The low
 * bits are flags, the failure (+1) sits above them.
 */
static int conn_idx = -1;
#define CONN_UNKNOWN_KEY	0x1u
#define CONN_INACTIVE_KEY	0x2u
#define CONN_FAIL_SHIFT		8

const char *const dlb_tls_failure_names[DLB_TLS_FAIL_COUNT] = {
	"dhKeyTooSmall", "inappropriateFallBack", "noSharedCipher", "unknownCipherType",
	"unknownKeyExchangeType", "unknownProtocol", "unsupportedEC", "unsupportedProtocol",
};

static void
extra_free(void *parent, void *ptr, CRYPTO_EX_DATA *ad, int idx, long argl, void *argp)
{
	struct ctx_extra *e = ptr;

	(void)parent;
	(void)ad;
	(void)idx;
	(void)argl;
	(void)argp;
	if (e == NULL)
		return;
	for (size_t i = 0; i < e->n; i++)
		free(e->ocsp[i]);
	free(e);
}

static void
extra_init(void)
{
	extra_idx = SSL_CTX_get_ex_new_index(0, NULL, NULL, NULL, extra_free);
	conn_idx = SSL_get_ex_new_index(0, NULL, NULL, NULL, NULL);
}

static struct ctx_extra *
extra_of(const SSL *ssl)
{
	return SSL_CTX_get_ex_data(SSL_get_SSL_CTX(ssl), extra_idx);
}

static uintptr_t
conn_flags(const SSL *ssl)
{
	return (uintptr_t)SSL_get_ex_data(ssl, conn_idx);
}

/* Called during the handshake only (OpenSSL's callbacks): the connection's thread. */
static void
conn_flags_set(SSL *ssl, uintptr_t flags)
{
	(void)SSL_set_ex_data(ssl, conn_idx, (void *)flags);
}

void
dlb_tls_handshake_info(const SSL *ssl, struct dlb_tls_handshake_info *out)
{
	uintptr_t f = conn_flags(ssl);

	out->unknown_ticket_key = (f & CONN_UNKNOWN_KEY) != 0;
	out->inactive_ticket_key = (f & CONN_INACTIVE_KEY) != 0;
	out->failure = (enum dlb_tls_failure)((int)(f >> CONN_FAIL_SHIFT) - 1);
}

enum dlb_tls_version_idx
dlb_tls_version_index(const SSL *ssl)
{
	switch (SSL_version(ssl)) {
	case TLS1_VERSION:
		return DLB_TLS_V10;
	case TLS1_1_VERSION:
		return DLB_TLS_V11;
	case TLS1_2_VERSION:
		return DLB_TLS_V12;
	case TLS1_3_VERSION:
		return DLB_TLS_V13;
	default:
		return DLB_TLS_VUNKNOWN;
	}
}

/*
 * OpenSSL's info callback (server contexts): on an alert, the reason of
 * the error behind it, mapped as dnsdist 1.7's libssl_info_callback does
 * (OpenSSL's reasons to its TLSErrorCounters); other reasons are not kept.
 */
static void
info_cb(const SSL *ssl, int where, int ret)
{
	enum dlb_tls_failure f;

	(void)ret;
	if (!(where & SSL_CB_ALERT))
		return;
	switch (ERR_GET_REASON(ERR_peek_last_error())) {
	case SSL_R_DH_KEY_TOO_SMALL:
		f = DLB_TLS_FAIL_DH_KEY_TOO_SMALL;
		break;
	case SSL_R_NO_SHARED_CIPHER:
		f = DLB_TLS_FAIL_NO_SHARED_CIPHER;
		break;
	case SSL_R_UNKNOWN_PROTOCOL:
		f = DLB_TLS_FAIL_UNKNOWN_PROTOCOL;
		break;
	case SSL_R_UNSUPPORTED_PROTOCOL:
	case SSL_R_VERSION_TOO_LOW:
		f = DLB_TLS_FAIL_UNSUPPORTED_PROTOCOL;
		break;
	case SSL_R_INAPPROPRIATE_FALLBACK:
		f = DLB_TLS_FAIL_INAPPROPRIATE_FALLBACK;
		break;
	case SSL_R_UNKNOWN_CIPHER_TYPE:
		f = DLB_TLS_FAIL_UNKNOWN_CIPHER_TYPE;
		break;
	case SSL_R_UNKNOWN_KEY_EXCHANGE_TYPE:
		f = DLB_TLS_FAIL_UNKNOWN_KEY_EXCHANGE_TYPE;
		break;
	case SSL_R_UNSUPPORTED_ELLIPTIC_CURVE:
		f = DLB_TLS_FAIL_UNSUPPORTED_EC;
		break;
	default:
		return;
	}
	/* the callback's SSL is const; the flags are the connection's own */
	conn_flags_set((SSL *)ssl, (conn_flags(ssl) & ((1u << CONN_FAIL_SHIFT) - 1)) |
				   ((uintptr_t)(f + 1) << CONN_FAIL_SHIFT));
}

const char *
dlb_tls_error(char *buf, size_t bufsz)
{
	unsigned long e, last = 0;

	while ((e = ERR_get_error()) != 0)
		last = e;
	if (last == 0)
		snprintf(buf, bufsz, "no error from OpenSSL");
	else
		ERR_error_string_n(last, buf, bufsz);
	return buf;
}

/* "what: OpenSSL's reason" into @err. */
static void
fail(char *err, size_t errsz, const char *what, const char *arg)
{
	char why[256];

	dlb_tls_error(why, sizeof(why));
	snprintf(err, errsz, "%s%s%s: %s", what, arg ? " " : "", arg ? arg : "", why);
}

int
dlb_tls_version_parse(const char *name)
{
	if (strcmp(name, "tls1.0") == 0)
		return TLS1_VERSION;
	if (strcmp(name, "tls1.1") == 0)
		return TLS1_1_VERSION;
	if (strcmp(name, "tls1.2") == 0)
		return TLS1_2_VERSION;
	if (strcmp(name, "tls1.3") == 0)
		return TLS1_3_VERSION;
	return -1;
}

void
dlb_tls_server_opts_default(struct dlb_tls_server_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->min_version = TLS1_VERSION;
	o->tickets = true;
	o->ticket_keys = 5;
	o->ticket_rotation = 43200;
	o->stored_sessions = 20480;
	o->prefer_server_ciphers = true;
	o->release_buffers = true;
}

void
dlb_tls_client_opts_default(struct dlb_tls_client_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->validate = true;
	o->release_buffers = true;
}

/* ---- the key log (keyLogFile) ------------------------------------------------ */

static void
keylog_line(FILE *f, pthread_mutex_t *mu, const char *line)
{
	pthread_mutex_lock(mu);
	fprintf(f, "%s\n", line);
	fflush(f);
	pthread_mutex_unlock(mu);
}

static void
keylog_cb(const SSL *ssl, const char *line)
{
	struct ctx_extra *e = extra_of(ssl);

	if (e == NULL)
		return;
	if (e->srv != NULL && e->srv->keylog != NULL)
		keylog_line(e->srv->keylog, &e->srv->keylog_mu, line);
	else if (e->cli != NULL && e->cli->keylog != NULL)
		keylog_line(e->cli->keylog, &e->cli->keylog_mu, line);
}

static FILE *
keylog_open(const char *path, char *err, size_t errsz)
{
	FILE *f = fopen(path, "a");

	if (f == NULL)
		snprintf(err, errsz, "unable to open the key log file %s: %s", path, strerror(errno));
	return f;
}

/* ---- session tickets ------------------------------------------------------------ */

static int
ring_push(struct ticket_ring *r, const uint8_t key[DLB_TLS_TICKET_KEY])
{
	pthread_rwlock_wrlock(&r->lock);
	if (r->cap == 0) {
		pthread_rwlock_unlock(&r->lock);
		return 0;
	}
	if (r->n == r->cap)
		r->n--;		/* the oldest goes */
	memmove(r->keys[1], r->keys[0], r->n * DLB_TLS_TICKET_KEY);
	memcpy(r->keys[0], key, DLB_TLS_TICKET_KEY);
	r->n++;
	pthread_rwlock_unlock(&r->lock);
	return 0;
}

static int
mac_init(EVP_MAC_CTX *hctx, const uint8_t *key)
{
	OSSL_PARAM params[2];

	params[0] = OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, (char *)"SHA256", 0);
	params[1] = OSSL_PARAM_construct_end();
	return EVP_MAC_init(hctx, key, DLB_TLS_TICKET_HMAC, params);
}

/*
 * OpenSSL's ticket callback. Encrypt (@enc): with the newest key, a fresh
 * IV. Decrypt: the key named in the ticket; none (rotated out): 0, a full
 * handshake; an older key: 2, resumed and a new ticket issued.
 */
static int
ticket_cb(SSL *ssl, unsigned char name[16], unsigned char *iv, EVP_CIPHER_CTX *ectx,
	  EVP_MAC_CTX *hctx, int enc)
{
	struct ctx_extra *e = extra_of(ssl);
	struct ticket_ring *r;
	int rc = 0;

	if (e == NULL || e->srv == NULL)
		return -1;
	r = &e->srv->ring;
	pthread_rwlock_rdlock(&r->lock);
	if (enc) {
		if (r->n == 0) {
			rc = -1;
		} else {
			const uint8_t *k = r->keys[0];
			int ivlen = EVP_CIPHER_get_iv_length(EVP_aes_256_cbc());

			memcpy(name, k, DLB_TLS_TICKET_NAME);
			if (RAND_bytes(iv, ivlen) != 1 ||
			    EVP_EncryptInit_ex(ectx, EVP_aes_256_cbc(), NULL, k + DLB_TLS_TICKET_NAME, iv) != 1 ||
			    mac_init(hctx, k + DLB_TLS_TICKET_NAME + DLB_TLS_TICKET_CIPHER) != 1)
				rc = -1;
			else
				rc = 1;
		}
	} else {
		for (size_t i = 0; i < r->n; i++) {
			const uint8_t *k = r->keys[i];

			if (memcmp(k, name, DLB_TLS_TICKET_NAME) != 0)
				continue;
			if (mac_init(hctx, k + DLB_TLS_TICKET_NAME + DLB_TLS_TICKET_CIPHER) != 1 ||
			    EVP_DecryptInit_ex(ectx, EVP_aes_256_cbc(), NULL, k + DLB_TLS_TICKET_NAME, iv) != 1)
				rc = -1;
			else
				rc = i == 0 ? 1 : 2;
			break;
		}
	}
	pthread_rwlock_unlock(&r->lock);
	/* dnsdist's tlsUnknownTicketKey / tlsInactiveTicketKey */
	if (!enc && (rc == 0 || rc == 2))
		conn_flags_set(ssl, conn_flags(ssl) | (rc == 0 ? CONN_UNKNOWN_KEY : CONN_INACTIVE_KEY));
	return rc;
}

/* As dnsdist: the next automatic rotation is a delay after the last one,
 * whatever made it (the clock, the console, a key file loaded). */
static void
schedule_rotation(struct dlb_tls_server *s)
{
	int64_t next = s->o.ticket_rotation > 0 ? (int64_t)time(NULL) + s->o.ticket_rotation : 0;

	__atomic_store_n(&s->next_rotation, next, __ATOMIC_RELAXED);
	s->rotated_at = 0;	/* dlb_tls_server_maintain's clock starts again */
}

int64_t
dlb_tls_server_next_rotation(const struct dlb_tls_server *s)
{
	return __atomic_load_n(&s->next_rotation, __ATOMIC_RELAXED);
}

int
dlb_tls_server_rotate_ticket_key(struct dlb_tls_server *s, char *err, size_t errsz)
{
	uint8_t key[DLB_TLS_TICKET_KEY];

	if (RAND_bytes(key, sizeof(key)) != 1) {
		fail(err, errsz, "unable to generate a ticket key", NULL);
		return -1;
	}
	ring_push(&s->ring, key);
	OPENSSL_cleanse(key, sizeof(key));
	schedule_rotation(s);
	return 0;
}

void
dlb_tls_server_maintain(struct dlb_tls_server *s, double now)
{
	char err[256];

	if (s->o.ticket_rotation == 0 || s->ring.cap == 0)
		return;
	if (s->rotated_at == 0) {
		s->rotated_at = now;
		return;
	}
	if (now - s->rotated_at < s->o.ticket_rotation)
		return;
	(void)dlb_tls_server_rotate_ticket_key(s, err, sizeof(err));
	s->rotated_at = now;
}

int
dlb_tls_server_load_ticket_keys(struct dlb_tls_server *s, const char *file, char *err,
				size_t errsz)
{
	uint8_t key[DLB_TLS_TICKET_KEY];
	FILE *f = fopen(file, "rb");
	size_t loaded = 0;

	if (f == NULL) {
		snprintf(err, errsz, "unable to open the tickets key file %s: %s", file, strerror(errno));
		return -1;
	}
	while (fread(key, 1, sizeof(key), f) == sizeof(key)) {
		ring_push(&s->ring, key);
		loaded++;
	}
	fclose(f);
	OPENSSL_cleanse(key, sizeof(key));
	if (loaded > 0)
		schedule_rotation(s);
	if (loaded == 0) {
		snprintf(err, errsz, "unable to load a ticket key from the tickets key file %s "
			 "(%d bytes per key)", file, DLB_TLS_TICKET_KEY);
		return -1;
	}
	return 0;
}

size_t
dlb_tls_server_ticket_keys(struct dlb_tls_server *s)
{
	size_t n;

	pthread_rwlock_rdlock(&s->ring.lock);
	n = s->ring.n;
	pthread_rwlock_unlock(&s->ring.lock);
	return n;
}

/* ---- OCSP stapling -------------------------------------------------------------- */

static int
ocsp_cb(SSL *ssl, void *arg)
{
	struct ctx_extra *e = extra_of(ssl);
	X509 *x = SSL_get_certificate(ssl);

	(void)arg;
	if (e == NULL || x == NULL)
		return SSL_TLSEXT_ERR_NOACK;
	for (size_t i = 0; i < e->n; i++) {
		unsigned char *copy;

		if (e->leaf[i] != x || e->ocsp[i] == NULL)
			continue;
		copy = OPENSSL_malloc(e->ocsp_len[i]);
		if (copy == NULL)
			return SSL_TLSEXT_ERR_NOACK;
		memcpy(copy, e->ocsp[i], e->ocsp_len[i]);
		SSL_set_tlsext_status_ocsp_resp(ssl, copy, (long)e->ocsp_len[i]);
		return SSL_TLSEXT_ERR_OK;
	}
	return SSL_TLSEXT_ERR_NOACK;
}

static int
read_file(const char *path, uint8_t **out, size_t *len, char *err, size_t errsz)
{
	FILE *f = fopen(path, "rb");
	uint8_t *buf;
	size_t n;

	if (f == NULL) {
		snprintf(err, errsz, "unable to open the OCSP response file %s: %s", path, strerror(errno));
		return -1;
	}
	buf = malloc(MAX_OCSP);
	n = buf ? fread(buf, 1, MAX_OCSP, f) : 0;
	if (buf == NULL || n == 0 || n == MAX_OCSP || ferror(f)) {
		snprintf(err, errsz, "unable to read the OCSP response file %s (empty, or over %d bytes)",
			 path, MAX_OCSP);
		free(buf);
		fclose(f);
		return -1;
	}
	fclose(f);
	*out = buf;
	*len = n;
	return 0;
}

/* ---- ALPN --------------------------------------------------------------------------- */

static int
alpn_cb(SSL *ssl, const unsigned char **out, unsigned char *outlen, const unsigned char *in,
	unsigned int inlen, void *arg)
{
	struct dlb_tls_server *s = arg;

	(void)ssl;
	if (SSL_select_next_proto((unsigned char **)out, outlen, (const unsigned char *)s->o.alpn,
				  (unsigned)s->o.alpn_len, in, inlen) != OPENSSL_NPN_NEGOTIATED)
		return SSL_TLSEXT_ERR_NOACK;
	return SSL_TLSEXT_ERR_OK;
}

/* ---- the server context --------------------------------------------------------- */

static int
set_ciphers(SSL_CTX *ctx, const char *ciphers, const char *ciphers13, char *err, size_t errsz)
{
	if (ciphers != NULL && SSL_CTX_set_cipher_list(ctx, ciphers) != 1) {
		fail(err, errsz, "invalid ciphers", ciphers);
		return -1;
	}
	if (ciphers13 != NULL && SSL_CTX_set_ciphersuites(ctx, ciphers13) != 1) {
		fail(err, errsz, "invalid ciphersTLS13", ciphers13);
		return -1;
	}
	return 0;
}

static SSL_CTX *
server_ctx_build(struct dlb_tls_server *s, char *err, size_t errsz)
{
	const struct dlb_tls_server_opts *o = &s->o;
	uint64_t opts = SSL_OP_NO_COMPRESSION | SSL_OP_NO_SESSION_RESUMPTION_ON_RENEGOTIATION |
			SSL_OP_SINGLE_DH_USE | SSL_OP_SINGLE_ECDH_USE | SSL_OP_IGNORE_UNEXPECTED_EOF;
	struct ctx_extra *e;
	SSL_CTX *ctx;

	ctx = SSL_CTX_new(TLS_server_method());
	e = calloc(1, sizeof(*e));
	if (ctx == NULL || e == NULL || SSL_CTX_set_ex_data(ctx, extra_idx, e) != 1) {
		fail(err, errsz, "unable to create a TLS server context", NULL);
		free(e);
		SSL_CTX_free(ctx);
		return NULL;
	}
	e->srv = s;
	if (!o->tickets || o->ticket_keys == 0) {
		/* no stateless tickets, and no stateful ones either (TLS 1.3) */
		opts |= SSL_OP_NO_TICKET;
		SSL_CTX_set_num_tickets(ctx, 0);
	} else {
		SSL_CTX_set_tlsext_ticket_key_evp_cb(ctx, ticket_cb);
	}
	if (o->prefer_server_ciphers)
		opts |= SSL_OP_CIPHER_SERVER_PREFERENCE | SSL_OP_PRIORITIZE_CHACHA;
	if (!o->renegotiation)
		opts |= SSL_OP_NO_RENEGOTIATION;
	SSL_CTX_set_options(ctx, opts);
	if (SSL_CTX_set_min_proto_version(ctx, o->min_version) != 1) {
		fail(err, errsz, "unable to set the minimum TLS version", NULL);
		goto bad;
	}
	if (o->session_timeout > 0)
		SSL_CTX_set_timeout(ctx, o->session_timeout);
	if (o->stored_sessions == 0) {
		SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
	} else {
		SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_SERVER);
		SSL_CTX_sess_set_cache_size(ctx, o->stored_sessions);
	}
	if (o->release_buffers)
		SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS);
	if (set_ciphers(ctx, o->ciphers, o->ciphers13, err, errsz) != 0)
		goto bad;
	if (o->ncerts == 0) {
		snprintf(err, errsz, "no certificate given");
		goto bad;
	}
	for (size_t i = 0; i < o->ncerts; i++) {
		if (SSL_CTX_use_certificate_chain_file(ctx, o->certs[i]) != 1) {
			fail(err, errsz, "unable to load the certificate", o->certs[i]);
			goto bad;
		}
		if (SSL_CTX_use_PrivateKey_file(ctx, o->keys[i], SSL_FILETYPE_PEM) != 1 ||
		    SSL_CTX_check_private_key(ctx) != 1) {
			char what[512];

			if (ERR_GET_REASON(ERR_peek_last_error()) != X509_R_KEY_VALUES_MISMATCH) {
				fail(err, errsz, "unable to load the key", o->keys[i]);
				goto bad;
			}
			snprintf(what, sizeof(what), "the key %s does not match the certificate", o->keys[i]);
			fail(err, errsz, what, o->certs[i]);
			goto bad;
		}
		e->leaf[i] = SSL_CTX_get0_certificate(ctx);
		e->n = i + 1;
		if (i < o->nocsp && o->ocsp[i] != NULL &&
		    read_file(o->ocsp[i], &e->ocsp[i], &e->ocsp_len[i], err, errsz) != 0)
			goto bad;
	}
	if (o->nocsp > 0)
		SSL_CTX_set_tlsext_status_cb(ctx, ocsp_cb);
	SSL_CTX_set_info_callback(ctx, info_cb);
	if (o->keylog_file != NULL)
		SSL_CTX_set_keylog_callback(ctx, keylog_cb);
	if (o->alpn != NULL)
		SSL_CTX_set_alpn_select_cb(ctx, alpn_cb, s);
	return ctx;
bad:
	SSL_CTX_free(ctx);
	return NULL;
}

static char *
dup_opt(const char *s, bool *oom)
{
	char *d;

	if (s == NULL)
		return NULL;
	d = strdup(s);
	if (d == NULL)
		*oom = true;
	return d;
}

/* A copy of the @len bytes of @p (ALPN lists hold NULs); NULL for NULL. */
static char *
dup_bytes(const char *p, size_t len, bool *oom)
{
	char *d;

	if (p == NULL)
		return NULL;
	d = malloc(len > 0 ? len : 1);
	if (d == NULL)
		*oom = true;
	else
		memcpy(d, p, len);
	return d;
}

static void
server_opts_free(struct dlb_tls_server_opts *o)
{
	for (size_t i = 0; i < DLB_TLS_MAX_CERTS; i++) {
		free((char *)o->certs[i]);
		free((char *)o->keys[i]);
		free((char *)o->ocsp[i]);
	}
	free((char *)o->ciphers);
	free((char *)o->ciphers13);
	free((char *)o->ticket_key_file);
	free((char *)o->keylog_file);
	free((char *)o->alpn);
}

struct dlb_tls_server *
dlb_tls_server_new(const struct dlb_tls_server_opts *o, char *err, size_t errsz)
{
	struct dlb_tls_server *s;
	bool oom = false;

	pthread_once(&extra_once, extra_init);
	if (o->ncerts > DLB_TLS_MAX_CERTS || o->nocsp > o->ncerts) {
		snprintf(err, errsz, o->ncerts > DLB_TLS_MAX_CERTS ? "more than %d certificates" :
			 "more OCSP responses than certificates", DLB_TLS_MAX_CERTS);
		return NULL;
	}
	s = calloc(1, sizeof(*s));
	if (s == NULL) {
		snprintf(err, errsz, "out of memory");
		return NULL;
	}
	s->o = *o;
	memset(s->o.certs, 0, sizeof(s->o.certs));
	memset(s->o.keys, 0, sizeof(s->o.keys));
	memset(s->o.ocsp, 0, sizeof(s->o.ocsp));
	for (size_t i = 0; i < o->ncerts; i++) {
		s->o.certs[i] = dup_opt(o->certs[i], &oom);
		s->o.keys[i] = dup_opt(o->keys[i], &oom);
		if (i < o->nocsp)
			s->o.ocsp[i] = dup_opt(o->ocsp[i], &oom);
	}
	s->o.ciphers = dup_opt(o->ciphers, &oom);
	s->o.ciphers13 = dup_opt(o->ciphers13, &oom);
	s->o.ticket_key_file = dup_opt(o->ticket_key_file, &oom);
	s->o.keylog_file = dup_opt(o->keylog_file, &oom);
	s->o.alpn = dup_bytes(o->alpn, o->alpn_len, &oom);
	pthread_mutex_init(&s->mu, NULL);
	pthread_mutex_init(&s->keylog_mu, NULL);
	pthread_rwlock_init(&s->ring.lock, NULL);
	if (oom) {
		snprintf(err, errsz, "out of memory");
		goto bad;
	}
	/* a ring even without tickets, as dnsdist keeps one (showTLSContexts() counts its keys) */
	if (o->ticket_keys > 0) {
		s->ring.keys = calloc(o->ticket_keys, DLB_TLS_TICKET_KEY);
		if (s->ring.keys == NULL) {
			snprintf(err, errsz, "out of memory");
			goto bad;
		}
		s->ring.cap = o->ticket_keys;
		if (o->ticket_key_file != NULL) {
			if (dlb_tls_server_load_ticket_keys(s, o->ticket_key_file, err, errsz) != 0)
				goto bad;
		} else if (dlb_tls_server_rotate_ticket_key(s, err, errsz) != 0) {
			goto bad;
		}
	}
	schedule_rotation(s);
	if (o->keylog_file != NULL && (s->keylog = keylog_open(o->keylog_file, err, errsz)) == NULL)
		goto bad;
	s->ctx = server_ctx_build(s, err, errsz);
	if (s->ctx == NULL)
		goto bad;
	return s;
bad:
	dlb_tls_server_free(s);
	return NULL;
}

void
dlb_tls_server_free(struct dlb_tls_server *s)
{
	if (s == NULL)
		return;
	SSL_CTX_free(s->ctx);
	if (s->keylog != NULL)
		fclose(s->keylog);
	if (s->ring.keys != NULL)
		OPENSSL_cleanse(s->ring.keys, s->ring.cap * DLB_TLS_TICKET_KEY);
	free(s->ring.keys);
	pthread_rwlock_destroy(&s->ring.lock);
	pthread_mutex_destroy(&s->mu);
	pthread_mutex_destroy(&s->keylog_mu);
	server_opts_free(&s->o);
	free(s);
}

SSL *
dlb_tls_server_ssl_new(struct dlb_tls_server *s)
{
	SSL *ssl;

	pthread_mutex_lock(&s->mu);
	ssl = SSL_new(s->ctx);		/* holds its own reference to the context */
	pthread_mutex_unlock(&s->mu);
	return ssl;
}

int
dlb_tls_server_reload(struct dlb_tls_server *s, char *err, size_t errsz)
{
	SSL_CTX *ctx = server_ctx_build(s, err, errsz), *old;

	if (ctx == NULL)
		return -1;
	pthread_mutex_lock(&s->mu);
	old = s->ctx;
	s->ctx = ctx;
	pthread_mutex_unlock(&s->mu);
	SSL_CTX_free(old);	/* connections that began with it keep it alive */
	return 0;
}

static bool
same_str(const char *a, const char *b)
{
	return (a == NULL && b == NULL) || (a != NULL && b != NULL && strcmp(a, b) == 0);
}

bool
dlb_tls_server_same_opts(const struct dlb_tls_server *a, const struct dlb_tls_server *b)
{
	const struct dlb_tls_server_opts *x = &a->o, *y = &b->o;

	if (x->ncerts != y->ncerts || x->nocsp != y->nocsp || x->min_version != y->min_version ||
	    x->tickets != y->tickets || x->ticket_keys != y->ticket_keys ||
	    x->ticket_rotation != y->ticket_rotation ||
	    x->stored_sessions != y->stored_sessions || x->session_timeout != y->session_timeout ||
	    x->prefer_server_ciphers != y->prefer_server_ciphers ||
	    x->release_buffers != y->release_buffers || x->renegotiation != y->renegotiation ||
	    x->alpn_len != y->alpn_len || (x->alpn_len > 0 && memcmp(x->alpn, y->alpn, x->alpn_len) != 0))
		return false;
	for (size_t i = 0; i < x->ncerts; i++)
		if (!same_str(x->certs[i], y->certs[i]) || !same_str(x->keys[i], y->keys[i]))
			return false;
	for (size_t i = 0; i < x->nocsp; i++)
		if (!same_str(x->ocsp[i], y->ocsp[i]))
			return false;
	return same_str(x->ciphers, y->ciphers) && same_str(x->ciphers13, y->ciphers13) &&
	       same_str(x->ticket_key_file, y->ticket_key_file) &&
	       same_str(x->keylog_file, y->keylog_file);
}

const struct dlb_tls_server_opts *
dlb_tls_server_opts(const struct dlb_tls_server *s)
{
	return &s->o;
}

/* ---- the client context ----------------------------------------------------------- */

struct dlb_tls_client *
dlb_tls_client_new(const struct dlb_tls_client_opts *o, char *err, size_t errsz)
{
	struct dlb_tls_client *c;
	struct ctx_extra *e;
	uint64_t opts = SSL_OP_NO_COMPRESSION | SSL_OP_IGNORE_UNEXPECTED_EOF;
	bool oom = false;

	pthread_once(&extra_once, extra_init);
	c = calloc(1, sizeof(*c));
	e = calloc(1, sizeof(*e));
	if (c == NULL || e == NULL) {
		snprintf(err, errsz, "out of memory");
		free(c);
		free(e);
		return NULL;
	}
	c->o = *o;
	c->refs = 1;
	c->o.ca_store = dup_opt(o->ca_store, &oom);
	c->o.ciphers = dup_opt(o->ciphers, &oom);
	c->o.ciphers13 = dup_opt(o->ciphers13, &oom);
	c->o.keylog_file = dup_opt(o->keylog_file, &oom);
	c->o.alpn = dup_bytes(o->alpn, o->alpn_len, &oom);
	pthread_mutex_init(&c->keylog_mu, NULL);
	if (oom) {
		snprintf(err, errsz, "out of memory");
		free(e);
		goto bad;
	}
	c->ctx = SSL_CTX_new(TLS_client_method());
	if (c->ctx == NULL || SSL_CTX_set_ex_data(c->ctx, extra_idx, e) != 1) {
		fail(err, errsz, "unable to create a TLS client context", NULL);
		free(e);
		goto bad;
	}
	e->cli = c;
	if (!o->renegotiation)
		opts |= SSL_OP_NO_RENEGOTIATION;
	SSL_CTX_set_options(c->ctx, opts);
	if (o->release_buffers)
		SSL_CTX_set_mode(c->ctx, SSL_MODE_RELEASE_BUFFERS);
	/* sessions are kept by the connections that resume them */
	SSL_CTX_set_session_cache_mode(c->ctx, SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL_STORE);
	if (o->validate) {
		struct stat st;
		int ok;

		SSL_CTX_set_verify(c->ctx, SSL_VERIFY_PEER, NULL);
		if (o->ca_store != NULL && stat(o->ca_store, &st) != 0) {
			snprintf(err, errsz, "unable to read the CA store %s: %s", o->ca_store,
				 strerror(errno));
			goto bad;
		}
		if (o->ca_store == NULL)
			ok = SSL_CTX_set_default_verify_paths(c->ctx);
		else if (S_ISDIR(st.st_mode))
			ok = SSL_CTX_load_verify_locations(c->ctx, NULL, o->ca_store);
		else
			ok = SSL_CTX_load_verify_locations(c->ctx, o->ca_store, NULL);
		if (ok != 1) {
			fail(err, errsz, "unable to load the CA store", o->ca_store ? o->ca_store : "(system)");
			goto bad;
		}
	}
	if (set_ciphers(c->ctx, o->ciphers, o->ciphers13, err, errsz) != 0)
		goto bad;
	if (o->alpn != NULL && SSL_CTX_set_alpn_protos(c->ctx, (const unsigned char *)o->alpn,
						      (unsigned)o->alpn_len) != 0) {
		fail(err, errsz, "invalid ALPN list", NULL);
		goto bad;
	}
	if (o->keylog_file != NULL) {
		c->keylog = keylog_open(o->keylog_file, err, errsz);
		if (c->keylog == NULL)
			goto bad;
		SSL_CTX_set_keylog_callback(c->ctx, keylog_cb);
	}
	return c;
bad:
	dlb_tls_client_free(c);
	return NULL;
}

struct dlb_tls_client *
dlb_tls_client_ref(struct dlb_tls_client *c)
{
	__atomic_add_fetch(&c->refs, 1, __ATOMIC_RELAXED);
	return c;
}

void
dlb_tls_client_free(struct dlb_tls_client *c)
{
	if (c == NULL || __atomic_sub_fetch(&c->refs, 1, __ATOMIC_ACQ_REL) > 0)
		return;
	SSL_CTX_free(c->ctx);
	if (c->keylog != NULL)
		fclose(c->keylog);
	pthread_mutex_destroy(&c->keylog_mu);
	free((char *)c->o.ca_store);
	free((char *)c->o.ciphers);
	free((char *)c->o.ciphers13);
	free((char *)c->o.keylog_file);
	free((char *)c->o.alpn);
	free(c);
}

bool
dlb_tls_client_same_opts(const struct dlb_tls_client *a, const struct dlb_tls_client *b)
{
	const struct dlb_tls_client_opts *x, *y;

	if (a == NULL || b == NULL)
		return a == b;
	x = &a->o;
	y = &b->o;
	return x->validate == y->validate && x->release_buffers == y->release_buffers &&
	       x->renegotiation == y->renegotiation && x->alpn_len == y->alpn_len &&
	       (x->alpn_len == 0 || memcmp(x->alpn, y->alpn, x->alpn_len) == 0) &&
	       same_str(x->ca_store, y->ca_store) && same_str(x->ciphers, y->ciphers) &&
	       same_str(x->ciphers13, y->ciphers13) && same_str(x->keylog_file, y->keylog_file);
}

const char *
dlb_tls_client_failure(SSL *ssl, unsigned long error, char *buf, size_t bufsz)
{
	long v = SSL_get_verify_result(ssl);

	if (v != X509_V_OK)
		snprintf(buf, bufsz, "certificate verify failed: %s",
			 X509_verify_cert_error_string(v));
	else if (error != 0)
		ERR_error_string_n(error, buf, bufsz);
	else
		snprintf(buf, bufsz, "the handshake failed");
	return buf;
}

SSL *
dlb_tls_client_ssl_new(struct dlb_tls_client *c, const char *subject_name, const char *subject_addr)
{
	SSL *ssl = SSL_new(c->ctx);

	if (ssl == NULL)
		return NULL;
	SSL_set_connect_state(ssl);
	if (subject_name != NULL && subject_name[0] != '\0') {
		/* as dnsdist: no partial wildcards ("w*.example") */
		SSL_set_hostflags(ssl, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
		if (SSL_set_tlsext_host_name(ssl, subject_name) != 1 ||
		    (c->o.validate && SSL_set1_host(ssl, subject_name) != 1))
			goto bad;
	} else if (subject_addr != NULL && subject_addr[0] != '\0' && c->o.validate) {
		if (X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), subject_addr) != 1)
			goto bad;
	}
	return ssl;
bad:
	SSL_free(ssl);
	return NULL;
}

/* ---- the outgoing sessions kept (getOutgoingTLSSessionCacheSize) ----------------------- */

static uint64_t sessions_kept;

void
dlb_tls_session_keep(SSL_SESSION **slot, SSL_SESSION *sess)
{
	int64_t d = (sess != NULL) - (*slot != NULL);

	SSL_SESSION_free(*slot);
	*slot = sess;
	if (d != 0)
		__atomic_add_fetch(&sessions_kept, (uint64_t)d, __ATOMIC_RELAXED);
}

uint64_t
dlb_tls_sessions_kept(void)
{
	return __atomic_load_n(&sessions_kept, __ATOMIC_RELAXED);
}

/* ---- generateOCSPResponse ------------------------------------------------------------- */

/* PEM object @what ("the certificate", "the issuer certificate", "the issuer
 * key") from @file; NULL with @err in dnsdist's words. */
static void *
read_pem(const char *file, const char *what, bool key, char *err, size_t errsz)
{
	FILE *f = fopen(file, "r");
	void *p;

	if (f == NULL) {
		snprintf(err, errsz, "Unable to open '%s' when loading %s to generate an OCSP response",
			 file, what);
		return NULL;
	}
	p = key ? (void *)PEM_read_PrivateKey(f, NULL, NULL, NULL)
		: (void *)PEM_read_X509(f, NULL, NULL, NULL);
	fclose(f);
	if (p == NULL)
		snprintf(err, errsz, "Unable to read %s from '%s' to generate an OCSP response", what,
			 file);
	return p;
}

int
dlb_tls_generate_ocsp(const char *cert_file, const char *ca_cert_file, const char *ca_key_file,
		      const char *out, int ndays, int nmin, char *err, size_t errsz)
{
	X509 *cert = NULL, *ca = NULL;
	EVP_PKEY *key = NULL;
	OCSP_CERTID *id = NULL;
	OCSP_BASICRESP *bs = NULL;
	OCSP_RESPONSE *resp = NULL;
	ASN1_TIME *now = NULL, *next = NULL;
	unsigned char *der = NULL;
	FILE *f;
	int len = 0, rc = -1;

	ERR_clear_error();
	if ((cert = read_pem(cert_file, "the certificate", false, err, errsz)) == NULL ||
	    (ca = read_pem(ca_cert_file, "the issuer certificate", false, err, errsz)) == NULL ||
	    (key = read_pem(ca_key_file, "the issuer key", true, err, errsz)) == NULL)
		goto out;
	/* as dnsdist: SHA-256 for the certificate's ID and the signature, the
	 * responder named by the issuer's name, no certificates in the response */
	now = X509_gmtime_adj(NULL, 0);
	next = X509_time_adj_ex(NULL, ndays, (long)nmin * 60, NULL);
	id = OCSP_cert_to_id(EVP_sha256(), cert, ca);
	bs = OCSP_BASICRESP_new();
	if (now == NULL || next == NULL || id == NULL || bs == NULL ||
	    OCSP_basic_add1_status(bs, id, V_OCSP_CERTSTATUS_GOOD, 0, NULL, now, next) == NULL ||
	    X509_check_private_key(ca, key) != 1 ||
	    OCSP_basic_sign(bs, ca, key, EVP_sha256(), NULL, OCSP_NOCERTS) != 1 ||
	    (resp = OCSP_response_create(OCSP_RESPONSE_STATUS_SUCCESSFUL, bs)) == NULL ||
	    (len = i2d_OCSP_RESPONSE(resp, &der)) <= 0) {
		snprintf(err, errsz, "Error while signing the OCSP response");
		goto out;
	}
	f = fopen(out, "wb");
	if (f == NULL) {
		snprintf(err, errsz, "Error opening file for writing the OCSP response");
		goto out;
	}
	if (fwrite(der, 1, (size_t)len, f) != (size_t)len) {
		fclose(f);
		snprintf(err, errsz, "Error writing the OCSP response to '%s'", out);
		goto out;
	}
	if (fclose(f) != 0) {
		snprintf(err, errsz, "Error writing the OCSP response to '%s'", out);
		goto out;
	}
	rc = 0;
out:
	ERR_clear_error();
	OPENSSL_free(der);
	OCSP_RESPONSE_free(resp);
	OCSP_BASICRESP_free(bs);
	OCSP_CERTID_free(id);
	ASN1_TIME_free(now);
	ASN1_TIME_free(next);
	EVP_PKEY_free(key);
	X509_free(ca);
	X509_free(cert);
	return rc;
}
