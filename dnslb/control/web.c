/*
 * web.c - the built-in web server (web.h, docs/web.md).
 *
 * Each webserver() address is one libmicrohttpd daemon in external-polling
 * epoll mode over a socket bound at config time: an ev_io on MHD's epoll fd
 * and an ev_timer armed from MHD_get_timeout() drive MHD_run() on the main
 * loop. Handlers answer at once from main-thread state, so no request is
 * ever suspended and no thread is started.
 *
 * A request goes: accept policy (web ACL, connection cap) -> Origin check
 * (a request naming an Origin other than its own Host is refused: no
 * cross-origin access, no Access-Control-Allow-Origin) -> authentication
 * (dnsdist 1.7's rules, handle_auth()) -> route -> method. Every answer
 * carries the security headers and the custom headers; errors are JSON
 * objects {"error": "..."}.
 *
 * Bounds: request headers and URL fit in MHD's per-connection pool
 * (WEB_CONN_MEMORY; MHD answers 414/431 past it), request bodies are refused
 * (no endpoint takes one), idle connections close after WEB_CONN_TIMEOUT,
 * open connections are capped by maxConcurrentConnections, and a response
 * body is capped at WEB_MAX_BODY (an internal error past it).
 *
 * Thread: main only.
 */
#include "dnslb/control/web.h"

#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <ev.h>
#include <inttypes.h>
#include <math.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "dnslb/core/buf.h"
#include "dnslb/core/cache.h"
#include "dnslb/core/config.h"
#include "dnslb/core/daemon.h"
#include "dnslb/core/dnslb.h"
#include "dnslb/pipeline/dynblock.h"
#include "dnslb/control/fleet.h"
#include "dnslb/core/hash.h"
#include "dnslb/core/hashtab.h"
#include "dnslb/core/log.h"
#include "dnslb/control/metrics.h"
#include "dnslb/core/netmask.h"
#include "dnslb/core/rcu.h"
#include "dnslb/core/tls.h"
#include "dnslb/pipeline/rings.h"
#include "dnslb/core/wire.h"
#include "rules/tee.h"

#ifndef DLB_VERSION
#define DLB_VERSION "unknown"
#endif

/* The page, from dnslb/dashboard.html (generated at build time). */
extern const unsigned char dlb_dashboard_html[];
extern const size_t dlb_dashboard_html_len;

#define WEB_CONN_MEMORY (64 * 1024)	/* per connection: request line + headers */
#define WEB_CONN_TIMEOUT 10		/* s, idle connections */
#define WEB_MAX_URL 1024		/* path + query, bytes */
#define WEB_MAX_BODY ((size_t)32 << 20)
#define WEB_TOP_MAX 100			/* n of /api/v1/servers/localhost/top */

#define SCRYPT_SALT 16
#define SCRYPT_HASH 32
#define SCRYPT_PREFIX "$scrypt$"

/* A password or API key: plaintext, or scrypt parameters and hash. */
struct web_cred {
	bool set;
	bool hashed;
	bool was_hashed;		/* given hashed (not hashed by us) */
	char *plain;			/* plaintext (not hashed) */
	size_t plainlen;
	uint8_t salt[SCRYPT_SALT];
	uint8_t hash[SCRYPT_HASH];
	uint64_t n;
	uint32_t r, p;
};

struct web_acl_entry {
	struct dlb_netmask nm;
	bool neg;
};

struct web_header {
	char *name, *value;
};

struct web_listener {
	int fd;				/* bound socket; MHD owns it once started */
	char text[64];			/* "127.0.0.1:8083" as bound */
	struct MHD_Daemon *mhd;
	struct ev_loop *loop;
	ev_io io;			/* MHD's epoll fd */
	ev_timer tm;			/* MHD_get_timeout() */
};

static struct {
	struct web_cred password, api_key;
	struct web_acl_entry acl[DLB_WEB_MAX_ACL];
	int nacl;
	bool acl_set;			/* else the default 127.0.0.1, ::1 */
	struct web_header headers[DLB_WEB_MAX_HEADERS];
	int nheaders;
	bool headers_set;
	bool stats_auth_off, api_auth_off, dashboard_auth_off;	/* defaults: on */
	int max_conns;			/* 0: default 100 */
	int nconns;			/* open connections, all listeners */
	struct web_listener listeners[DLB_WEB_MAX_LISTENERS];
	int nlisteners;
	struct ev_loop *loop;		/* set while the service runs */
	char dash_csp[256];		/* CSP of the dashboard: its script's hash */
	uint8_t cmp_key[crypto_generichash_KEYBYTES];	/* constant-time plaintext compare */
	bool cmp_key_set;
} web;

static const char *const default_headers[][2] = {
	{ "X-Content-Type-Options", "nosniff" },
	{ "X-Frame-Options", "deny" },
	{ "X-Permitted-Cross-Domain-Policies", "none" },
	{ "X-XSS-Protection", "1; mode=block" },
	{ "Content-Security-Policy", "default-src 'self'; style-src 'self' 'unsafe-inline'" },
};

/* ---- output buffer: dnslb/core/buf.h, bounded by WEB_MAX_BODY ---------------------- */

#define WEB_BUF_INIT	DLB_BUF_INIT(WEB_MAX_BODY)

/* Length of the valid UTF-8 sequence at @s (RFC 3629), or 0. */
static size_t
utf8_len(const unsigned char *s, size_t n)
{
	size_t len;
	uint32_t cp;

	if (s[0] < 0x80)
		return 1;
	if (s[0] >= 0xc2 && s[0] <= 0xdf) {
		len = 2;
		cp = s[0] & 0x1f;
	} else if (s[0] >= 0xe0 && s[0] <= 0xef) {
		len = 3;
		cp = s[0] & 0x0f;
	} else if (s[0] >= 0xf0 && s[0] <= 0xf4) {
		len = 4;
		cp = s[0] & 0x07;
	} else {
		return 0;
	}
	if (n < len)
		return 0;
	for (size_t i = 1; i < len; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		cp = (cp << 6) | (s[i] & 0x3f);
	}
	if ((len == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) ||
	    (len == 4 && (cp < 0x10000 || cp > 0x10ffff)))
		return 0;
	return len;
}

/*
 * Append @s as valid UTF-8 (a bad byte becomes U+FFFD), escaped for a
 * Prometheus label value when @label (\ " and newline), as is otherwise.
 */
static void
sb_text(struct dlb_buf *b, const char *s, bool label)
{
	const unsigned char *u = (const unsigned char *)s;
	size_t n = strlen(s);

	for (size_t i = 0; i < n;) {
		size_t l = utf8_len(u + i, n - i);

		if (l == 0) {
			dlb_buf_puts(b, "\xef\xbf\xbd");
			i++;
		} else if (label && u[i] == '\\') {
			dlb_buf_puts(b, "\\\\");
			i++;
		} else if (label && u[i] == '"') {
			dlb_buf_puts(b, "\\\"");
			i++;
		} else if (label && u[i] == '\n') {
			dlb_buf_puts(b, "\\n");
			i++;
		} else {
			dlb_buf_append(b, s + i, l);
			i += l;
		}
	}
}

/* ---- credentials ---------------------------------------------------------------- */

static bool
sodium_ready(void)
{
	return sodium_init() >= 0;
}

static void
cred_clear(struct web_cred *c)
{
	if (c->plain != NULL) {
		sodium_memzero(c->plain, c->plainlen);
		free(c->plain);
	}
	sodium_memzero(c, sizeof(*c));
}

static bool
b64_decode_exact(const char *s, size_t len, uint8_t *out, size_t want)
{
	size_t got = 0;
	const char *end = NULL;

	if (sodium_base642bin(out, want, s, len, NULL, &got, &end,
			      sodium_base64_VARIANT_ORIGINAL) != 0)
		return false;
	return got == want && end == s + len;
}

/* A decimal in [lo, hi] from @s up to @end; @return false if malformed. */
static bool
parse_dec(const char *s, const char *end, uint64_t lo, uint64_t hi, uint64_t *out)
{
	uint64_t v = 0;

	if (s == end || end - s > 10)
		return false;
	for (; s < end; s++) {
		if (*s < '0' || *s > '9')
			return false;
		v = v * 10 + (uint64_t)(*s - '0');
	}
	if (v < lo || v > hi)
		return false;
	*out = v;
	return true;
}

/*
 * Parse "$scrypt$ln=L,p=P,r=R$salt$hash" into @c. The bounds keep one check
 * under ~32 MiB and a few ms: N <= DLB_WEB_SCRYPT_MAX_N (dnsdist's limit),
 * r <= 8, p <= 4.
 */
static bool
cred_parse_hash(const char *s, size_t len, struct web_cred *c)
{
	const char *p = s + strlen(SCRYPT_PREFIX), *end = s + len, *comma, *dollar, *salt_end;
	uint64_t ln, par, r;

	if (len < strlen(SCRYPT_PREFIX) || memcmp(s, SCRYPT_PREFIX, strlen(SCRYPT_PREFIX)) != 0)
		return false;
	if (end - p < 3 || memcmp(p, "ln=", 3) != 0)
		return false;
	p += 3;
	comma = memchr(p, ',', (size_t)(end - p));
	if (comma == NULL || !parse_dec(p, comma, 1, 15, &ln))
		return false;
	p = comma + 1;
	if (end - p < 2 || memcmp(p, "p=", 2) != 0)
		return false;
	p += 2;
	comma = memchr(p, ',', (size_t)(end - p));
	if (comma == NULL || !parse_dec(p, comma, 1, 4, &par))
		return false;
	p = comma + 1;
	if (end - p < 2 || memcmp(p, "r=", 2) != 0)
		return false;
	p += 2;
	dollar = memchr(p, '$', (size_t)(end - p));
	if (dollar == NULL || !parse_dec(p, dollar, 1, 8, &r))
		return false;
	p = dollar + 1;
	salt_end = memchr(p, '$', (size_t)(end - p));
	if (salt_end == NULL)
		return false;
	if (!b64_decode_exact(p, (size_t)(salt_end - p), c->salt, SCRYPT_SALT) ||
	    !b64_decode_exact(salt_end + 1, (size_t)(end - salt_end - 1), c->hash, SCRYPT_HASH))
		return false;
	c->n = (uint64_t)1 << ln;
	c->p = (uint32_t)par;
	c->r = (uint32_t)r;
	c->hashed = true;
	return true;
}

static bool
scrypt(const char *pw, size_t len, const uint8_t *salt, uint64_t n, uint32_t r, uint32_t p,
       uint8_t out[SCRYPT_HASH])
{
	return crypto_pwhash_scryptsalsa208sha256_ll((const uint8_t *)pw, len, salt, SCRYPT_SALT, n,
						     r, p, out, SCRYPT_HASH) == 0;
}

static bool
cred_matches(const struct web_cred *c, const char *pw, size_t len)
{
	uint8_t a[crypto_generichash_BYTES], b[crypto_generichash_BYTES];

	if (!c->set || len > DLB_WEB_MAX_CRED || !sodium_ready())
		return false;
	if (c->hashed) {
		if (!scrypt(pw, len, c->salt, c->n, c->r, c->p, a))
			return false;
		return sodium_memcmp(a, c->hash, SCRYPT_HASH) == 0;
	}
	/* keyed hashes of both: equal-length digests compared in constant time,
	 * whatever the lengths of the secrets */
	if (!web.cmp_key_set) {
		crypto_generichash_keygen(web.cmp_key);
		web.cmp_key_set = true;
	}
	crypto_generichash(a, sizeof(a), (const uint8_t *)pw, len, web.cmp_key, sizeof(web.cmp_key));
	crypto_generichash(b, sizeof(b), (const uint8_t *)c->plain, c->plainlen, web.cmp_key,
			   sizeof(web.cmp_key));
	return sodium_memcmp(a, b, sizeof(a)) == 0;
}

bool
dlb_web_is_hashed(const char *s, size_t len)
{
	struct web_cred c;
	bool ok;

	memset(&c, 0, sizeof(c));
	ok = len <= DLB_WEB_MAX_CRED && cred_parse_hash(s, len, &c);
	sodium_memzero(&c, sizeof(c));
	return ok;
}

