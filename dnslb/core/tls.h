/*
 * tls.h - OpenSSL contexts for DNS over TLS and DNS over HTTPS, as dnsdist
 * 1.7 builds them: a server context per TLS listener (addTLSLocal,
 * addDOHLocal) with its certificates, ciphers, minimum version, session
 * tickets and their key ring, session cache, OCSP stapling and key log;
 * a client context per encrypted backend (newServer's tls keys) with
 * certificate validation on by default.
 *
 * The TLS stream (one connection) takes its SSL object from here:
 * dlb_tls_server_ssl_new / dlb_tls_client_ssl_new. Certificates are
 * reloaded by building a new SSL_CTX and swapping it in: connections
 * already open keep the context they began with (OpenSSL counts its
 * references), new ones get the new one. The ticket key ring outlives
 * reloads, so tickets issued before a reload still resume after it.
 *
 * Thread: a context is built and reloaded on the main thread; SSL objects
 * are made by any thread (a mutex guards the swap). The ticket key ring is
 * read by the threads doing handshakes and rotated by the main thread
 * (a read-write lock).
 */
#ifndef DNSLB_TLS_H
#define DNSLB_TLS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <openssl/ssl.h>

#define DLB_TLS_MAX_CERTS	8

/* One ticket key as dnsdist's OpenSSL provider keeps it, and as 80 bytes of
 * a ticketKeyFile: name, then AES-256-CBC key, then HMAC-SHA256 key. */
#define DLB_TLS_TICKET_NAME	16
#define DLB_TLS_TICKET_CIPHER	32
#define DLB_TLS_TICKET_HMAC	32
#define DLB_TLS_TICKET_KEY	(DLB_TLS_TICKET_NAME + DLB_TLS_TICKET_CIPHER + DLB_TLS_TICKET_HMAC)

/* addTLSLocal/addDOHLocal options, with dnsdist 1.7's defaults from dlb_tls_server_opts_default. */
struct dlb_tls_server_opts {
	const char *certs[DLB_TLS_MAX_CERTS];	/* PEM chains */
	const char *keys[DLB_TLS_MAX_CERTS];	/* PEM keys, in the order of certs */
	size_t ncerts;
	const char *ocsp[DLB_TLS_MAX_CERTS];	/* ocspResponses: DER files, in the order of certs */
	size_t nocsp;
	const char *ciphers;		/* ciphers (TLS <= 1.2); NULL: OpenSSL's */
	const char *ciphers13;		/* ciphersTLS13; NULL: OpenSSL's */
	int min_version;		/* TLS1_VERSION ... TLS1_3_VERSION (minTLSVersion, default tls1.0) */
	bool tickets;			/* sessionTickets (default true) */
	unsigned ticket_keys;		/* numberOfTicketsKeys (default 5); 0: no tickets */
	unsigned ticket_rotation;	/* ticketsKeysRotationDelay, s: a new key that often
					 * (default 43200; 0: only on request) */
	const char *ticket_key_file;	/* ticketKeyFile: keys loaded instead of generated */
	unsigned stored_sessions;	/* numberOfStoredSessions (default 20480); 0: no cache */
	unsigned session_timeout;	/* sessionTimeout, s (0: OpenSSL's 300) */
	bool prefer_server_ciphers;	/* preferServerCiphers (default true) */
	bool release_buffers;		/* releaseBuffers (default true) */
	bool renegotiation;		/* enableRenegotiation (default false) */
	const char *keylog_file;	/* keyLogFile: NSS key log lines appended */
	const char *alpn;		/* ALPN protocols offered, wire format ("\x02h2"...); NULL: none */
	size_t alpn_len;
};

/* newServer's TLS keys. */
struct dlb_tls_client_opts {
	bool validate;			/* validateCertificates (default true) */
	const char *ca_store;		/* caStore: a PEM file or a hashed directory; NULL: the system's */
	const char *ciphers;
	const char *ciphers13;
	bool release_buffers;		/* default true */
	bool renegotiation;		/* default false */
	const char *keylog_file;
	const char *alpn;		/* ALPN asked ("\x02h2" for DoH); NULL: none */
	size_t alpn_len;
};

