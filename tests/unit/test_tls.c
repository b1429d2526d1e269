/*
 * test_tls.c - the TLS contexts (dnslb/core/tls.c) with no socket: a
 * server and a client SSL joined by an OpenSSL BIO pair. The certificates
 * (a test CA, ECDSA P-256) are made here, into a temporary directory.
 * Checks: validation (the right name, a wrong name, an unknown CA, an
 * expired certificate, validation off), session tickets (resumption, key
 * rotation, a key file shared by two servers), certificate reload (new
 * connections get the new certificate, a failed reload keeps the old one),
 * bad options, the minimum version, ALPN, OCSP stapling and the key log.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509v3.h>

#include "dnslb/core/tls.h"
#include "tls_fx.h"

static struct dlb_tls_server *
server(const char *cert, const char *key, void (*tweak)(struct dlb_tls_server_opts *))
{
	struct dlb_tls_server_opts o;
	struct dlb_tls_server *s;
	char err[512];

	dlb_tls_server_opts_default(&o);
	o.certs[0] = path(cert);
	o.keys[0] = path(key);
	o.ncerts = 1;
	if (tweak != NULL)
		tweak(&o);
	s = dlb_tls_server_new(&o, err, sizeof(err));
	if (s == NULL)
		fail_msg("server: %s", err);
	return s;
}

static struct dlb_tls_client *
client(bool validate, const char *ca)
{
	struct dlb_tls_client_opts o;
	struct dlb_tls_client *c;
	char err[512];

	dlb_tls_client_opts_default(&o);
	o.validate = validate;
	o.ca_store = ca ? path(ca) : NULL;
	c = dlb_tls_client_new(&o, err, sizeof(err));
	if (c == NULL)
		fail_msg("client: %s", err);
	return c;
}

/* One connection over a BIO pair: both handshakes driven to the end, then
 * one byte each way (so that TLS 1.3 tickets reach the client). */
struct conn {
	SSL *s, *c;
	bool ok;
};

static void
drive(struct conn *k)
{
	int sdone = 0, cdone = 0;

	for (int i = 0; i < 200 && !(sdone == 1 && cdone == 1); i++) {
		if (cdone != 1) {
			int r = SSL_do_handshake(k->c);

			cdone = r == 1 ? 1 : (SSL_get_error(k->c, r) == SSL_ERROR_WANT_READ ? 0 : -1);
		}
		if (sdone != 1) {
			int r = SSL_do_handshake(k->s);

			sdone = r == 1 ? 1 : (SSL_get_error(k->s, r) == SSL_ERROR_WANT_READ ? 0 : -1);
		}
		if (sdone < 0 || cdone < 0)
			break;
	}
	k->ok = sdone == 1 && cdone == 1;
	if (k->ok) {
		char b = 0;

		assert_int_equal(SSL_write(k->s, "x", 1), 1);
		assert_int_equal(SSL_read(k->c, &b, 1), 1);
		assert_int_equal(SSL_write(k->c, "y", 1), 1);
		assert_int_equal(SSL_read(k->s, &b, 1), 1);
	}
}

/* A server and a client SSL joined by a BIO pair, not yet driven. The client
 * expects @name (or the address @addr). */
static struct conn
pair(struct dlb_tls_server *s, struct dlb_tls_client *c, const char *name, const char *addr)
{
	struct conn k = { 0 };
	BIO *a, *b;

	k.s = dlb_tls_server_ssl_new(s);
	k.c = dlb_tls_client_ssl_new(c, name, addr);
	assert_non_null(k.s);
	assert_non_null(k.c);
	assert_int_equal(BIO_new_bio_pair(&a, 0, &b, 0), 1);
	SSL_set_bio(k.s, a, a);
	SSL_set_bio(k.c, b, b);
	SSL_set_accept_state(k.s);
	SSL_set_connect_state(k.c);
	return k;
}

static struct conn
connect_with(struct dlb_tls_server *s, struct dlb_tls_client *c, const char *name,
	     SSL_SESSION *resume)
{
	struct conn k = pair(s, c, name, NULL);

	if (resume != NULL)
		assert_int_equal(SSL_set_session(k.c, resume), 1);
	drive(&k);
	return k;
}