int
dlb_web_hash_password(const char *pw, size_t len, unsigned long work_factor, char *out,
		      size_t outsz, char *err, size_t errlen)
{
	uint8_t salt[SCRYPT_SALT], hash[SCRYPT_HASH];
	char salt64[64], hash64[64];
	unsigned ln = 0;

	if (work_factor < 2 || work_factor > DLB_WEB_SCRYPT_MAX_N ||
	    (work_factor & (work_factor - 1)) != 0) {
		snprintf(err, errlen,
			 "invalid work factor %lu, it must be a power of 2 between 2 and %d",
			 work_factor, DLB_WEB_SCRYPT_MAX_N);
		return -1;
	}
	if (len > DLB_WEB_MAX_CRED) {
		snprintf(err, errlen, "the password is too long (%d bytes at most)",
			 DLB_WEB_MAX_CRED);
		return -1;
	}
	if (!sodium_ready()) {
		snprintf(err, errlen, "libsodium could not be initialised");
		return -1;
	}
	while ((1UL << ln) < work_factor)
		ln++;
	randombytes_buf(salt, sizeof(salt));
	if (!scrypt(pw, len, salt, work_factor, 8, 1, hash)) {
		snprintf(err, errlen, "scrypt failed (out of memory)");
		return -1;
	}
	sodium_bin2base64(salt64, sizeof(salt64), salt, sizeof(salt),
			  sodium_base64_VARIANT_ORIGINAL);
	sodium_bin2base64(hash64, sizeof(hash64), hash, sizeof(hash),
			  sodium_base64_VARIANT_ORIGINAL);
	sodium_memzero(hash, sizeof(hash));
	if ((size_t)snprintf(out, outsz, SCRYPT_PREFIX "ln=%u,p=1,r=8$%s$%s", ln, salt64, hash64) >=
	    outsz) {
		snprintf(err, errlen, "output buffer too small");
		return -1;
	}
	return 0;
}

int
dlb_web_set_credential(int which, const char *text, size_t len, bool hash_plaintext, char *err,
		       size_t errlen)
{
	struct web_cred c, *slot = which == 0 ? &web.password : &web.api_key;

	memset(&c, 0, sizeof(c));
	if (len > DLB_WEB_MAX_CRED) {
		snprintf(err, errlen, "too long (%d bytes at most)", DLB_WEB_MAX_CRED);
		return -1;
	}
	if (!sodium_ready()) {
		snprintf(err, errlen, "libsodium could not be initialised");
		return -1;
	}
	/* a "$scrypt$" value is meant as a hash: a malformed one is an error,
	 * never a plaintext password */
	if (len >= strlen(SCRYPT_PREFIX) && memcmp(text, SCRYPT_PREFIX, strlen(SCRYPT_PREFIX)) == 0) {
		if (!cred_parse_hash(text, len, &c)) {
			snprintf(err, errlen,
				 "invalid hashed credential (expected $scrypt$ln=L,p=P,r=R$salt$hash "
				 "with N = 2^L <= %d, p <= 4, r <= 8)", DLB_WEB_SCRYPT_MAX_N);
			sodium_memzero(&c, sizeof(c));
			return -1;
		}
		c.was_hashed = true;
	} else if (hash_plaintext) {
		randombytes_buf(c.salt, sizeof(c.salt));
		c.n = 1024;
		c.r = 8;
		c.p = 1;
		if (!scrypt(text, len, c.salt, c.n, c.r, c.p, c.hash)) {
			snprintf(err, errlen, "scrypt failed (out of memory)");
			sodium_memzero(&c, sizeof(c));
			return -1;
		}
		c.hashed = true;
	} else {
		c.plain = malloc(len + 1);
		if (c.plain == NULL) {
			snprintf(err, errlen, "out of memory");
			return -1;
		}
		memcpy(c.plain, text, len);
		c.plain[len] = '\0';
		c.plainlen = len;
	}
	c.set = true;
	cred_clear(slot);
	*slot = c;
	return 0;
}

/* ---- ACL, headers, switches -------------------------------------------------------- */

static const char *const default_acl[] = { "127.0.0.1", "::1" };

int
dlb_web_set_acl(const char *text, bool apply, char *err, size_t errlen)
{
	struct web_acl_entry v[DLB_WEB_MAX_ACL];
	int n = 0;
	const char *p = text;

	while (*p != '\0') {
		char tok[128];
		size_t len = strcspn(p, ", \t\r\n");
		bool neg = false;
		const char *t = tok;

		if (len == 0) {
			p++;
			continue;
		}
		if (len >= sizeof(tok)) {
			snprintf(err, errlen, "invalid netmask '%.40s...'", p);
			return -1;
		}
		memcpy(tok, p, len);
		tok[len] = '\0';
		p += len;
		if (*t == '!') {
			neg = true;
			t++;
		}
		if (n == DLB_WEB_MAX_ACL) {
			snprintf(err, errlen, "too many netmasks (%d at most)", DLB_WEB_MAX_ACL);
			return -1;
		}
		if (dlb_netmask_parse(t, &v[n].nm) != 0) {
			snprintf(err, errlen, "invalid netmask '%s'", tok);
			return -1;
		}
		v[n++].neg = neg;
	}
	if (apply) {
		memcpy(web.acl, v, (size_t)n * sizeof(v[0]));
		web.nacl = n;
		web.acl_set = true;
	}
	return 0;
}

static void
acl_init_default(void)
{
	if (!web.acl_set) {
		web.nacl = 0;
		for (size_t i = 0; i < sizeof(default_acl) / sizeof(default_acl[0]); i++)
			if (dlb_netmask_parse(default_acl[i], &web.acl[web.nacl].nm) == 0)
				web.acl[web.nacl++].neg = false;
		web.acl_set = true;
	}
}

/* The most specific matching entry decides; none matching refuses. */
static bool
acl_allows(const struct sockaddr *sa)
{
	struct sockaddr_in v4;
	int best = -1, bestbits = -1;

	if (sa == NULL)
		return false;
	if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)sa;

		if (IN6_IS_ADDR_V4MAPPED(&s6->sin6_addr)) {
			memset(&v4, 0, sizeof(v4));
			v4.sin_family = AF_INET;
			v4.sin_port = s6->sin6_port;
			memcpy(&v4.sin_addr, &s6->sin6_addr.s6_addr[12], 4);
			sa = (const struct sockaddr *)&v4;
		}
	}
	acl_init_default();
	for (int i = 0; i < web.nacl; i++) {
		if (dlb_netmask_match(&web.acl[i].nm, sa) && web.acl[i].nm.bits >= bestbits) {
			best = i;
			bestbits = web.acl[i].nm.bits;
		}
	}
	return best >= 0 && !web.acl[best].neg;
}

bool
dlb_web_header_ok(const char *name, const char *value)
{
	static const char tchar[] = "!#$%&'*+-.^_`|~";

	if (name == NULL || *name == '\0' || strlen(name) > 128 || value == NULL ||
	    strlen(value) > 1024)
		return false;
	for (const char *p = name; *p != '\0'; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
		      (*p >= '0' && *p <= '9') || strchr(tchar, *p) != NULL))
			return false;
	for (const unsigned char *p = (const unsigned char *)value; *p != '\0'; p++)
		if ((*p < 0x20 && *p != '\t') || *p == 0x7f)
			return false;
	return true;
}

static void
headers_clear(void)
{
	for (int i = 0; i < web.nheaders; i++) {
		free(web.headers[i].name);
		free(web.headers[i].value);
	}
	web.nheaders = 0;
}

int
dlb_web_set_headers(const char *const *names, const char *const *values, size_t n)
{
	struct web_header v[DLB_WEB_MAX_HEADERS];
	size_t k;

	if (n > DLB_WEB_MAX_HEADERS)
		return -1;
	for (k = 0; k < n; k++) {
		v[k].name = strdup(names[k]);
		v[k].value = strdup(values[k]);
		if (v[k].name == NULL || v[k].value == NULL) {
			free(v[k].name);
			free(v[k].value);
			goto out_free;
		}
	}
	headers_clear();
	memcpy(web.headers, v, n * sizeof(v[0]));
	web.nheaders = (int)n;
	web.headers_set = true;
	return 0;
out_free:
	while (k-- > 0) {
		free(v[k].name);
		free(v[k].value);
	}
	return -1;
}

void
dlb_web_set_flag(enum dlb_web_flag f, bool on)
{
	switch (f) {
	case DLB_WEB_STATS_AUTH:
		web.stats_auth_off = !on;
		break;
	case DLB_WEB_API_AUTH:
		web.api_auth_off = !on;
		break;
	case DLB_WEB_DASHBOARD_AUTH:
		web.dashboard_auth_off = !on;
		break;
	}
}

static int
max_conns(void)
{
	return web.max_conns > 0 ? web.max_conns : 100;
}

void
dlb_web_set_max_connections(int n)
{
	web.max_conns = n;
}

char *
dlb_web_config_text(void)
{
	struct dlb_buf b = WEB_BUF_INIT;

	acl_init_default();
	dlb_buf_puts(&b, "Current web server configuration:\nACL: ");
	for (int i = 0; i < web.nacl; i++) {
		char nm[64];

		dlb_netmask_format(&web.acl[i].nm, nm, sizeof(nm));
		dlb_buf_printf(&b, "%s%s%s", i > 0 ? ", " : "", web.acl[i].neg ? "!" : "", nm);
	}
	dlb_buf_puts(&b, "\nCustom headers: ");
	if (web.headers_set) {
		dlb_buf_puts(&b, "\n");
		for (int i = 0; i < web.nheaders; i++)
			dlb_buf_printf(&b, " - %s: %s\n", web.headers[i].name, web.headers[i].value);
	} else {
		dlb_buf_puts(&b, "None\n");
	}
	dlb_buf_printf(&b, "Statistics require authentication: %s\n", web.stats_auth_off ? "no" : "yes");
	dlb_buf_printf(&b, "API requires authentication: %s\n", web.api_auth_off ? "no" : "yes");
	dlb_buf_printf(&b, "Dashboard requires authentication: %s\n",
		  web.dashboard_auth_off ? "no" : "yes");
	dlb_buf_printf(&b, "Password: %s\n", web.password.set ? "set" : "unset");
	dlb_buf_printf(&b, "API key: %s\n", web.api_key.set ? "set" : "unset");
	dlb_buf_printf(&b, "Maximum concurrent connections: %d\n", max_conns());
	for (int i = 0; i < web.nlisteners; i++)
		dlb_buf_printf(&b, "Listening on: %s%s\n", web.listeners[i].text,
			  web.listeners[i].mhd != NULL ? "" : " (not started yet)");
	if (dlb_buf_failed(&b)) {
		dlb_buf_deinit(&b);
		return NULL;
	}
	if (b.p == NULL)
		return strdup("");
	return b.p;
}

/* ---- figures -------------------------------------------------------------------- */

/* "dnsdist_" + @name with every character outside [a-zA-Z0-9_] as '_'. */
static void
prom_name(char *out, size_t outsz, const char *name)
{
	size_t n = (size_t)snprintf(out, outsz, "dnsdist_%s", name);

	if (n >= outsz)
		n = outsz - 1;
	for (size_t i = strlen("dnsdist_"); i < n; i++) {
		char c = out[i];

		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')))
			out[i] = '_';
	}
}

/* A value as Prometheus and JSON write it: integers exact, doubles %.15g. */
static void
fmt_value(char *out, size_t outsz, double v, bool is_double, bool json)
{
	if (!isfinite(v)) {
		if (json)
			snprintf(out, outsz, "null");
		else
			snprintf(out, outsz, "%s", isnan(v) ? "NaN" : v > 0 ? "+Inf" : "-Inf");
	} else if (!is_double && v >= 0 && v < 18446744073709551616.0) {
		snprintf(out, outsz, "%" PRIu64, (uint64_t)v);
	} else if (!is_double && v > -9.2e18 && v < 0) {
		snprintf(out, outsz, "%" PRId64, (int64_t)v);
	} else {
		snprintf(out, outsz, "%.15g", v);
	}
}

static double
metric_of(const struct dlb_metric *m, size_t n, const char *name, bool *found)
{
	for (size_t i = 0; i < n; i++) {
		if (strcmp(m[i].name, name) == 0) {
			if (found != NULL)
				*found = true;
			return m[i].value;
		}
	}
	if (found != NULL)
		*found = false;
	return 0;
}

static void
prom_head(struct dlb_buf *b, const char *name, const char *help, const char *type)
{
	dlb_buf_printf(b, "# HELP %s ", name);
	for (const char *p = help; *p != '\0'; p++) {
		if (*p == '\\')
			dlb_buf_puts(b, "\\\\");
		else if (*p == '\n')
			dlb_buf_puts(b, "\\n");
		else
			dlb_buf_append(b, p, 1);
	}
	dlb_buf_printf(b, "\n# TYPE %s %s\n", name, type);
}

