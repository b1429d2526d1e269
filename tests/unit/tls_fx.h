/*
 * tls_fx.h - a test PKI for the TLS unit tests (test_tls.c,
 * test_stream_tls.c): a CA and certificates (ECDSA P-256) made with
 * OpenSSL into a temporary directory by make_pki, removed by remove_pki;
 * path(name) names a file there.
 *
 * Files: ca.pem (the test CA), other-ca.pem (another CA), dns.pem/dns.key
 * ("dns.test" and 127.0.0.1, serial 1), dns2.pem (serial 2, same key),
 * old.pem/old.key (expired), wrongkey.key (another key).
 *
 * Header-only (static). Include after <cmocka.h>.
 */
#ifndef DNSLB_TESTS_UNIT_TLS_FX_H
#define DNSLB_TESTS_UNIT_TLS_FX_H

#include <stdio.h>
#include <stdlib.h>

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509v3.h>

static char dir[] = "/tmp/dnslb-test-tls-XXXXXX";
static char path_buf[16][256];
static int npaths;

static const char *
path(const char *name)
{
	char *p = path_buf[npaths++ % 16];

	snprintf(p, sizeof(path_buf[0]), "%s/%s", dir, name);
	return p;
}

static EVP_PKEY *
new_key(void)
{
	EVP_PKEY *k = EVP_EC_gen("P-256");

	assert_non_null(k);
	return k;
}

static void
add_ext(X509 *x, X509 *issuer, int nid, const char *value)
{
	X509V3_CTX ctx;
	X509_EXTENSION *ext;

	X509V3_set_ctx(&ctx, issuer, x, NULL, NULL, 0);
	ext = X509V3_EXT_conf_nid(NULL, &ctx, nid, value);
	assert_non_null(ext);
	assert_int_equal(X509_add_ext(x, ext, -1), 1);
	X509_EXTENSION_free(ext);
}

/* A certificate for @cn (also its DNS SAN unless a CA), signed by @ca/@ca_key
 * (NULL: self-signed), valid from @from to @to seconds from now. */
static X509 *
new_cert(EVP_PKEY *key, const char *cn, X509 *ca, EVP_PKEY *ca_key, bool is_ca, long from, long to,
	 long serial)
{
	X509 *x = X509_new();
	X509_NAME *name;
	char san[300];

	assert_non_null(x);
	X509_set_version(x, 2);
	ASN1_INTEGER_set(X509_get_serialNumber(x), serial);
	X509_gmtime_adj(X509_getm_notBefore(x), from);
	X509_gmtime_adj(X509_getm_notAfter(x), to);
	X509_set_pubkey(x, key);
	name = X509_get_subject_name(x);
	X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, (const unsigned char *)cn, -1, -1, 0);
	X509_set_issuer_name(x, ca ? X509_get_subject_name(ca) : name);
	if (is_ca) {
		add_ext(x, ca ? ca : x, NID_basic_constraints, "critical,CA:TRUE");
		add_ext(x, ca ? ca : x, NID_key_usage, "critical,keyCertSign,cRLSign");
	} else {
		snprintf(san, sizeof(san), "DNS:%s,IP:127.0.0.1", cn);
		add_ext(x, ca ? ca : x, NID_subject_alt_name, san);
	}
	assert_true(X509_sign(x, ca_key ? ca_key : key, EVP_sha256()) > 0);
	return x;
}

static void
write_cert(const char *file, X509 *x)
{
	FILE *f = fopen(file, "w");

	assert_non_null(f);
	assert_int_equal(PEM_write_X509(f, x), 1);
	fclose(f);
}

static void
write_key(const char *file, EVP_PKEY *k)
{
	FILE *f = fopen(file, "w");

	assert_non_null(f);
	assert_int_equal(PEM_write_PrivateKey(f, k, NULL, NULL, 0, NULL, NULL), 1);
	fclose(f);
}

/* The files named at the top, in a new temporary directory. */
static int
make_pki(void **state)
{
	EVP_PKEY *ca_key, *other_key, *key, *old_key, *wrong;
	X509 *ca, *other, *crt;

	(void)state;
	assert_non_null(mkdtemp(dir));
	ca_key = new_key();
	other_key = new_key();
	key = new_key();
	old_key = new_key();
	wrong = new_key();
	ca = new_cert(ca_key, "dnslb test CA", NULL, NULL, true, -60, 86400, 100);
	other = new_cert(other_key, "another CA", NULL, NULL, true, -60, 86400, 101);
	write_cert(path("ca.pem"), ca);
	write_cert(path("other-ca.pem"), other);
	crt = new_cert(key, "dns.test", ca, ca_key, false, -60, 86400, 1);
	write_cert(path("dns.pem"), crt);
	X509_free(crt);
	crt = new_cert(key, "dns.test", ca, ca_key, false, -60, 86400, 2);
	write_cert(path("dns2.pem"), crt);
	X509_free(crt);
	write_key(path("dns.key"), key);
	crt = new_cert(old_key, "dns.test", ca, ca_key, false, -86400, -3600, 3);
	write_cert(path("old.pem"), crt);
	X509_free(crt);
	write_key(path("old.key"), old_key);
	write_key(path("wrongkey.key"), wrong);
	X509_free(ca);
	X509_free(other);
	EVP_PKEY_free(ca_key);
	EVP_PKEY_free(other_key);
	EVP_PKEY_free(key);
	EVP_PKEY_free(old_key);
	EVP_PKEY_free(wrong);
	return 0;
}

static int
remove_pki(void **state)
{
	char cmd[300];

	(void)state;
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	return system(cmd) == 0 ? 0 : -1;
}

#endif