/* Both ends closed properly (a session freed without it is no longer
 * resumable), then freed. */
static void
conn_free(struct conn *k)
{
	if (k->ok) {
		SSL_shutdown(k->c);
		SSL_shutdown(k->s);
	}
	SSL_free(k->s);
	SSL_free(k->c);
}

static void
test_validated(void **state)
{
	struct dlb_tls_server *s = server("dns.pem", "dns.key", NULL);
	struct dlb_tls_client *c = client(true, "ca.pem");
	struct conn k = connect_with(s, c, "dns.test", NULL);

	(void)state;
	assert_true(k.ok);
	assert_int_equal(SSL_get_verify_result(k.c), X509_V_OK);
	conn_free(&k);
	dlb_tls_client_free(c);
	dlb_tls_server_free(s);
}

static void
expect_refused(const char *cert, const char *key, bool validate, const char *ca, const char *name,
	       long why)
{
	struct dlb_tls_server *s = server(cert, key, NULL);
	struct dlb_tls_client *c = client(validate, ca);
	struct conn k = connect_with(s, c, name, NULL);
	char msg[256];

	assert_false(k.ok);
	assert_int_equal(SSL_get_verify_result(k.c), why);
	assert_non_null(strstr(dlb_tls_client_failure(k.c, 0, msg, sizeof(msg)),
			       "certificate verify failed: "));
	conn_free(&k);
	dlb_tls_client_free(c);
	dlb_tls_server_free(s);
}

/* A wrong name, an unknown CA, an expired certificate: refused. */
static void
test_validation_failures(void **state)
{
	(void)state;
	expect_refused("dns.pem", "dns.key", true, "ca.pem", "other.test", X509_V_ERR_HOSTNAME_MISMATCH);
	expect_refused("dns.pem", "dns.key", true, "other-ca.pem", "dns.test",
		       X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY);
	expect_refused("old.pem", "old.key", true, "ca.pem", "dns.test", X509_V_ERR_CERT_HAS_EXPIRED);
}

/* A client context is shared by counted references (a reload's copy of a
 * server); contexts compare by their options. */
static void
test_client_refs(void **state)
{
	struct dlb_tls_server *s = server("dns.pem", "dns.key", NULL);
	struct dlb_tls_client *c = client(true, "ca.pem"), *d = client(true, "ca.pem");
	struct dlb_tls_client *other = client(true, "other-ca.pem");
	struct conn k;

	(void)state;
	assert_true(dlb_tls_client_same_opts(c, d));
	assert_false(dlb_tls_client_same_opts(c, other));
	assert_false(dlb_tls_client_same_opts(c, NULL));
	assert_true(dlb_tls_client_same_opts(NULL, NULL));
	assert_ptr_equal(dlb_tls_client_ref(c), c);
	dlb_tls_client_free(c);		/* one reference left */
	k = connect_with(s, c, "dns.test", NULL);
	assert_true(k.ok);
	conn_free(&k);
	dlb_tls_client_free(c);
	dlb_tls_client_free(d);
	dlb_tls_client_free(other);
	dlb_tls_server_free(s);
}

/* validateCertificates=false: an unknown CA and a wrong name are let through. */
static void
test_no_validation(void **state)
{
	struct dlb_tls_server *s = server("dns.pem", "dns.key", NULL);
	struct dlb_tls_client *c = client(false, "other-ca.pem");
	struct conn k = connect_with(s, c, "other.test", NULL);

	(void)state;
	assert_true(k.ok);
	conn_free(&k);
	dlb_tls_client_free(c);
	dlb_tls_server_free(s);
}

static void
two_keys(struct dlb_tls_server_opts *o)
{
	o->ticket_keys = 2;
}

/* A session from a full handshake, with the server's current ticket key. */
static SSL_SESSION *
full_session(struct dlb_tls_server *s, struct dlb_tls_client *c)
{
	struct conn k = connect_with(s, c, "dns.test", NULL);
	SSL_SESSION *sess;

	assert_true(k.ok);
	assert_false(SSL_session_reused(k.c));
	sess = SSL_get1_session(k.c);
	assert_non_null(sess);
	conn_free(&k);
	return sess;
}