/* A collected rule, for the chains' JSON and for unique Prometheus ids. */
struct rule_vec {
	struct dlb_metrics_rule *v;
	size_t n, cap;
	bool failed;
};

static void
collect_rule(const struct dlb_metrics_rule *r, void *arg)
{
	struct rule_vec *rv = arg;

	if (rv->failed)
		return;
	if (rv->n == rv->cap) {
		size_t cap = rv->cap != 0 ? rv->cap * 2 : 64;
		struct dlb_metrics_rule *v;

		if (cap > 1000000 || (v = realloc(rv->v, cap * sizeof(*v))) == NULL) {
			rv->failed = true;
			return;
		}
		rv->v = v;
		rv->cap = cap;
	}
	rv->v[rv->n++] = *r;
}

static int
collect_rules(struct rule_vec *rv)
{
	memset(rv, 0, sizeof(*rv));
	dlb_metrics_rules(collect_rule, rv);
	return rv->failed ? -1 : 0;
}

/* The set of rule ids already written: a dnslb/core/hashtab table of the strings. */
struct idslot {
	const char *id;			/* borrowed from the rule vector */
	uint32_t tag;			/* the table's */
};

static bool
idslot_eq(const void *e, const void *key)
{
	return strcmp(((const struct idslot *)e)->id, key) == 0;
}

/*
 * dnsdist_rule_hits{id=...}: the rule's name, else its UUID. Two rules of
 * the same name would make two identical series, which Prometheus refuses
 * for the whole scrape: a repeated name falls back to the rule's UUID.
 */
static void
prom_rules(struct dlb_buf *b, const struct rule_vec *rv)
{
	struct dlb_hashtab set;

	prom_head(b, "dnsdist_rule_hits", "Number of hits of that rule", "counter");
	dlb_hashtab_init(&set, sizeof(struct idslot), offsetof(struct idslot, tag), 16, 1u << 30);
	for (size_t i = 0; i < rv->n; i++) {
		const char *id = rv->v[i].id;
		uint64_t h = dlb_fnv1a64_str(id, DLB_FNV1A64_INIT);
		struct idslot *e;

		if (dlb_hashtab_find(&set, h, idslot_eq, id) != NULL) {
			id = rv->v[i].uuid;
			h = dlb_fnv1a64_str(id, DLB_FNV1A64_INIT);
		}
		if (dlb_hashtab_find(&set, h, idslot_eq, id) == NULL) {
			if ((e = dlb_hashtab_add(&set, h)) == NULL) {
				dlb_buf_set_error(b, DLB_ENOMEM);
				break;
			}
			e->id = id;
		}
		dlb_buf_puts(b, "dnsdist_rule_hits{id=\"");
		sb_text(b, id, true);
		dlb_buf_printf(b, "\"} %" PRIu64 "\n", rv->v[i].matches);
	}
	dlb_hashtab_deinit(&set);
}

/*
 * The dynamic blocks' top offenders (dnslb/pipeline/dyntop.c): HELP and TYPE lines
 * always, samples from the first generation on. dnsdist's HELP text, its
 * typo included. The reason is escaped as any label (dnsdist writes it raw).
 */
static void
prom_dyntops(struct dlb_buf *b)
{
	static const char *const fam[2][3] = {
		{ "dnsdist_dynblocks_nmg_top_offenders_hits_per_second",
		  "Number of hits per second blocked by Dynamic Blocks (netmasks) for the top "
		  "offenders, averaged over the last 60s", "netmask" },
		{ "dnsdist_dynblocks_smt_top_offenders_hits_per_second",
		  "Number of this per second blocked by Dynamic Blocks (suffixes) for the top "
		  "offenders, averaged over the last 60s", "suffix" },
	};

	for (int k = 0; k < 2; k++) {
		const struct dlb_dyn_top *v;
		size_t n = dlb_dyn_tops(k == 1, &v);

		prom_head(b, fam[k][0], fam[k][1], "gauge");
		for (size_t i = 0; i < n; i++) {
			dlb_buf_printf(b, "%s{reason=\"", fam[k][0]);
			sb_text(b, v[i].reason, true);
			dlb_buf_printf(b, "\",%s=\"", fam[k][2]);
			sb_text(b, v[i].key, true);
			dlb_buf_printf(b, "\"} %" PRIu32 "\n", v[i].value);
		}
	}
}

/* '.' -> '_' (dnsdist's server label and carbon path). */
static void
dots_to_underscores(char *out, size_t outsz, const char *s)
{
	snprintf(out, outsz, "%s", s);
	for (char *p = out; *p != '\0'; p++)
		if (*p == '.')
			*p = '_';
}

struct prom_series {
	const char *suffix, *help, *type;
};

static const struct prom_series server_series[] = {
	{ "status", "Whether this backend is up (1) or down (0)", "gauge" },
	{ "queries", "Amount of queries relayed to server", "counter" },
	{ "responses", "Amount of responses received from this server", "counter" },
	{ "drops", "Amount of queries not answered by server", "counter" },
	{ "latency", "Server's latency when answering questions in milliseconds", "gauge" },
	{ "senderrors", "Total number of OS send errors while relaying queries", "counter" },
	{ "outstanding", "Current number of queries that are waiting for a backend response",
	  "gauge" },
	{ "order", "The order in which this server is picked", "gauge" },
	{ "weight", "The weight within the order in which this server is picked", "gauge" },
	/* TCP towards the backend (9 onwards): dnsdist's text, its types too */
	{ "tcpdiedsendingquery", "The number of TCP I/O errors while sending the query", "counter" },
	{ "tcpdiedreadingresponse", "The number of TCP I/O errors while reading the response",
	  "counter" },
	{ "tcpgaveup", "The number of TCP connections failing after too many attempts", "counter" },
	{ "tcpconnecttimeouts", "The number of TCP connect timeouts", "counter" },
	{ "tcpreadtimeouts", "The number of TCP read timeouts", "counter" },
	{ "tcpwritetimeouts", "The number of TCP write timeouts", "counter" },
	{ "tcpcurrentconnections", "The number of current TCP connections", "gauge" },
	{ "tcpmaxconcurrentconnections", "The maximum number of concurrent TCP connections",
	  "counter" },
	{ "tcpnewconnections", "The number of established TCP connections in total", "counter" },
	{ "tcpreusedconnections", "The number of times a TCP connection has been reused",
	  "counter" },
	{ "tcpavgqueriesperconn", "The average number of queries per TCP connection", "gauge" },
	{ "tcpavgconnduration", "The average duration of a TCP connection (ms)", "gauge" },
	{ "tlsresumptions", "The number of times a TLS session has been resumed", "counter" },
};

/* A running average as dnsdist prints it (a C++ stream's 6 significant digits). */
static void
fmt_avg(char *out, size_t outsz, double v)
{
	snprintf(out, outsz, "%g", v);
}


/* The backends of the running config, in order. @return how many (<= @cap). */
static int
get_backends(struct dlb_metrics_backend *out, int cap)
{
	int n = 0;

	while (n < cap && dlb_metrics_backend(n, &out[n]) == 0)
		n++;
	return n;
}

static void
prom_server_labels(struct dlb_buf *b, const struct dlb_metrics_backend *m)
{
	char name[sizeof(m->be->name)];

	dots_to_underscores(name, sizeof(name), m->be->name);
	dlb_buf_puts(b, "{server=\"");
	sb_text(b, name, true);
	dlb_buf_puts(b, "\",address=\"");
	sb_text(b, m->be->addr_text, true);
	dlb_buf_puts(b, "\"} ");
}

/*
 * Per-server series. Unlike dnsdist 1.7, which writes every HELP/TYPE first
 * and then each server's lines, each family's lines follow its own TYPE, as
 * the text format requires (parsers otherwise lose the types).
 */
static void
prom_servers(struct dlb_buf *b)
{
	const size_t ns = sizeof(server_series) / sizeof(server_series[0]);
	struct dlb_metrics_backend *v = calloc(DLB_MAX_BACKENDS, sizeof(*v));
	int n;

	if (v == NULL) {
		dlb_buf_set_error(b, DLB_ENOMEM);
		return;
	}
	n = get_backends(v, DLB_MAX_BACKENDS);
	for (size_t s = 0; s < ns; s++) {
		char name[64];

		snprintf(name, sizeof(name), "dnsdist_server_%s", server_series[s].suffix);
		prom_head(b, name, server_series[s].help, server_series[s].type);
		for (int i = 0; i < n; i++) {
			const struct dlb_metrics_backend *m = &v[i];
			char val[64];

			switch (s) {
			case 0: snprintf(val, sizeof(val), "%d", m->up ? 1 : 0); break;
			case 1: snprintf(val, sizeof(val), "%" PRIu64, m->queries); break;
			case 2: snprintf(val, sizeof(val), "%" PRIu64, m->responses); break;
			case 3: snprintf(val, sizeof(val), "%" PRIu64, m->drops); break;
			case 4:
				/* dnsdist: only while the server is up */
				if (!m->up)
					continue;
				fmt_value(val, sizeof(val), m->latency_ms, true, false);
				break;
			case 5: snprintf(val, sizeof(val), "%" PRIu64, m->send_errors); break;
			case 6: snprintf(val, sizeof(val), "%" PRIu64, m->outstanding); break;
			case 7: snprintf(val, sizeof(val), "%d", m->order); break;
			case 8: snprintf(val, sizeof(val), "%d", m->weight); break;
			case 9: snprintf(val, sizeof(val), "%" PRIu64, m->tcp_died_sending); break;
			case 10: snprintf(val, sizeof(val), "%" PRIu64, m->tcp_died_reading); break;
			case 11: snprintf(val, sizeof(val), "%" PRIu64, m->tcp_gave_up); break;
			case 12: snprintf(val, sizeof(val), "%" PRIu64, m->tcp_connect_timeouts); break;
			case 13: snprintf(val, sizeof(val), "%" PRIu64, m->tcp_read_timeouts); break;
			case 14: snprintf(val, sizeof(val), "%" PRIu64, m->tcp_write_timeouts); break;
			case 15: snprintf(val, sizeof(val), "%" PRIu64, m->tcp_current); break;
			case 16: snprintf(val, sizeof(val), "%" PRIu64, m->tcp_max); break;
			case 17: snprintf(val, sizeof(val), "%" PRIu64, m->tcp_new); break;
			case 18: snprintf(val, sizeof(val), "%" PRIu64, m->tcp_reused); break;
			case 19: fmt_avg(val, sizeof(val), m->tcp_avg_queries); break;
			case 20: fmt_avg(val, sizeof(val), m->tcp_avg_duration); break;
			default: snprintf(val, sizeof(val), "%" PRIu64, m->tls_resumptions); break;
			}
			dlb_buf_puts(b, name);
			prom_server_labels(b, m);
			dlb_buf_printf(b, "%s\n", val);
		}
	}
	free(v);
}

/* The frontends (UDP 2i, TCP 2i+1). @return how many (<= @cap). */
static int
get_frontends(struct dlb_metrics_frontend *out, int *thread, int cap)
{
	int n = 0;

	while (n < cap && dlb_metrics_frontend(n, &out[n]) == 0) {
		/* dnsdist's "thread" label tells identical binds apart */
		thread[n] = 0;
		for (int j = 0; j < n; j++)
			if (strcmp(out[j].address, out[n].address) == 0 &&
			    strcmp(out[j].proto, out[n].proto) == 0)
				thread[n]++;
		n++;
	}
	return n;
}

/* "NAME{frontend=...,proto=...,thread=..." (the closing brace is the caller's). */
static void
prom_frontend_labels(struct dlb_buf *b, const char *name, const struct dlb_metrics_frontend *f,
		     int thread)
{
	dlb_buf_printf(b, "%s{frontend=\"", name);
	sb_text(b, f->address, true);
	dlb_buf_puts(b, "\",proto=\"");
	sb_text(b, f->proto, true);
	dlb_buf_printf(b, "\",thread=\"%d\"", thread);
}

#define PROM_FE_TLS	11	/* the first TLS family of prom_frontends */