void dlb_tls_server_opts_default(struct dlb_tls_server_opts *o);
void dlb_tls_client_opts_default(struct dlb_tls_client_opts *o);

/** minTLSVersion's names ("tls1.0", "tls1.1", "tls1.2", "tls1.3") to an
 * OpenSSL version; -1 for any other. */
int dlb_tls_version_parse(const char *name);

struct dlb_tls_server;
struct dlb_tls_client;

/**
 * A server context from @o (copied). Every certificate and key is loaded
 * and checked against each other, every OCSP file read, the ciphers and the
 * version set: any failure is an error (@err, @errsz), never a weaker
 * context. @return NULL on error.
 */
struct dlb_tls_server *dlb_tls_server_new(const struct dlb_tls_server_opts *o, char *err,
					  size_t errsz);
void dlb_tls_server_free(struct dlb_tls_server *s);

/** A new server-side SSL for one connection (its SSL_CTX the current one), or NULL. */
SSL *dlb_tls_server_ssl_new(struct dlb_tls_server *s);

/**
 * Reload the certificates, keys and OCSP responses from their files
 * (reloadCertificates, SIGHUP): a new context, swapped in when it is
 * complete. On error (@err) the running context stays. @return 0 or -1.
 */
int dlb_tls_server_reload(struct dlb_tls_server *s, char *err, size_t errsz);

/**
 * Keep @sess (NULL: none) in *@slot, the one outgoing TLS session a worker
 * keeps per backend, freeing the one there; counted for
 * getOutgoingTLSSessionCacheSize(). Ownership: takes @sess. Thread: the
 * slot's owner.
 */
void dlb_tls_session_keep(SSL_SESSION **slot, SSL_SESSION *sess);
/** Outgoing TLS sessions kept now, over all workers and backends. Thread: any. */
uint64_t dlb_tls_sessions_kept(void);

/**
 * generateOCSPResponse: write to @out an OCSP response (DER) saying that
 * the certificate in @cert_file is good, signed by the CA of @ca_cert_file
 * with the key in @ca_key_file, valid from now for @ndays days and @nmin
 * minutes, for a local PKI or tests (ocspResponses of addTLSLocal and
 * addDOHLocal). Thread: any. @return 0, or -1 with @err.
 */
int dlb_tls_generate_ocsp(const char *cert_file, const char *ca_cert_file, const char *ca_key_file,
			  const char *out, int ndays, int nmin, char *err, size_t errsz);

/** rotateTicketsKey(): a new random key encrypts from now on; the oldest of
 * more than numberOfTicketsKeys goes. */
int dlb_tls_server_rotate_ticket_key(struct dlb_tls_server *s, char *err, size_t errsz);

/** Rotate the ticket key when ticketsKeysRotationDelay has passed since the
 * last rotation (the first call only starts the clock). @now: seconds, any
 * monotonic clock. Main thread. */
void dlb_tls_server_maintain(struct dlb_tls_server *s, double now);

/** loadTicketsKeys(file): the keys of @file (80 bytes each) pushed in the
 * file's order, so the last one encrypts. At least one key must load. */
int dlb_tls_server_load_ticket_keys(struct dlb_tls_server *s, const char *file, char *err,
				    size_t errsz);

/** How many ticket keys the ring holds. */
size_t dlb_tls_server_ticket_keys(struct dlb_tls_server *s);

/** Were @a and @b built with the same options (files, ciphers, versions,
 * tickets...)? */
bool dlb_tls_server_same_opts(const struct dlb_tls_server *a, const struct dlb_tls_server *b);

/** The options the context was built with. */
const struct dlb_tls_server_opts *dlb_tls_server_opts(const struct dlb_tls_server *s);

/** A client context from @o (copied): peer certificates validated against
 * the CA store unless !validate. One reference, the caller's. @return NULL
 * on error (@err). */
struct dlb_tls_client *dlb_tls_client_new(const struct dlb_tls_client_opts *o, char *err,
					  size_t errsz);
/** One more reference to @c (a reload's copy of a backend shares its
 * context). Thread: any. @return @c. */
struct dlb_tls_client *dlb_tls_client_ref(struct dlb_tls_client *c);
/** Drop a reference; the last one frees the context. NULL: nothing. */
void dlb_tls_client_free(struct dlb_tls_client *c);