/* Resume @sess (TLS 1.3 sessions are single-use: each is tried once). */
static bool
resumes(struct dlb_tls_server *s, struct dlb_tls_client *c, SSL_SESSION *sess)
{
	struct conn k = connect_with(s, c, "dns.test", sess);
	bool reused;

	assert_true(k.ok);
	reused = SSL_session_reused(k.c);
	conn_free(&k);
	SSL_SESSION_free(sess);
	return reused;
}

/* A session resumes; one ticketed before a rotation still does (the old key
 * decrypts); one whose key left the ring (two keys kept, two more
 * rotations) does not. */
static void
test_tickets_rotation(void **state)
{
	struct dlb_tls_server *s = server("dns.pem", "dns.key", two_keys);
	struct dlb_tls_client *c = client(true, "ca.pem");
	SSL_SESSION *a, *b, *d;
	char err[256];

	(void)state;
	a = full_session(s, c);
	b = full_session(s, c);
	d = full_session(s, c);
	assert_int_equal(dlb_tls_server_ticket_keys(s), 1);
	assert_true(resumes(s, c, a));

	assert_int_equal(dlb_tls_server_rotate_ticket_key(s, err, sizeof(err)), 0);
	assert_int_equal(dlb_tls_server_ticket_keys(s), 2);
	assert_true(resumes(s, c, b));

	assert_int_equal(dlb_tls_server_rotate_ticket_key(s, err, sizeof(err)), 0);
	assert_int_equal(dlb_tls_server_rotate_ticket_key(s, err, sizeof(err)), 0);
	assert_int_equal(dlb_tls_server_ticket_keys(s), 2);
	assert_false(resumes(s, c, d));
	dlb_tls_client_free(c);
	dlb_tls_server_free(s);
}

static void
tls13_only(struct dlb_tls_server_opts *o)
{
	o->min_version = TLS1_3_VERSION;
}

/* What the server side of @k met (dlb_tls_handshake_info). */
static struct dlb_tls_handshake_info
server_info(const struct conn *k)
{
	struct dlb_tls_handshake_info hi;

	dlb_tls_handshake_info(k->s, &hi);
	return hi;
}

/* dnsdist's per-handshake figures, as the listener reads them from the
 * server's SSL: the ticket's key (current, inactive, unknown), the version,
 * the failure's reason (a version under minTLSVersion, no cipher shared);
 * the next rotation follows the last one. */