/* The TLS family @k (from tlsnewsessions on) of a DNS over TLS frontend, as dnsdist labels it. */
static void
prom_frontend_tls(struct dlb_buf *b, const char *name, size_t k,
		  const struct dlb_metrics_frontend *f, int thread)
{
	static const char *const versions[] = { "tls10", "tls11", "tls12", "tls13", "unknown" };
	const uint64_t one[] = { f->tls_new_sessions, f->tls_resumptions,
				 f->tls_unknown_ticket_keys, f->tls_inactive_ticket_keys };

	if (k < sizeof(one) / sizeof(one[0])) {
		prom_frontend_labels(b, name, f, thread);
		dlb_buf_printf(b, "} %" PRIu64 "\n", one[k]);
	} else if (k == 4) {
		for (size_t v = 0; v < DLB_TLS_VCOUNT; v++) {
			prom_frontend_labels(b, name, f, thread);
			dlb_buf_printf(b, ",tls=\"%s\"} %" PRIu64 "\n", versions[v], f->tls_queries[v]);
		}
	} else {
		for (size_t e = 0; e < DLB_TLS_FAIL_COUNT; e++) {
			prom_frontend_labels(b, name, f, thread);
			dlb_buf_printf(b, ",error=\"%s\"} %" PRIu64 "\n", dlb_tls_failure_names[e],
				       f->tls_failures[e]);
		}
	}
}

static void
prom_frontends(struct dlb_buf *b)
{
	/* dnsdist's text and types; from 2 on, TCP frontends only (TLS ones from PROM_FE_TLS) */
	static const struct prom_series fs[] = {
		{ "queries", "Amount of queries received by this frontend", "counter" },
		{ "responses", "Amount of responses sent by this frontend", "counter" },
		{ "tcpdiedreadingquery",
		  "Amount of TCP connections terminated while reading the query from the client",
		  "counter" },
		{ "tcpdiedsendingresponse",
		  "Amount of TCP connections terminated while sending a response to the client",
		  "counter" },
		{ "tcpgaveup",
		  "Amount of TCP connections terminated after too many attempts to get a "
		  "connection to the backend", "counter" },
		/* (sic: dnsdist's name) */
		{ "tcpclientimeouts",
		  "Amount of TCP connections terminated by a timeout while reading from the client",
		  "counter" },
		{ "tcpdownstreamtimeouts",
		  "Amount of TCP connections terminated by a timeout while reading from the backend",
		  "counter" },
		{ "tcpcurrentconnections", "Amount of current incoming TCP connections from clients",
		  "gauge" },
		{ "tcpmaxconcurrentconnections",
		  "Maximum number of concurrent incoming TCP connections from clients", "counter" },
		{ "tcpavgqueriesperconnection", "The average number of queries per TCP connection",
		  "gauge" },
		{ "tcpavgconnectionduration", "The average duration of a TCP connection (ms)",
		  "gauge" },
		/* from 11 on, TLS frontends only (PROM_FE_TLS) */
		{ "tlsnewsessions", "Amount of new TLS sessions negotiated", "counter" },
		{ "tlsresumptions", "Amount of TLS sessions resumed", "counter" },
		{ "tlsunknownticketkeys",
		  "Amount of attempts to resume TLS session from an unknown key (possibly expired)",
		  "counter" },
		{ "tlsinactiveticketkeys", "Amount of TLS sessions resumed from an inactive key",
		  "counter" },
		{ "tlsqueries", "Number of queries received by dnsdist over TLS, by TLS version",
		  "counter" },
		{ "tlshandshakefailures", "Amount of TLS handshake failures", "counter" },
	};
	const int cap = DLB_MAX_FRONTENDS * 2;
	struct dlb_metrics_frontend *v = calloc((size_t)cap, sizeof(*v));
	int *thread = calloc((size_t)cap, sizeof(*thread));
	bool any_tls = false;
	int n;

	if (v == NULL || thread == NULL) {
		dlb_buf_set_error(b, DLB_ENOMEM);
		goto out;
	}
	n = get_frontends(v, thread, cap);
	for (int i = 0; i < n; i++)
		any_tls |= v[i].tls != NULL;
	for (size_t s = 0; s < sizeof(fs) / sizeof(fs[0]); s++) {
		char name[64];

		if (s >= PROM_FE_TLS && !any_tls)
			break;	/* no family without samples (docs/dnsdist-differences.md) */
		snprintf(name, sizeof(name), "dnsdist_frontend_%s", fs[s].suffix);
		prom_head(b, name, fs[s].help, fs[s].type);
		for (int i = 0; i < n; i++) {
			const struct dlb_metrics_frontend *f = &v[i];
			char val[64];

			if ((s >= 2 && !f->tcp) || (s >= PROM_FE_TLS && f->tls == NULL))
				continue;
			if (s >= PROM_FE_TLS) {
				prom_frontend_tls(b, name, s - PROM_FE_TLS, f, thread[i]);
				continue;
			}
			switch (s) {
			case 0: snprintf(val, sizeof(val), "%" PRIu64, f->queries); break;
			case 1: snprintf(val, sizeof(val), "%" PRIu64, f->responses); break;
			case 2: snprintf(val, sizeof(val), "%" PRIu64, f->tcp_died_reading); break;
			case 3: snprintf(val, sizeof(val), "%" PRIu64, f->tcp_died_sending); break;
			case 4: snprintf(val, sizeof(val), "%" PRIu64, f->tcp_gave_up); break;
			case 5: snprintf(val, sizeof(val), "%" PRIu64, f->tcp_client_timeouts); break;
			case 6: snprintf(val, sizeof(val), "%" PRIu64, f->tcp_downstream_timeouts); break;
			case 7: snprintf(val, sizeof(val), "%" PRIu64, f->tcp_current); break;
			case 8: snprintf(val, sizeof(val), "%" PRIu64, f->tcp_max); break;
			case 9: fmt_avg(val, sizeof(val), f->tcp_avg_queries); break;
			default: fmt_avg(val, sizeof(val), f->tcp_avg_duration); break;
			}
			prom_frontend_labels(b, name, f, thread[i]);
			dlb_buf_printf(b, "} %s\n", val);
		}
	}
out:
	free(v);
	free(thread);
}

/*
 * The DNS over HTTPS listeners' families (docs/doh.md#counters): their heads
 * together, then each listener's samples, dnsdist 1.7.3's order, names and
 * help texts (the last one's help is dnsdist's, as it is).
 */
static void
prom_doh(struct dlb_buf *b)
{
	static const struct prom_series fs[] = {
		{ "http_connects", "Number of DoH TCP connections established to this frontend",
		  "counter" },
		{ "doh_http_method_queries", "Number of DoH queries received by dnsdist, by HTTP method",
		  "counter" },
		{ "doh_http_version_queries",
		  "Number of DoH queries received by dnsdist, by HTTP version", "counter" },
		{ "doh_bad_requests", "Number of requests that could not be converted to a DNS query",
		  "counter" },
		{ "doh_responses", "Number of responses sent, by type", "counter" },
		{ "doh_version_status_responses",
		  "Number of requests that could not be converted to a DNS query", "counter" },
	};
	static const char *const status[DLB_DOH_ST_COUNT] = { "200", "400", "403", "500", "502",
							       "other" };
	struct dlb_metrics_frontend f;
	bool any = false;

	for (int i = 0; dlb_metrics_frontend(i, &f) == 0; i++)
		any = any || f.doh;
	if (!any)
		return;
	for (size_t k = 0; k < sizeof(fs) / sizeof(fs[0]); k++) {
		char name[64];

		snprintf(name, sizeof(name), "dnsdist_frontend_%s", fs[k].suffix);
		prom_head(b, name, fs[k].help, fs[k].type);
	}
	for (int i = 0; dlb_metrics_frontend(i, &f) == 0; i++) {
		const struct dlb_doh_figures *d = &f.doh_figs;
		char fe[128];

		if (!f.doh)
			continue;
		snprintf(fe, sizeof(fe), "frontend=\"%s\",thread=\"0\"", f.address);
		dlb_buf_printf(b, "dnsdist_frontend_http_connects{%s} %" PRIu64 "\n", fe, d->connects);
		dlb_buf_printf(b, "dnsdist_frontend_doh_http_method_queries{method=\"get\",%s} %" PRIu64
			       "\n", fe, d->get);
		dlb_buf_printf(b, "dnsdist_frontend_doh_http_method_queries{method=\"post\",%s} %" PRIu64
			       "\n", fe, d->post);
		dlb_buf_printf(b, "dnsdist_frontend_doh_http_version_queries{version=\"1\",%s} %" PRIu64
			       "\n", fe, d->http1);
		dlb_buf_printf(b, "dnsdist_frontend_doh_http_version_queries{version=\"2\",%s} %" PRIu64
			       "\n", fe, d->http2);
		dlb_buf_printf(b, "dnsdist_frontend_doh_bad_requests{%s} %" PRIu64 "\n", fe, d->bad);
		dlb_buf_printf(b, "dnsdist_frontend_doh_responses{type=\"error\",%s} %" PRIu64 "\n", fe,
			       d->errors);
		dlb_buf_printf(b, "dnsdist_frontend_doh_responses{type=\"redirect\",%s} %" PRIu64 "\n",
			       fe, d->redirects);
		dlb_buf_printf(b, "dnsdist_frontend_doh_responses{type=\"valid\",%s} %" PRIu64 "\n", fe,
			       d->valid);
		for (int v = 0; v < 2; v++)
			for (int k = 0; k < DLB_DOH_ST_COUNT; k++)
				dlb_buf_printf(b, "dnsdist_frontend_doh_version_status_responses{"
					       "httpversion=\"%d\",status=\"%s\",%s} %" PRIu64 "\n",
					       v + 1, status[k], fe, d->status[v][k]);
	}
}

/* One entry of the API's dohFrontends (dnsdist 1.7.3's keys, in its order). */
static void
json_doh_frontend(cJSON *a, const struct dlb_metrics_frontend *f, int id)
{
	static const char *const status[DLB_DOH_ST_COUNT] = { "200", "400", "403", "500", "502",
							       "other" };
	const struct dlb_doh_figures *d = &f->doh_figs;
	cJSON *e = cJSON_CreateObject();
	char key[32];

	if (e == NULL)
		return;
	cJSON_AddStringToObject(e, "address", f->address);
	cJSON_AddNumberToObject(e, "bad-requests", (double)d->bad);
	cJSON_AddNumberToObject(e, "error-responses", (double)d->errors);
	cJSON_AddNumberToObject(e, "get-queries", (double)d->get);
	cJSON_AddNumberToObject(e, "http-connects", (double)d->connects);
	for (int v = 0; v < 2; v++) {
		for (int k = 0; k < DLB_DOH_ST_COUNT; k++) {
			snprintf(key, sizeof(key), "http%d-%s-responses", v + 1, status[k]);
			cJSON_AddNumberToObject(e, key, (double)d->status[v][k]);
		}
		snprintf(key, sizeof(key), "http%d-queries", v + 1);
		cJSON_AddNumberToObject(e, key, (double)(v == 0 ? d->http1 : d->http2));
	}
	cJSON_AddNumberToObject(e, "id", id);
	cJSON_AddNumberToObject(e, "post-queries", (double)d->post);
	cJSON_AddNumberToObject(e, "redirect-responses", (double)d->redirects);
	cJSON_AddNumberToObject(e, "valid-responses", (double)d->valid);
	cJSON_AddItemToArray(a, e);
}

static int
get_pools(struct dlb_metrics_pool *out, int cap)
{
	int n = 0;

	while (n < cap && dlb_metrics_pool(n, &out[n]) == 0)
		n++;
	return n;
}