/** Were @a and @b built with the same options? Two NULLs are the same. */
bool dlb_tls_client_same_opts(const struct dlb_tls_client *a, const struct dlb_tls_client *b);

/**
 * A new client-side SSL for one connection: SNI and the certificate's
 * expected name @subject_name; or, without one, the IP address
 * @subject_addr (text) expected in the certificate, and no SNI (RFC 6066
 * has no SNI for addresses). Neither: only the chain is checked. The names
 * are checked only when the context validates.
 */
SSL *dlb_tls_client_ssl_new(struct dlb_tls_client *c, const char *subject_name,
			    const char *subject_addr);

/*
 * dnsdist's per-frontend TLS figures (docs/tls.md#counters): the version a
 * connection negotiated, and why a handshake failed, in dnsdist 1.7's order
 * and with its names (its OpenSSL provider's TLSErrorCounters).
 */
enum dlb_tls_version_idx {
	DLB_TLS_V10 = 0,
	DLB_TLS_V11,
	DLB_TLS_V12,
	DLB_TLS_V13,
	DLB_TLS_VUNKNOWN,		/* SSLv3, DTLS...: dnsdist's "unknown"/"other" */
	DLB_TLS_VCOUNT,
};

enum dlb_tls_failure {
	DLB_TLS_FAIL_NONE = -1,
	DLB_TLS_FAIL_DH_KEY_TOO_SMALL = 0,	/* dhKeyTooSmall */
	DLB_TLS_FAIL_INAPPROPRIATE_FALLBACK,	/* inappropriateFallBack */
	DLB_TLS_FAIL_NO_SHARED_CIPHER,		/* noSharedCipher */
	DLB_TLS_FAIL_UNKNOWN_CIPHER_TYPE,	/* unknownCipherType */
	DLB_TLS_FAIL_UNKNOWN_KEY_EXCHANGE_TYPE,	/* unknownKeyExchangeType */
	DLB_TLS_FAIL_UNKNOWN_PROTOCOL,		/* unknownProtocol */
	DLB_TLS_FAIL_UNSUPPORTED_EC,		/* unsupportedEC */
	DLB_TLS_FAIL_UNSUPPORTED_PROTOCOL,	/* unsupportedProtocol (a version too low too) */
	DLB_TLS_FAIL_COUNT,
};

/** dnsdist's names of the failures, the /metrics `error` label ("dhKeyTooSmall"...). */
extern const char *const dlb_tls_failure_names[DLB_TLS_FAIL_COUNT];

/** What one server-side connection met in its handshake, as dnsdist counts it. */
struct dlb_tls_handshake_info {
	bool unknown_ticket_key;	/* a ticket under a key the ring no longer has (full handshake) */
	bool inactive_ticket_key;	/* resumed from a ticket under an older key */
	enum dlb_tls_failure failure;	/* the reason of the last alert, else DLB_TLS_FAIL_NONE */
};

/** What @ssl (from dlb_tls_server_ssl_new) met so far: marks that the ticket and
 * info callbacks leave in its ex_data (nothing of ours allocated). Thread: the
 * connection's. */
void dlb_tls_handshake_info(const SSL *ssl, struct dlb_tls_handshake_info *out);

/** The version @ssl negotiated, as an index of dnsdist's per-version figures.
 * Thread: the connection's. */
enum dlb_tls_version_idx dlb_tls_version_index(const SSL *ssl);

/** When the ticket key rotates next (wall clock, s); 0 when it never does
 * by itself (ticketsKeysRotationDelay 0). showTLSContexts() prints it.
 * Thread: any (a relaxed load). */
int64_t dlb_tls_server_next_rotation(const struct dlb_tls_server *s);
/** Why the handshake of client @ssl failed, for messages: the certificate
 * check's verdict when it failed, else OpenSSL's error @error (0: none
 * kept). */
const char *dlb_tls_client_failure(SSL *ssl, unsigned long error, char *buf, size_t bufsz);

/** OpenSSL's error queue as one line (emptied), for messages. */
const char *dlb_tls_error(char *buf, size_t bufsz);

#endif