static void
test_handshake_info(void **state)
{
	struct dlb_tls_server *s = server("dns.pem", "dns.key", two_keys);
	struct dlb_tls_client *c = client(true, "ca.pem");
	struct dlb_tls_server *s13 = server("dns.pem", "dns.key", tls13_only);
	SSL_SESSION *a = full_session(s, c), *b = full_session(s, c);
	struct dlb_tls_handshake_info hi;
	char err[256];
	struct conn k;
	int64_t next = dlb_tls_server_next_rotation(s);

	(void)state;
	assert_true(next >= (int64_t)time(NULL) + 43200 - 5 && next <= (int64_t)time(NULL) + 43200);
	k = connect_with(s, c, "dns.test", NULL);
	hi = server_info(&k);
	assert_false(hi.unknown_ticket_key || hi.inactive_ticket_key);
	assert_int_equal(hi.failure, DLB_TLS_FAIL_NONE);
	assert_int_equal(dlb_tls_version_index(k.s), DLB_TLS_V13);
	conn_free(&k);

	assert_int_equal(dlb_tls_server_rotate_ticket_key(s, err, sizeof(err)), 0);
	k = connect_with(s, c, "dns.test", a);
	assert_true(SSL_session_reused(k.s));
	hi = server_info(&k);
	assert_true(hi.inactive_ticket_key && !hi.unknown_ticket_key);
	conn_free(&k);

	assert_int_equal(dlb_tls_server_rotate_ticket_key(s, err, sizeof(err)), 0);
	assert_int_equal(dlb_tls_server_rotate_ticket_key(s, err, sizeof(err)), 0);
	k = connect_with(s, c, "dns.test", b);
	assert_false(SSL_session_reused(k.s));
	hi = server_info(&k);
	assert_true(hi.unknown_ticket_key && !hi.inactive_ticket_key);
	conn_free(&k);

	k = pair(s, c, "dns.test", NULL);
	SSL_set_max_proto_version(k.c, TLS1_2_VERSION);
	drive(&k);
	assert_true(k.ok);
	assert_int_equal(dlb_tls_version_index(k.s), DLB_TLS_V12);
	conn_free(&k);

	k = pair(s13, c, "dns.test", NULL);
	SSL_set_max_proto_version(k.c, TLS1_2_VERSION);
	drive(&k);
	assert_false(k.ok);
	assert_int_equal(server_info(&k).failure, DLB_TLS_FAIL_UNSUPPORTED_PROTOCOL);
	assert_string_equal(dlb_tls_failure_names[DLB_TLS_FAIL_UNSUPPORTED_PROTOCOL],
			    "unsupportedProtocol");
	conn_free(&k);

	k = pair(s, c, "dns.test", NULL);
	SSL_set_max_proto_version(k.c, TLS1_2_VERSION);
	assert_int_equal(SSL_set_cipher_list(k.c, "AES128-SHA256"), 1);
	drive(&k);
	assert_false(k.ok);
	assert_int_equal(server_info(&k).failure, DLB_TLS_FAIL_NO_SHARED_CIPHER);
	conn_free(&k);
	ERR_clear_error();
	SSL_SESSION_free(a);
	SSL_SESSION_free(b);
	dlb_tls_client_free(c);
	dlb_tls_server_free(s13);
	dlb_tls_server_free(s);
}

static const char *key_file;

static void
with_key_file(struct dlb_tls_server_opts *o)
{
	o->ticket_key_file = key_file;
}

/* Two servers on one ticketKeyFile resume each other's sessions; a file too
 * short for one key is refused. */
static void
test_ticket_key_file(void **state)
{
	uint8_t keys[2 * DLB_TLS_TICKET_KEY];
	struct dlb_tls_server *a, *b;
	struct dlb_tls_client *c = client(true, "ca.pem");
	struct dlb_tls_server_opts o;
	FILE *f;
	char err[256];

	(void)state;
	for (size_t i = 0; i < sizeof(keys); i++)
		keys[i] = (uint8_t)(i * 7 + 1);
	key_file = path("tickets.key");
	f = fopen(key_file, "wb");
	assert_non_null(f);
	assert_int_equal(fwrite(keys, 1, sizeof(keys), f), sizeof(keys));
	fclose(f);
	a = server("dns.pem", "dns.key", with_key_file);
	b = server("dns.pem", "dns.key", with_key_file);
	assert_int_equal(dlb_tls_server_ticket_keys(a), 2);

	assert_true(resumes(b, c, full_session(a, c)));

	f = fopen(key_file, "wb");
	assert_non_null(f);
	assert_int_equal(fwrite(keys, 1, 50, f), 50);
	fclose(f);
	dlb_tls_server_opts_default(&o);
	o.certs[0] = path("dns.pem");
	o.keys[0] = path("dns.key");
	o.ncerts = 1;
	o.ticket_key_file = key_file;
	assert_null(dlb_tls_server_new(&o, err, sizeof(err)));
	assert_non_null(strstr(err, "unable to load a ticket key"));
	dlb_tls_server_free(a);
	dlb_tls_server_free(b);
	dlb_tls_client_free(c);
}

static long
peer_serial(const struct conn *k)
{
	X509 *x = SSL_get1_peer_certificate(k->c);
	long serial;

	assert_non_null(x);
	serial = ASN1_INTEGER_get(X509_get0_serialNumber(x));
	X509_free(x);
	return serial;
}

static void
copy_file(const char *from, const char *to)
{
	char buf[8192];
	FILE *in = fopen(from, "rb"), *out = fopen(to, "wb");
	size_t n;

	assert_non_null(in);
	assert_non_null(out);
	while ((n = fread(buf, 1, sizeof(buf), in)) > 0)
		assert_int_equal(fwrite(buf, 1, n, out), n);
	fclose(in);
	fclose(out);
}