static void
prom_pools(struct dlb_buf *b)
{
	static const struct prom_series ps[] = {
		{ "servers", "Number of servers in that pool", "gauge" },
		{ "active_servers", "Number of available servers in that pool", "gauge" },
		{ "cache_size", "Maximum number of entries that this cache can hold", "gauge" },
		{ "cache_entries", "Number of entries currently present in that cache", "gauge" },
		{ "cache_hits", "Number of hits from that cache", "counter" },
		{ "cache_misses", "Number of misses from that cache", "counter" },
		{ "cache_deferred_inserts",
		  "Number of insertions into that cache skipped because it was already locked",
		  "counter" },
		{ "cache_deferred_lookups",
		  "Number of lookups into that cache skipped because it was already locked",
		  "counter" },
		{ "cache_lookup_collisions",
		  "Number of lookups into that cache that triggered a collision (same hash but "
		  "different entry)", "counter" },
		{ "cache_insert_collisions",
		  "Number of insertions into that cache that triggered a collision (same hash but "
		  "different entry)", "counter" },
		{ "cache_ttl_too_shorts",
		  "Number of insertions into that cache skipped because the TTL of the answer was "
		  "not long enough", "counter" },
	};
	struct dlb_metrics_pool *v = calloc(DLB_MAX_POOLS, sizeof(*v));
	int n;

	if (v == NULL) {
		dlb_buf_set_error(b, DLB_ENOMEM);
		return;
	}
	n = get_pools(v, DLB_MAX_POOLS);
	for (size_t s = 0; s < sizeof(ps) / sizeof(ps[0]); s++) {
		char name[64];

		snprintf(name, sizeof(name), "dnsdist_pool_%s", ps[s].suffix);
		prom_head(b, name, ps[s].help, ps[s].type);
		for (int i = 0; i < n; i++) {
			const struct dlb_metrics_pool *p = &v[i];
			uint64_t val;

			if (s >= 2 && !p->has_cache)
				continue;
			switch (s) {
			case 0: val = (uint64_t)p->servers; break;
			case 1: val = (uint64_t)p->active; break;
			case 2: val = p->cache_size; break;
			case 3: val = p->cache_entries; break;
			case 4: val = p->cache_hits; break;
			case 5: val = p->cache_misses; break;
			case 6: val = p->cache_deferred_inserts; break;
			case 7: val = p->cache_deferred_lookups; break;
			case 8: val = p->cache_lookup_collisions; break;
			case 9: val = p->cache_insert_collisions; break;
			default: val = p->cache_ttl_too_shorts; break;
			}
			dlb_buf_printf(b, "%s{pool=\"", name);
			sb_text(b, p->name[0] != '\0' ? p->name : "_default_", true);
			dlb_buf_printf(b, "\"} %" PRIu64 "\n", val);
		}
	}
	free(v);
}

/* The global names the histogram reports, not exported on their own (dnsdist). */
static bool
histogram_part(const char *name)
{
	return strcmp(name, "latency-sum") == 0 || strcmp(name, "latency-count") == 0;
}

/* GET /metrics: the Prometheus text format (docs/web.md, "Prometheus"). */
static void
build_metrics(struct dlb_buf *b)
{
	static const char *const buckets[][2] = {
		{ "latency0-1", "1" }, { "latency1-10", "10" }, { "latency10-50", "50" },
		{ "latency50-100", "100" }, { "latency100-1000", "1000" }, { "latency-slow", "+Inf" },
	};
	struct dlb_metric m[DLB_METRICS_MAX];
	size_t n = dlb_metrics_global(m, DLB_METRICS_MAX);
	struct rule_vec rv;
	double cum = 0, count;
	bool found;
	char val[64];

	for (size_t i = 0; i < n; i++) {
		char name[128];

		if (histogram_part(m[i].name) || m[i].expensive)
			continue;
		prom_name(name, sizeof(name), m[i].name);
		prom_head(b, name, m[i].help, m[i].type == DLB_METRIC_GAUGE ? "gauge" : "counter");
		fmt_value(val, sizeof(val), m[i].value, m[i].is_double, false);
		dlb_buf_printf(b, "%s %s\n", name, val);
	}

	prom_head(b, "dnsdist_latency", "Histogram of responses by latency (in milliseconds)",
		  "histogram");
	for (size_t i = 0; i < sizeof(buckets) / sizeof(buckets[0]); i++) {
		cum += metric_of(m, n, buckets[i][0], NULL);
		fmt_value(val, sizeof(val), cum, false, false);
		dlb_buf_printf(b, "dnsdist_latency_bucket{le=\"%s\"} %s\n", buckets[i][1], val);
	}
	fmt_value(val, sizeof(val), metric_of(m, n, "latency-sum", NULL), false, false);
	dlb_buf_printf(b, "dnsdist_latency_sum %s\n", val);
	count = metric_of(m, n, "latency-count", &found);
	fmt_value(val, sizeof(val), found ? count : cum, false, false);
	dlb_buf_printf(b, "dnsdist_latency_count %s\n", val);

	prom_servers(b);
	prom_frontends(b);
	prom_doh(b);
	prom_pools(b);
	if (collect_rules(&rv) != 0)
		dlb_buf_set_error(b, DLB_ENOMEM);
	else
		prom_rules(b, &rv);
	free(rv.v);
	prom_dyntops(b);
	prom_head(b, "dnsdist_info", "Info from dnsdist, value is always 1", "gauge");
	dlb_buf_puts(b, "dnsdist_info{version=\"" DLB_VERSION "\"} 1\n");
}

/* ---- JSON ------------------------------------------------------------------------ */

/* A string member, made valid UTF-8 first. */
static void
json_str(cJSON *o, const char *key, const char *s)
{
	struct dlb_buf b = WEB_BUF_INIT;

	sb_text(&b, s, false);
	cJSON_AddStringToObject(o, key, b.p != NULL ? b.p : "");
	dlb_buf_deinit(&b);
}

static cJSON *
json_str_item(const char *s)
{
	struct dlb_buf b = WEB_BUF_INIT;
	cJSON *it;

	sb_text(&b, s, false);
	it = cJSON_CreateString(b.p != NULL ? b.p : "");
	dlb_buf_deinit(&b);
	return it;
}

/* An exact integer member (cJSON's own numbers are doubles printed %g). */
static void
json_u64(cJSON *o, const char *key, uint64_t v)
{
	char s[32];

	snprintf(s, sizeof(s), "%" PRIu64, v);
	cJSON_AddRawToObject(o, key, s);
}

static void
json_num(cJSON *o, const char *key, double v, bool is_double)
{
	char s[64];

	fmt_value(s, sizeof(s), v, is_double, true);
	cJSON_AddRawToObject(o, key, s);
}

/* A running average as dnsdist's JSON writes a double: all 17 digits. */
static void
json_avg(cJSON *o, const char *key, double v)
{
	char s[64];

	if (isfinite(v))
		snprintf(s, sizeof(s), "%.17g", v);
	else
		snprintf(s, sizeof(s), "null");
	cJSON_AddRawToObject(o, key, s);
}

/* GET /jsonstat?command=stats: dnsdist's flat object. */
static cJSON *
json_stats(void)
{
	struct dlb_metric m[DLB_METRICS_MAX];
	size_t n = dlb_metrics_global(m, DLB_METRICS_MAX);
	cJSON *o = cJSON_CreateObject();

	if (o == NULL)
		return NULL;
	for (size_t i = 0; i < n; i++) {
		if (m[i].expensive)
			continue;
		json_num(o, m[i].name, m[i].value, m[i].is_double);
	}
	/* names of older dnsdist versions that 1.7.3 still lists, always 0 */
	json_num(o, "packetcache-hits", 0, false);
	json_num(o, "packetcache-misses", 0, false);
	json_num(o, "over-capacity-drops", 0, false);
	json_num(o, "too-old-drops", 0, false);
	if (dlb_daemon.cfg != NULL)
		json_str(o, "server-policy", dlb_config_policy_name(dlb_daemon.cfg,
								    dlb_daemon.cfg->set.policy));
	return o;
}

static cJSON *
json_statistics(void)
{
	struct dlb_metric m[DLB_METRICS_MAX];
	size_t n = dlb_metrics_global(m, DLB_METRICS_MAX);
	cJSON *a = cJSON_CreateArray();

	if (a == NULL)
		return NULL;
	for (size_t i = 0; i < n; i++) {
		cJSON *it;

		if (m[i].expensive)
			continue;
		it = cJSON_CreateObject();
		if (it == NULL)
			break;
		json_str(it, "name", m[i].name);
		cJSON_AddStringToObject(it, "type", "StatisticItem");
		json_num(it, "value", m[i].value, m[i].is_double);
		cJSON_AddItemToArray(a, it);
	}
	return a;
}

/* Does backend @be belong to pool @p (the pool's own member list decides)? */
static bool
in_pool(const struct dlb_pool *p, const struct dlb_backend *be)
{
	for (int i = 0; i < p->n; i++)
		if (p->members[i] == be)
			return true;
	return false;
}