/* reloadCertificates: a connection begun before the reload finishes on the
 * old certificate, new ones get the new one; a broken file keeps the old. */
static void
test_reload(void **state)
{
	struct dlb_tls_server *s;
	struct dlb_tls_client *c = client(true, "ca.pem");
	struct conn k, before;
	char err[512];

	(void)state;
	copy_file(path("dns.pem"), path("live.pem"));
	s = server("live.pem", "dns.key", NULL);
	k = connect_with(s, c, "dns.test", NULL);
	assert_true(k.ok);
	assert_int_equal(peer_serial(&k), 1);
	conn_free(&k);

	/* an SSL made now, its handshake after the reload */
	before = pair(s, c, "dns.test", NULL);

	copy_file(path("dns2.pem"), path("live.pem"));
	assert_int_equal(dlb_tls_server_reload(s, err, sizeof(err)), 0);
	drive(&before);
	assert_true(before.ok);
	assert_int_equal(peer_serial(&before), 1);
	conn_free(&before);
	k = connect_with(s, c, "dns.test", NULL);
	assert_true(k.ok);
	assert_int_equal(peer_serial(&k), 2);
	conn_free(&k);

	copy_file(path("wrongkey.key"), path("live.pem"));	/* not a certificate */
	assert_int_equal(dlb_tls_server_reload(s, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "unable to load the certificate"));
	k = connect_with(s, c, "dns.test", NULL);
	assert_true(k.ok);
	assert_int_equal(peer_serial(&k), 2);
	conn_free(&k);
	dlb_tls_client_free(c);
	dlb_tls_server_free(s);
}

static void
expect_error(const char *cert, const char *key, const char *ciphers, const char *ciphers13,
	     const char *ocsp, const char *want)
{
	struct dlb_tls_server_opts o;
	char err[512];

	dlb_tls_server_opts_default(&o);
	o.certs[0] = path(cert);
	o.keys[0] = path(key);
	o.ncerts = 1;
	o.ciphers = ciphers;
	o.ciphers13 = ciphers13;
	if (ocsp != NULL) {
		o.ocsp[0] = path(ocsp);
		o.nocsp = 1;
	}
	assert_null(dlb_tls_server_new(&o, err, sizeof(err)));
	if (strstr(err, want) == NULL)
		fail_msg("error '%s' does not say '%s'", err, want);
}

static void
test_bad_options(void **state)
{
	struct dlb_tls_client_opts co;
	char err[512];

	(void)state;
	expect_error("dns.pem", "wrongkey.key", NULL, NULL, NULL, "does not match the certificate");
	expect_error("nosuch.pem", "dns.key", NULL, NULL, NULL, "unable to load the certificate");
	expect_error("dns.pem", "nosuch.key", NULL, NULL, NULL, "unable to load the key");
	expect_error("dns.pem", "dns.key", "NOT-A-CIPHER", NULL, NULL, "invalid ciphers NOT-A-CIPHER");
	expect_error("dns.pem", "dns.key", NULL, "TLS_NOPE", NULL, "invalid ciphersTLS13 TLS_NOPE");
	expect_error("dns.pem", "dns.key", NULL, NULL, "nosuch.ocsp", "unable to open the OCSP response");
	dlb_tls_client_opts_default(&co);
	co.ca_store = path("nosuch-ca.pem");
	assert_null(dlb_tls_client_new(&co, err, sizeof(err)));
	assert_non_null(strstr(err, "unable to read the CA store"));
	assert_non_null(strstr(err, "No such file or directory"));
	co.ca_store = path("dns.key");	/* no certificate in it */
	assert_null(dlb_tls_client_new(&co, err, sizeof(err)));
	assert_non_null(strstr(err, "unable to load the CA store"));
	assert_int_equal(dlb_tls_version_parse("tls1.0"), TLS1_VERSION);
	assert_int_equal(dlb_tls_version_parse("tls1.3"), TLS1_3_VERSION);
	assert_int_equal(dlb_tls_version_parse("ssl3"), -1);
}


/* minTLSVersion: a TLS 1.2 client of a tls1.3 server is refused. */
static void
test_min_version(void **state)
{
	struct dlb_tls_server *s = server("dns.pem", "dns.key", tls13_only);
	struct dlb_tls_client *c = client(true, "ca.pem");
	struct conn k;

	(void)state;
	k = pair(s, c, "dns.test", NULL);
	SSL_set_max_proto_version(k.c, TLS1_2_VERSION);
	drive(&k);
	assert_false(k.ok);
	conn_free(&k);
	k = connect_with(s, c, "dns.test", NULL);
	assert_true(k.ok);
	assert_string_equal(SSL_get_version(k.c), "TLSv1.3");
	conn_free(&k);
	dlb_tls_client_free(c);
	dlb_tls_server_free(s);
}

static const char *ocsp_file, *keylog_file;

static void
extras(struct dlb_tls_server_opts *o)
{
	o->ocsp[0] = ocsp_file;
	o->nocsp = 1;
	o->keylog_file = keylog_file;
	o->alpn = "\x02h2\x08http/1.1";
	o->alpn_len = 12;
}

/* OCSP stapling, the key log and ALPN. */
static void
test_ocsp_keylog_alpn(void **state)
{
	struct dlb_tls_server *s;
	struct dlb_tls_client_opts co;
	struct dlb_tls_client *c;
	struct conn k;
	const unsigned char *resp, *proto;
	unsigned plen;
	long n;
	FILE *f;
	char line[512], err[256];

	(void)state;
	ocsp_file = path("dns.ocsp");
	keylog_file = path("keys.log");
	f = fopen(ocsp_file, "wb");
	assert_non_null(f);
	fputs("a stapled response", f);
	fclose(f);
	s = server("dns.pem", "dns.key", extras);
	dlb_tls_client_opts_default(&co);
	co.ca_store = path("ca.pem");
	co.alpn = "\x02h2";
	co.alpn_len = 3;
	c = dlb_tls_client_new(&co, err, sizeof(err));
	assert_non_null(c);

	k = pair(s, c, "dns.test", NULL);
	SSL_set_tlsext_status_type(k.c, TLSEXT_STATUSTYPE_ocsp);
	drive(&k);
	assert_true(k.ok);
	n = SSL_get_tlsext_status_ocsp_resp(k.c, &resp);
	assert_int_equal(n, 18);
	assert_memory_equal(resp, "a stapled response", 18);
	SSL_get0_alpn_selected(k.c, &proto, &plen);
	assert_int_equal(plen, 2);
	assert_memory_equal(proto, "h2", 2);
	conn_free(&k);

	f = fopen(keylog_file, "r");
	assert_non_null(f);
	assert_non_null(fgets(line, sizeof(line), f));
	assert_non_null(strstr(line, "_SECRET "));
	fclose(f);
	dlb_tls_client_free(c);
	dlb_tls_server_free(s);
}

/* The IP address a backend's certificate must carry (subjectAddr). */
static void
test_subject_addr(void **state)
{
	struct dlb_tls_server *s = server("dns.pem", "dns.key", NULL);
	struct dlb_tls_client *c = client(true, "ca.pem");
	struct conn k;

	(void)state;
	for (int i = 0; i < 2; i++) {
		k = pair(s, c, NULL, i == 0 ? "127.0.0.1" : "127.0.0.2");
		drive(&k);
		assert_int_equal(k.ok, i == 0);
		conn_free(&k);
	}
	dlb_tls_client_free(c);
	dlb_tls_server_free(s);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_validated),
		cmocka_unit_test(test_validation_failures),
		cmocka_unit_test(test_no_validation),
		cmocka_unit_test(test_client_refs),
		cmocka_unit_test(test_tickets_rotation),
		cmocka_unit_test(test_handshake_info),
		cmocka_unit_test(test_ticket_key_file),
		cmocka_unit_test(test_reload),
		cmocka_unit_test(test_bad_options),
		cmocka_unit_test(test_min_version),
		cmocka_unit_test(test_ocsp_keylog_alpn),
		cmocka_unit_test(test_subject_addr),
	};

	return cmocka_run_group_tests(tests, make_pki, remove_pki);
}