static int
cmp_str(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/*
 * The pools given to newServer (or added later), sorted and unique, as
 * dnsdist's std::set: a server left in the default pool alone has none.
 */
static void
add_pool_names(cJSON *a, const struct dlb_backend *be)
{
	const char *names[DLB_MAX_POOLS_PER_BACKEND + 1];
	size_t n = 0;

	if (be->named_default)
		names[n++] = "";
	for (int i = 0; i < be->npools && n < DLB_MAX_POOLS_PER_BACKEND; i++)
		names[n++] = be->pools[i];
	qsort(names, n, sizeof(names[0]), cmp_str);
	for (size_t i = 0; i < n; i++)
		if (i == 0 || strcmp(names[i], names[i - 1]) != 0)
			cJSON_AddItemToArray(a, json_str_item(names[i]));
}

/* dnsdist's per-frontend TLS figures, in key order: the queries by version
 * (enum dlb_tls_version_idx, the unknown ones apart), and the handshake
 * failures by reason (enum dlb_tls_failure; DNS over TLS listeners only) */
static const char *const frontend_tls_query_keys[] = {
	"tls10Queries", "tls11Queries", "tls12Queries", "tls13Queries",
};
static const char *const frontend_tls_failure_keys[] = {
	"tlsHandshakeFailuresDHKeyTooSmall", "tlsHandshakeFailuresInappropriateFallBack",
	"tlsHandshakeFailuresNoSharedCipher", "tlsHandshakeFailuresUnknownCipher",
	"tlsHandshakeFailuresUnknownKeyExchangeType", "tlsHandshakeFailuresUnknownProtocol",
	"tlsHandshakeFailuresUnsupportedEC", "tlsHandshakeFailuresUnsupportedProtocol",
};

/* A frontend's TLS keys of /api/v1/servers/localhost (dnsdist's, 0 for plain ones). */
static void
json_frontend_tls(cJSON *f, const struct dlb_metrics_frontend *m)
{
	for (size_t k = 0; k < sizeof(frontend_tls_query_keys) / sizeof(frontend_tls_query_keys[0]);
	     k++)
		json_u64(f, frontend_tls_query_keys[k], m->tls_queries[k]);
	if (m->tls != NULL)
		for (size_t k = 0; k < sizeof(frontend_tls_failure_keys) /
					       sizeof(frontend_tls_failure_keys[0]); k++)
			json_u64(f, frontend_tls_failure_keys[k], m->tls_failures[k]);
	json_u64(f, "tlsInactiveTicketKey", m->tls_inactive_ticket_keys);
	json_u64(f, "tlsNewSessions", m->tls_new_sessions);
	json_u64(f, "tlsResumptions", m->tls_resumptions);
	json_u64(f, "tlsUnknownQueries", m->tls_queries[DLB_TLS_VUNKNOWN]);
	json_u64(f, "tlsUnknownTicketKey", m->tls_unknown_ticket_keys);
}

static cJSON *
json_server(int id, const struct dlb_metrics_backend *m)
{
	cJSON *o = cJSON_CreateObject(), *pools;

	if (o == NULL)
		return NULL;
	json_str(o, "address", m->be->addr_text);
	json_num(o, "dropRate", m->drate, true);
	cJSON_AddNumberToObject(o, "id", id);
	json_num(o, "latency", m->latency_ms, true);
	json_str(o, "name", m->be->name);
	cJSON_AddNumberToObject(o, "order", m->order);
	json_u64(o, "outstanding", m->outstanding);
	pools = cJSON_AddArrayToObject(o, "pools");
	if (pools != NULL)
		add_pool_names(pools, m->be);
	json_num(o, "qps", m->qps, true);
	cJSON_AddNumberToObject(o, "qpsLimit", m->qps_limit);
	json_u64(o, "queries", m->queries);
	json_u64(o, "responses", m->responses);
	json_u64(o, "reuseds", m->drops);
	json_u64(o, "sendErrors", m->send_errors);
	json_str(o, "state", m->state);
	/* TCP and TLS towards the backend (docs/web.md) */
	json_avg(o, "tcpAvgConnectionDuration", m->tcp_avg_duration);
	json_avg(o, "tcpAvgQueriesPerConnection", m->tcp_avg_queries);
	json_u64(o, "tcpConnectTimeouts", m->tcp_connect_timeouts);
	json_u64(o, "tcpCurrentConnections", m->tcp_current);
	json_u64(o, "tcpDiedReadingResponse", m->tcp_died_reading);
	json_u64(o, "tcpDiedSendingQuery", m->tcp_died_sending);
	json_u64(o, "tcpGaveUp", m->tcp_gave_up);
	json_u64(o, "tcpMaxConcurrentConnections", m->tcp_max);
	json_u64(o, "tcpNewConnections", m->tcp_new);
	json_u64(o, "tcpReadTimeouts", m->tcp_read_timeouts);
	json_u64(o, "tcpReusedConnections", m->tcp_reused);
	json_u64(o, "tcpWriteTimeouts", m->tcp_write_timeouts);
	json_u64(o, "tlsResumptions", m->tls_resumptions);
	cJSON_AddNumberToObject(o, "weight", m->weight);
	return o;
}

static void
json_pool_stats(cJSON *o, const struct dlb_metrics_pool *p)
{
	json_u64(o, "cacheDeferredInserts", p->cache_deferred_inserts);
	json_u64(o, "cacheDeferredLookups", p->cache_deferred_lookups);
	json_u64(o, "cacheEntries", p->cache_entries);
	json_u64(o, "cacheHits", p->cache_hits);
	json_u64(o, "cacheInsertCollisions", p->cache_insert_collisions);
	json_u64(o, "cacheLookupCollisions", p->cache_lookup_collisions);
	json_u64(o, "cacheMisses", p->cache_misses);
	json_u64(o, "cacheSize", p->cache_size);
	json_u64(o, "cacheTTLTooShorts", p->cache_ttl_too_shorts);
	json_str(o, "name", p->name);
	cJSON_AddNumberToObject(o, "serversCount", p->servers);
}

/* The rules of @chain as dnsdist's Rule / ResponseRule objects. */
static cJSON *
json_rules(const struct rule_vec *rv, const char *chain, bool query_rules)
{
	cJSON *a = cJSON_CreateArray();
	int id = 0;

	if (a == NULL)
		return NULL;
	for (size_t i = 0; i < rv->n; i++) {
		const struct dlb_metrics_rule *r = &rv->v[i];
		cJSON *o;

		if (strcmp(r->chain, chain) != 0)
			continue;
		o = cJSON_CreateObject();
		if (o == NULL)
			break;
		json_str(o, "action", r->action);
		if (query_rules) {
			cJSON *st = cJSON_AddObjectToObject(o, "action-stats");

			/* a TeeAction's figures; dnsdist 1.7.3's {"": 0} for an
			 * action that keeps none */
			for (int k = 0; st != NULL && r->tee && k < DLB_TEE__COUNT; k++)
				json_u64(st, dlb_tee_names[k], r->tee_stats[k]);
			if (st != NULL && !r->tee)
				json_u64(st, "", 0);
		}
		/* position over all chains, as dnsdist's creation order is global */
		cJSON_AddNumberToObject(o, "creationOrder", (double)i);
		cJSON_AddNumberToObject(o, "id", id++);
		json_u64(o, "matches", r->matches);
		/* dnsdist 1.7.3 names its response rules only */
		if (!query_rules)
			json_str(o, "name", strcmp(r->id, r->uuid) != 0 ? r->id : "");
		json_str(o, "rule", r->rule);
		json_str(o, "uuid", r->uuid);
		cJSON_AddItemToArray(a, o);
	}
	return a;
}

/* GET /api/v1/servers/localhost */
static cJSON *
json_localhost(void)
{
	const struct dlb_config *cfg = dlb_daemon.cfg;
	cJSON *o = cJSON_CreateObject(), *a;
	struct dlb_metrics_backend *bv = NULL;
	struct dlb_metrics_frontend *fv = NULL;
	struct dlb_metrics_pool *pv = NULL;
	int *thread = NULL, n;
	struct rule_vec rv = { 0 };
	struct dlb_buf b = WEB_BUF_INIT;

	bv = calloc(DLB_MAX_BACKENDS, sizeof(*bv));
	fv = calloc(DLB_MAX_FRONTENDS * 2, sizeof(*fv));
	thread = calloc(DLB_MAX_FRONTENDS * 2, sizeof(*thread));
	pv = calloc(DLB_MAX_POOLS, sizeof(*pv));
	if (o == NULL || bv == NULL || fv == NULL || thread == NULL || pv == NULL ||
	    collect_rules(&rv) != 0) {
		cJSON_Delete(o);
		o = NULL;
		goto out;
	}

	if (cfg != NULL) {
		for (size_t i = 0; i < cfg->acl.n; i++) {
			char nm[64];

			dlb_netmask_format(&cfg->acl.v[i], nm, sizeof(nm));
			dlb_buf_printf(&b, "%s%s", i > 0 ? ", " : "", nm);
		}
	}
	cJSON_AddStringToObject(o, "acl", b.p != NULL ? b.p : "");
	cJSON_AddItemToObject(o, "cache-hit-response-rules",
			      json_rules(&rv, "cache-hit-response-rules", false));
	/* a dnsdist 1.8 chain: shown once it has rules, so that the document
	 * of a dnsdist 1.7 configuration is dnsdist 1.7's */
	for (size_t i = 0; i < rv.n; i++) {
		if (strcmp(rv.v[i].chain, "cache-inserted-response-rules") != 0)
			continue;
		cJSON_AddItemToObject(o, "cache-inserted-response-rules",
				      json_rules(&rv, "cache-inserted-response-rules", false));
		break;
	}
	/* dnsdist's value, kept so that tools written for it accept dnslb */
	cJSON_AddStringToObject(o, "daemon_type", "dnsdist");
	a = cJSON_AddArrayToObject(o, "dohFrontends");
	n = get_frontends(fv, thread, DLB_MAX_FRONTENDS * 2);
	for (int i = 0, id = 0; a != NULL && i < n; i++)
		if (fv[i].doh)
			json_doh_frontend(a, &fv[i], id++);

	a = cJSON_AddArrayToObject(o, "frontends");
	for (int i = 0; a != NULL && i < n; i++) {
		cJSON *f = cJSON_CreateObject();
		bool tcp = fv[i].tcp;

		if (f == NULL)
			break;
		json_str(f, "address", fv[i].address);
		cJSON_AddNumberToObject(f, "id", i);
		json_u64(f, "queries", fv[i].queries);
		json_u64(f, "responses", fv[i].responses);
		cJSON_AddBoolToObject(f, "tcp", tcp);
		/* TCP figures (0 for UDP: dnslb/control/metrics.c) */
		json_avg(f, "tcpAvgConnectionDuration", fv[i].tcp_avg_duration);
		json_avg(f, "tcpAvgQueriesPerConnection", fv[i].tcp_avg_queries);
		json_u64(f, "tcpClientTimeouts", fv[i].tcp_client_timeouts);
		json_u64(f, "tcpCurrentConnections", fv[i].tcp_current);
		json_u64(f, "tcpDiedReadingQuery", fv[i].tcp_died_reading);
		json_u64(f, "tcpDiedSendingResponse", fv[i].tcp_died_sending);
		json_u64(f, "tcpDownstreamTimeouts", fv[i].tcp_downstream_timeouts);
		json_u64(f, "tcpGaveUp", fv[i].tcp_gave_up);
		json_u64(f, "tcpMaxConcurrentConnections", fv[i].tcp_max);
		json_frontend_tls(f, &fv[i]);
		json_str(f, "type", fv[i].proto);
		cJSON_AddBoolToObject(f, "udp", !tcp);
		cJSON_AddItemToArray(a, f);
	}

	dlb_buf_deinit(&b);
	if (cfg != NULL)
		for (int i = 0; i < cfg->nfrontends; i++)
			dlb_buf_printf(&b, "%s%s", i > 0 ? ", " : "", cfg->frontends[i].text);
	cJSON_AddStringToObject(o, "local", b.p != NULL ? b.p : "");

	a = cJSON_AddArrayToObject(o, "pools");
	n = get_pools(pv, DLB_MAX_POOLS);
	for (int i = 0; a != NULL && i < n; i++) {
		cJSON *p = cJSON_CreateObject();

		if (p == NULL)
			break;
		cJSON_AddNumberToObject(p, "id", i);
		json_pool_stats(p, &pv[i]);
		cJSON_AddItemToArray(a, p);
	}
	cJSON_AddItemToObject(o, "response-rules", json_rules(&rv, "response-rules", false));
	cJSON_AddItemToObject(o, "rules", json_rules(&rv, "rules", true));
	cJSON_AddItemToObject(o, "self-answered-response-rules",
			      json_rules(&rv, "self-answered-response-rules", false));
	a = cJSON_AddArrayToObject(o, "servers");
	n = get_backends(bv, DLB_MAX_BACKENDS);
	for (int i = 0; a != NULL && i < n; i++)
		cJSON_AddItemToArray(a, json_server(i, &bv[i]));
	cJSON_AddStringToObject(o, "version", DLB_VERSION);
out:
	dlb_buf_deinit(&b);
	free(rv.v);
	free(bv);
	free(fv);
	free(thread);
	free(pv);
	return o;
}

/* GET /api/v1/servers/localhost/pool?name=: @return NULL when there is no such pool. */
static cJSON *
json_pool(const char *name, bool *oom)
{
	struct dlb_metrics_pool *pv = calloc(DLB_MAX_POOLS, sizeof(*pv));
	struct dlb_metrics_backend *bv = calloc(DLB_MAX_BACKENDS, sizeof(*bv));
	cJSON *o = NULL, *a, *st;
	int np, nb, k = -1;

	*oom = pv == NULL || bv == NULL;
	if (*oom)
		goto out;
	np = get_pools(pv, DLB_MAX_POOLS);
	for (int i = 0; i < np; i++)
		if (strcmp(pv[i].name, name) == 0)
			k = i;
	if (k < 0)
		goto out;
	o = cJSON_CreateObject();
	if (o == NULL) {
		*oom = true;
		goto out;
	}
	a = cJSON_AddArrayToObject(o, "servers");
	nb = get_backends(bv, DLB_MAX_BACKENDS);
	for (int i = 0; a != NULL && i < nb; i++)
		if (in_pool(pv[k].pool, bv[i].be))
			cJSON_AddItemToArray(a, json_server(i, &bv[i]));
	st = cJSON_AddObjectToObject(o, "stats");
	if (st != NULL)
		json_pool_stats(st, &pv[k]);
out:
	free(pv);
	free(bv);
	return o;
}

/* GET /api/v1/servers/localhost/top?n=&labels= (dnslb): the dashboard's lists. */
static cJSON *
json_top(size_t n, int labels)
{
	struct dlb_top_entry *v = calloc(n, sizeof(*v));
	cJSON *o = cJSON_CreateObject();
	uint64_t total;
	size_t k;

	if (v == NULL || o == NULL) {
		cJSON_Delete(o);
		free(v);
		return NULL;
	}
	for (int pass = 0; pass < 2; pass++) {
		cJSON *a = cJSON_AddArrayToObject(o, pass == 0 ? "names" : "clients");

		k = pass == 0 ? dlb_rings_top_names(n, labels, v, &total)
			      : dlb_rings_top_clients(n, v, &total);
		for (size_t i = 0; a != NULL && i < k && i < n; i++) {
			cJSON *e = cJSON_CreateObject();

			if (e == NULL)
				break;
			v[i].key[sizeof(v[i].key) - 1] = '\0';
			json_str(e, pass == 0 ? "name" : "client", v[i].key);
			json_u64(e, "count", v[i].count);
			cJSON_AddItemToArray(a, e);
		}
		json_u64(o, pass == 0 ? "names-total" : "clients-total", total);
	}
	free(v);
	return o;
}

/* ---- HTTP ------------------------------------------------------------------------ */

/* What a handler answers. */
struct reply {
	unsigned status;
	const char *ctype;		/* static */
	char *body;			/* malloc'ed, or NULL (empty) */
	size_t len;
	bool challenge;			/* 401 with WWW-Authenticate */
	bool dashboard;			/* the page: its own CSP */
	const char *allow;		/* 405 / OPTIONS: Allow header */
};

static void
reply_json(struct reply *r, unsigned status, cJSON *j)
{
	r->status = status;
	r->ctype = "application/json";
	r->body = j != NULL ? cJSON_PrintUnformatted(j) : NULL;
	cJSON_Delete(j);
	if (r->body == NULL) {
		r->status = MHD_HTTP_INTERNAL_SERVER_ERROR;
		r->body = strdup("{\"error\":\"out of memory\"}");
	}
	r->len = r->body != NULL ? strlen(r->body) : 0;
}

static void
reply_error(struct reply *r, unsigned status, const char *msg)
{
	cJSON *j = cJSON_CreateObject();

	if (j != NULL)
		json_str(j, "error", msg);
	reply_json(r, status, j);
	r->status = status;
}

/* An argument of the query string, or NULL. @present: the key was there at all. */
static const char *
get_arg(struct MHD_Connection *c, const char *key, bool *present)
{
	const char *v = NULL;
	enum MHD_Result found = MHD_lookup_connection_value_n(c, MHD_GET_ARGUMENT_KIND, key,
							      strlen(key), &v, NULL);

	if (present != NULL)
		*present = found == MHD_YES;
	return found == MHD_YES ? v : NULL;
}

static bool
basic_password_ok(struct MHD_Connection *c)
{
	const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
	uint8_t dec[DLB_WEB_MAX_CRED + 256];
	size_t declen = 0, hl;
	const char *end = NULL, *colon;
	bool ok;

	if (!web.password.set || h == NULL || strncasecmp(h, "basic ", 6) != 0)
		return false;
	h += 6;
	while (*h == ' ')
		h++;
	hl = strlen(h);
	while (hl > 0 && h[hl - 1] == ' ')
		hl--;
	if (hl == 0 || hl > (sizeof(dec) - 1) / 3 * 4)
		return false;
	if (sodium_base642bin(dec, sizeof(dec) - 1, h, hl, NULL, &declen, &end,
			      sodium_base64_VARIANT_ORIGINAL) != 0 || end != h + hl) {
		if (sodium_base642bin(dec, sizeof(dec) - 1, h, hl, NULL, &declen, &end,
				      sodium_base64_VARIANT_ORIGINAL_NO_PADDING) != 0 ||
		    end != h + hl)
			return false;
	}
	/* RFC 7617: the user name ends at the first colon; any user name is accepted */
	colon = memchr(dec, ':', declen);
	ok = colon != NULL &&
	     cred_matches(&web.password, colon + 1, declen - (size_t)(colon + 1 - (char *)dec));
	sodium_memzero(dec, sizeof(dec));
	return ok;
}

static bool
api_key_ok(struct MHD_Connection *c)
{
	const char *k = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-API-Key");

	return web.api_key.set && k != NULL && cred_matches(&web.api_key, k, strlen(k));
}

/* The API endpoints the dashboard polls: a valid password also opens them (dnsdist). */
static bool
api_allowed_with_password(const char *path)
{
	return strcmp(path, "/api/v1/servers/localhost") == 0 ||
	       strcmp(path, "/api/v1/servers/localhost/top") == 0;
}

/* dnsdist 1.7's handleAuthorization(). */
static bool
handle_auth(struct MHD_Connection *c, const char *path, bool *challenge)
{
	if (strcmp(path, "/metrics") == 0 || strcmp(path, "/jsonstat") == 0) {
		*challenge = true;
		return web.stats_auth_off || api_key_ok(c) || basic_password_ok(c);
	}
	if (strncmp(path, "/api/", 5) == 0) {
		*challenge = false;
		if (web.api_auth_off || api_key_ok(c))
			return true;
		return api_allowed_with_password(path) && basic_password_ok(c);
	}
	*challenge = true;
	return web.dashboard_auth_off || basic_password_ok(c);
}

/*
 * Cross-origin requests are refused: a browser names the page's origin in
 * Origin on cross-origin (and some same-origin) requests; it must be this
 * server as the request's Host names it.
 */
static bool
origin_ok(struct MHD_Connection *c)
{
	const char *origin = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin");
	const char *host = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Host");
	const char *rest;

	if (origin == NULL)
		return true;
	if (host == NULL || *host == '\0')
		return false;
	if (strncasecmp(origin, "http://", 7) == 0)
		rest = origin + 7;
	else if (strncasecmp(origin, "https://", 8) == 0)
		rest = origin + 8;
	else
		return false;
	return strcasecmp(rest, host) == 0;
}

/* A qtype from "AAAA", "TYPE28" or "#28" (dnsdist's API). @return -1 if invalid. */
static int
parse_qtype(const char *s)
{
	int v;
	uint64_t n;
	const char *digits = NULL;

	if (dlb_named_lookup(dlb_qtype_names, s, &v))
		return v;
	if (strncasecmp(s, "TYPE", 4) == 0)
		digits = s + 4;
	else if (s[0] == '#')
		digits = s + 1;
	if (digits != NULL && parse_dec(digits, digits + strlen(digits), 0, 65535, &n))
		return (int)n;
	return -1;
}

/* DELETE /api/v1/cache?pool=&name=[&type=][&suffix] */
static void
handle_cache_delete(struct MHD_Connection *c, struct reply *r)
{
	const char *pool = get_arg(c, "pool", NULL), *name = get_arg(c, "name", NULL);
	const char *type = get_arg(c, "type", NULL);
	bool suffix = false;
	uint8_t wire[DLB_MAX_NAME];
	struct dlb_pool *p;
	int len, qtype = 255;
	size_t removed;
	char count[32];
	cJSON *j;

	(void)get_arg(c, "suffix", &suffix);
	if (pool == NULL)
		pool = "";
	if (name == NULL) {
		reply_error(r, MHD_HTTP_BAD_REQUEST, "the 'name' parameter is required");
		return;
	}
	len = dlb_wire_name_from_text(name, wire, sizeof(wire));
	if (len <= 0) {
		reply_error(r, MHD_HTTP_BAD_REQUEST, "invalid name");
		return;
	}
	for (int i = 0; i < len; i++)
		if (wire[i] >= 'A' && wire[i] <= 'Z')
			wire[i] = (uint8_t)(wire[i] - 'A' + 'a');
	if (type != NULL && (qtype = parse_qtype(type)) < 0) {
		reply_error(r, MHD_HTTP_BAD_REQUEST, "invalid type");
		return;
	}
	if (dlb_daemon.cfg == NULL || dlb_daemon.rcu == NULL) {
		reply_error(r, MHD_HTTP_SERVICE_UNAVAILABLE, "not running");
		return;
	}
	p = dlb_config_find_pool(dlb_daemon.cfg, pool);
	if (p == NULL) {
		reply_error(r, MHD_HTTP_NOT_FOUND, "no such pool");
		return;
	}
	if (p->cache == NULL) {
		reply_error(r, MHD_HTTP_NOT_FOUND, "the pool has no packet cache");
		return;
	}
	removed = dlb_cache_expunge_by_name(p->cache, dlb_daemon.rcu, wire, (size_t)len,
					    (uint16_t)qtype, suffix);
	if (dlb_daemon.rcu->depth == 0)
		dlb_rcu_poll(dlb_daemon.rcu);
	/* dnsdist 1.8's reply: the count as a string */
	j = cJSON_CreateObject();
	snprintf(count, sizeof(count), "%zu", removed);
	if (j != NULL) {
		cJSON_AddStringToObject(j, "count", count);
		cJSON_AddStringToObject(j, "status", "purged");
	}
	reply_json(r, MHD_HTTP_OK, j);
}

static bool
method_is(const char *m, const char *want)
{
	return strcmp(m, want) == 0;
}

/* Route an authenticated request. */
static void
route(struct MHD_Connection *c, const char *path, const char *method, struct reply *r)
{
	bool get = method_is(method, "GET") || method_is(method, "HEAD");

	if (strcmp(path, "/api/v1/cache") == 0) {
		if (!method_is(method, "DELETE")) {
			r->allow = "DELETE, OPTIONS";
			reply_error(r, MHD_HTTP_METHOD_NOT_ALLOWED, "method not allowed");
			return;
		}
		handle_cache_delete(c, r);
		return;
	}
	if (strcmp(path, "/") != 0 && strcmp(path, "/index.html") != 0 &&
	    strcmp(path, "/metrics") != 0 && strcmp(path, "/jsonstat") != 0 &&
	    strcmp(path, "/api/v1/servers/localhost") != 0 &&
	    strcmp(path, "/api/v1/servers/localhost/statistics") != 0 &&
	    strcmp(path, "/api/v1/servers/localhost/pool") != 0 &&
	    strcmp(path, "/api/v1/servers/localhost/top") != 0 &&
	    strcmp(path, "/api/v1/fleet") != 0) {
		reply_error(r, MHD_HTTP_NOT_FOUND, "not found");
		return;
	}
	if (!get) {
		r->allow = "GET, HEAD, OPTIONS";
		reply_error(r, MHD_HTTP_METHOD_NOT_ALLOWED, "method not allowed");
		return;
	}
	if (strcmp(path, "/") == 0 || strcmp(path, "/index.html") == 0) {
		r->status = MHD_HTTP_OK;
		r->ctype = "text/html; charset=utf-8";
		r->body = malloc(dlb_dashboard_html_len + 1);
		if (r->body == NULL) {
			reply_error(r, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory");
			return;
		}
		memcpy(r->body, dlb_dashboard_html, dlb_dashboard_html_len);
		r->len = dlb_dashboard_html_len;
		r->dashboard = true;
	} else if (strcmp(path, "/metrics") == 0) {
		struct dlb_buf b = WEB_BUF_INIT;

		build_metrics(&b);
		if (dlb_buf_failed(&b)) {
			dlb_buf_deinit(&b);
			reply_error(r, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory");
			return;
		}
		r->status = MHD_HTTP_OK;
		r->ctype = "text/plain; version=0.0.4; charset=utf-8";
		r->body = b.p;
		r->len = b.len;
	} else if (strcmp(path, "/jsonstat") == 0) {
		const char *cmd = get_arg(c, "command", NULL);

		if (cmd != NULL && strcmp(cmd, "stats") == 0)
			reply_json(r, MHD_HTTP_OK, json_stats());
		else if (cmd != NULL && strcmp(cmd, "dynblocklist") == 0) {
			/* dnsdist 1.7's shape: the active blocks keyed by netmask or name */
			cJSON *o = cJSON_CreateObject();

			if (o != NULL && dlb_dyn_fill_json(o, dlb_dyn_now()) != 0) {
				cJSON_Delete(o);
				o = NULL;
			}
			reply_json(r, MHD_HTTP_OK, o);
		}
		else if (cmd != NULL && strcmp(cmd, "ebpfblocklist") == 0)
			/* no eBPF in dnslb: the empty list of a dnsdist built without it */
			reply_json(r, MHD_HTTP_OK, cJSON_CreateObject());
		else
			reply_error(r, MHD_HTTP_NOT_FOUND, "unknown command");
	} else if (strcmp(path, "/api/v1/servers/localhost") == 0) {
		reply_json(r, MHD_HTTP_OK, json_localhost());
	} else if (strcmp(path, "/api/v1/servers/localhost/statistics") == 0) {
		reply_json(r, MHD_HTTP_OK, json_statistics());
	} else if (strcmp(path, "/api/v1/fleet") == 0) {
		/* the copy the main thread refreshes every second (docs/fleet.md) */
		reply_json(r, MHD_HTTP_OK, dlb_fleet_json(dlb_dyn_now()));
	} else if (strcmp(path, "/api/v1/servers/localhost/pool") == 0) {
		const char *name = get_arg(c, "name", NULL);
		bool oom;
		cJSON *j;

		if (name == NULL) {
			reply_error(r, MHD_HTTP_BAD_REQUEST, "the 'name' parameter is required");
			return;
		}
		j = json_pool(name, &oom);
		if (j == NULL)
			reply_error(r, oom ? MHD_HTTP_INTERNAL_SERVER_ERROR : MHD_HTTP_NOT_FOUND,
				    oom ? "out of memory" : "no such pool");
		else
			reply_json(r, MHD_HTTP_OK, j);
	} else {
		const char *ns = get_arg(c, "n", NULL), *ls = get_arg(c, "labels", NULL);
		uint64_t n = 10, labels = 0;

		if ((ns != NULL && !parse_dec(ns, ns + strlen(ns), 1, WEB_TOP_MAX, &n)) ||
		    (ls != NULL && !parse_dec(ls, ls + strlen(ls), 0, 127, &labels))) {
			reply_error(r, MHD_HTTP_BAD_REQUEST,
				    "'n' must be in 1..100 and 'labels' in 0..127");
			return;
		}
		reply_json(r, MHD_HTTP_OK, json_top((size_t)n, (int)labels));
	}
}

static const char *
header_value(const char *name, const char *def)
{
	for (int i = 0; i < web.nheaders; i++)
		if (strcasecmp(web.headers[i].name, name) == 0)
			return web.headers[i].value;
	return def;
}

static enum MHD_Result
send_reply(struct MHD_Connection *c, struct reply *r)
{
	struct MHD_Response *resp;
	enum MHD_Result ret;

	resp = MHD_create_response_from_buffer(r->len, r->body != NULL ? r->body : (char *)"",
					       r->body != NULL ? MHD_RESPMEM_MUST_FREE
							       : MHD_RESPMEM_PERSISTENT);
	if (resp == NULL) {
		free(r->body);
		return MHD_NO;
	}
	if (r->ctype != NULL)
		MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, r->ctype);
	if (r->challenge && r->status == MHD_HTTP_UNAUTHORIZED)
		MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE,
					"Basic realm=\"dnslb\"");
	if (r->allow != NULL)
		MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, r->allow);
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
	/* the security headers, each replaced by a custom header of its name
	 * (an empty one removes it), then the other custom headers */
	for (size_t i = 0; i < sizeof(default_headers) / sizeof(default_headers[0]); i++) {
		const char *def = default_headers[i][1];

		if (r->dashboard && strcmp(default_headers[i][0], "Content-Security-Policy") == 0 &&
		    web.dash_csp[0] != '\0')
			def = web.dash_csp;
		def = header_value(default_headers[i][0], def);
		if (*def != '\0')
			MHD_add_response_header(resp, default_headers[i][0], def);
	}
	for (int i = 0; i < web.nheaders; i++) {
		bool is_default = false;

		for (size_t k = 0; k < sizeof(default_headers) / sizeof(default_headers[0]); k++)
			if (strcasecmp(web.headers[i].name, default_headers[k][0]) == 0)
				is_default = true;
		if (!is_default && web.headers[i].value[0] != '\0')
			MHD_add_response_header(resp, web.headers[i].name, web.headers[i].value);
	}
	ret = MHD_queue_response(c, r->status, resp);
	MHD_destroy_response(resp);
	return ret;
}

/* Sum of the query string's lengths (MHD hands the path alone to access_cb). */
static enum MHD_Result
sum_arg(void *cls, enum MHD_ValueKind kind, const char *key, const char *value)
{
	size_t *total = cls;

	(void)kind;
	*total += strlen(key) + 2 + (value != NULL ? strlen(value) : 0);
	return MHD_YES;
}

/* Markers for *con_cls: the request is being read, or was answered. */
static char req_reading, req_answered;

/*
 * MHD calls this first once the headers are in, then with the body (if
 * any), then once more with nothing: the answer goes out on that last call,
 * so keep-alive works. A request declaring a body is refused at once (MHD
 * then closes the connection, discarding the body).
 */
static enum MHD_Result
access_cb(void *cls, struct MHD_Connection *c, const char *url, const char *method,
	  const char *version, const char *upload_data, size_t *upload_data_size, void **con_cls)
{
	struct reply r = { 0 };
	const char *cl, *te;
	bool challenge = false;
	size_t urllen = strlen(url);

	(void)cls;
	(void)version;
	(void)upload_data;
	if (*con_cls == &req_answered) {
		*upload_data_size = 0;
		return MHD_YES;
	}
	if (*con_cls == NULL) {
		*con_cls = &req_reading;
		cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
						 MHD_HTTP_HEADER_CONTENT_LENGTH);
		te = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
						 MHD_HTTP_HEADER_TRANSFER_ENCODING);
		if ((cl == NULL || strcmp(cl, "0") == 0) && te == NULL)
			return MHD_YES;		/* answered on the next call */
		reply_error(&r, MHD_HTTP_CONTENT_TOO_LARGE, "request bodies are not accepted");
	} else if (*upload_data_size != 0) {
		*upload_data_size = 0;
		reply_error(&r, MHD_HTTP_CONTENT_TOO_LARGE, "request bodies are not accepted");
	} else {
		MHD_get_connection_values(c, MHD_GET_ARGUMENT_KIND, sum_arg, &urllen);
		if (urllen > WEB_MAX_URL) {
			reply_error(&r, MHD_HTTP_URI_TOO_LONG, "URL too long");
		} else if (!origin_ok(c)) {
			reply_error(&r, MHD_HTTP_FORBIDDEN, "cross-origin requests are not allowed "
				    "(Origin does not match Host)");
		} else if (method_is(method, "OPTIONS")) {
			r.status = MHD_HTTP_NO_CONTENT;
			r.allow = strcmp(url, "/api/v1/cache") == 0 ? "DELETE, OPTIONS"
								      : "GET, HEAD, OPTIONS";
		} else if (!handle_auth(c, url, &challenge)) {
			r.challenge = challenge;
			reply_error(&r, MHD_HTTP_UNAUTHORIZED, "Unauthorized");
		} else {
			route(c, url, method, &r);
		}
	}
	*con_cls = &req_answered;
	return send_reply(c, &r);
}

/* Accept policy: the web ACL and maxConcurrentConnections. */
static enum MHD_Result
accept_cb(void *cls, const struct sockaddr *addr, socklen_t addrlen)
{
	(void)cls;
	(void)addrlen;
	if (!acl_allows(addr)) {
		char text[64];

		if (addr != NULL) {
			dlb_sockaddr_format(addr, text, sizeof(text));
			dlb_log_ratelimited(DLB_LOG_INFO,
					    "Webserver: refused a connection from %s (ACL)", text);
		}
		return MHD_NO;
	}
	if (web.nconns >= max_conns()) {
		dlb_log_ratelimited(DLB_LOG_WARN,
				    "Webserver: refused a connection, %d connections already open",
				    web.nconns);
		return MHD_NO;
	}
	return MHD_YES;
}

static void
notify_cb(void *cls, struct MHD_Connection *c, void **socket_context,
	  enum MHD_ConnectionNotificationCode toe)
{
	(void)cls;
	(void)c;
	(void)socket_context;
	if (toe == MHD_CONNECTION_NOTIFY_STARTED)
		web.nconns++;
	else if (web.nconns > 0)
		web.nconns--;
}

/* ---- the main loop ----------------------------------------------------------------- */

static void
listener_rearm(struct web_listener *l)
{
	MHD_UNSIGNED_LONG_LONG ms;

	ev_timer_stop(l->loop, &l->tm);
	if (MHD_get_timeout(l->mhd, &ms) == MHD_YES) {
		ev_timer_set(&l->tm, (double)ms / 1000.0, 0.);
		ev_timer_start(l->loop, &l->tm);
	}
}

static void
listener_run(struct web_listener *l)
{
	MHD_run(l->mhd);
	listener_rearm(l);
}

static void
listener_io_cb(struct ev_loop *loop, ev_io *w, int revents)
{
	(void)loop;
	(void)revents;
	listener_run(w->data);
}

static void
listener_timer_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
	(void)loop;
	(void)revents;
	listener_run(w->data);
}

/* Compute the dashboard's CSP: its one inline script allowed by hash. */
static void
dashboard_csp(void)
{
	const char *html = (const char *)dlb_dashboard_html, *s, *e;
	size_t len = dlb_dashboard_html_len;
	uint8_t h[crypto_hash_sha256_BYTES];
	char b64[64];

	web.dash_csp[0] = '\0';
	s = memmem(html, len, "<script>", 8);
	if (s == NULL)
		return;
	s += 8;
	e = memmem(s, len - (size_t)(s - html), "</script>", 9);
	if (e == NULL || !sodium_ready())
		return;
	crypto_hash_sha256(h, (const uint8_t *)s, (size_t)(e - s));
	sodium_bin2base64(b64, sizeof(b64), h, sizeof(h), sodium_base64_VARIANT_ORIGINAL);
	snprintf(web.dash_csp, sizeof(web.dash_csp),
		 "default-src 'self'; style-src 'self' 'unsafe-inline'; "
		 "script-src 'sha256-%s'; img-src 'self' data:", b64);
}

/* Hand listener @l's socket to a new MHD daemon on @loop. @return 0 or -1 (@err). */
static int
listener_start(struct web_listener *l, struct ev_loop *loop, char *err, size_t errlen)
{
	const union MHD_DaemonInfo *info;

	if (web.dash_csp[0] == '\0')
		dashboard_csp();
	if (!MHD_is_feature_supported(MHD_FEATURE_EPOLL)) {
		snprintf(err, errlen, "Webserver: this libmicrohttpd has no epoll support");
		return -1;
	}
	l->mhd = MHD_start_daemon(MHD_USE_EPOLL, 0, accept_cb, NULL, access_cb, NULL,
				  MHD_OPTION_LISTEN_SOCKET, (MHD_socket)l->fd,
				  MHD_OPTION_CONNECTION_LIMIT, (unsigned int)1000,
				  MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int)WEB_CONN_TIMEOUT,
				  MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)WEB_CONN_MEMORY,
				  MHD_OPTION_NOTIFY_CONNECTION, notify_cb, NULL,
				  MHD_OPTION_END);
	if (l->mhd == NULL) {
		snprintf(err, errlen, "Webserver: unable to start on %s", l->text);
		return -1;
	}
	l->fd = -1;	/* MHD's now: closed by MHD_stop_daemon */
	info = MHD_get_daemon_info(l->mhd, MHD_DAEMON_INFO_EPOLL_FD);
	if (info == NULL) {
		MHD_stop_daemon(l->mhd);
		l->mhd = NULL;
		snprintf(err, errlen, "Webserver: no epoll descriptor for %s", l->text);
		return -1;
	}
	l->loop = loop;
	ev_io_init(&l->io, listener_io_cb, info->epoll_fd, EV_READ);
	l->io.data = l;
	ev_io_start(loop, &l->io);
	ev_timer_init(&l->tm, listener_timer_cb, 0., 0.);
	l->tm.data = l;
	listener_rearm(l);
	dlb_info("Webserver launched on %s", l->text);
	return 0;
}

static void
listener_stop(struct web_listener *l)
{
	if (l->mhd != NULL) {
		ev_io_stop(l->loop, &l->io);
		ev_timer_stop(l->loop, &l->tm);
		MHD_stop_daemon(l->mhd);
		l->mhd = NULL;
	}
	if (l->fd >= 0) {
		close(l->fd);
		l->fd = -1;
	}
}

int
dlb_web_parse_address(const char *addr, char *err, size_t errlen)
{
	struct sockaddr_storage ss;
	socklen_t len;

	if (dlb_sockaddr_parse(addr, 0, &ss, &len) != 0) {
		snprintf(err, errlen, "Error parsing the bind address for the webserver: '%s'",
			 addr);
		return -1;
	}
	return 0;
}

int
dlb_web_listen(const char *addr, char *err, size_t errlen)
{
	struct sockaddr_storage ss;
	socklen_t len;
	struct web_listener *l;
	int fd, one = 1;

	if (dlb_sockaddr_parse(addr, 0, &ss, &len) != 0) {
		snprintf(err, errlen, "Error parsing the bind address for the webserver: '%s'",
			 addr);
		return -1;
	}
	if (web.nlisteners == DLB_WEB_MAX_LISTENERS) {
		snprintf(err, errlen, "too many webserver() addresses (%d at most)",
			 DLB_WEB_MAX_LISTENERS);
		return -1;
	}
	l = &web.listeners[web.nlisteners];
	fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd == -1)
		goto out_err;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (ss.ss_family == AF_INET6)
		setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&ss, len) == -1 || listen(fd, 64) == -1)
		goto out_close;
	len = sizeof(ss);
	if (getsockname(fd, (struct sockaddr *)&ss, &len) == -1)
		goto out_close;
	memset(l, 0, sizeof(*l));
	l->fd = fd;
	dlb_sockaddr_format((struct sockaddr *)&ss, l->text, sizeof(l->text));
	web.nlisteners++;
	if (web.loop != NULL && listener_start(l, web.loop, err, errlen) != 0) {
		dlb_err("%s", err);
		return -1;
	}
	return 0;
out_close:
	close(fd);
out_err:
	snprintf(err, errlen, "Unable to bind to webserver socket on %s: %s", addr,
		 strerror(errno));
	dlb_err("%s", err);
	return -1;
}

/* ---- the service -------------------------------------------------------------------- */

static int
web_start(struct ev_loop *loop, char *err, size_t errlen)
{
	/* kept even with no listener yet: webserver() from the console starts one */
	web.loop = loop;
	if (web.nlisteners == 0)
		return 0;
	acl_init_default();
	for (int i = 0; i < web.nlisteners; i++) {
		if (web.listeners[i].mhd == NULL &&
		    listener_start(&web.listeners[i], loop, err, errlen) != 0)
			return -1;
	}
	return 0;
}

static void
web_stop(void)
{
	for (int i = 0; i < web.nlisteners; i++)
		listener_stop(&web.listeners[i]);
	web.nlisteners = 0;
	web.loop = NULL;
	web.nconns = 0;
	cred_clear(&web.password);
	cred_clear(&web.api_key);
	headers_clear();
	web.headers_set = false;
}

const struct dlb_service dlb_web_service = {
	.name = "webserver",
	.start = web_start,
	.stop = web_stop,
};
