/*
 * web.h - the built-in web server (dnsdist's webserver()): Prometheus
 * /metrics, /jsonstat, the JSON API under /api/v1/, cache expunges over
 * HTTP and the live dashboard page (docs/web.md).
 *
 * libmicrohttpd runs on the main thread's libev loop with external polling
 * (its epoll fd watched by an ev_io, its timeouts by an ev_timer): no extra
 * thread, so request handlers read main-thread state (dlb_daemon, the
 * metrics, the running config) with no lock.
 *
 * Settings (password, API key, ACL, custom headers, switches) live in this
 * module; lua/web_lua.c validates Lua arguments and calls the setters below,
 * which never fail half-way: each either applies the whole change or
 * returns -1 with a message and leaves the old setting.
 *
 * Credentials follow dnsdist 1.7 (credentials.cc): a password or API key is
 * either plaintext, compared in constant time, or an scrypt hash
 * "$scrypt$ln=<log2 N>,p=<p>,r=<r>$<base64 salt>$<base64 hash>" (16-byte salt,
 * 32-byte hash) checked with libsodium; with hashPlaintextCredentials a
 * plaintext one is hashed when set and only the hash is kept.
 *
 * Thread: main only (config state, console, main loop).
 */
#ifndef DNSLB_WEB_H
#define DNSLB_WEB_H

#include <stdbool.h>
#include <stddef.h>

struct dlb_service;

/** Most webserver() listeners at once. */
#define DLB_WEB_MAX_LISTENERS 8
/** Most entries in the web ACL, and most custom headers. */
#define DLB_WEB_MAX_ACL 64
#define DLB_WEB_MAX_HEADERS 32
/** Longest credential (plaintext or hashed) accepted, in bytes. */
#define DLB_WEB_MAX_CRED 1024
/** dnsdist's bounds on hashPassword()'s work factor (scrypt N). */
#define DLB_WEB_SCRYPT_MAX_N 32768
/** Length of a hashPassword() result, with its NUL. */
#define DLB_WEB_HASH_LEN 128

/** The service main.c starts and stops (registered by lua/web_lua.c). */
extern const struct dlb_service dlb_web_service;

/* ---- credentials ------------------------------------------------------------ */

/**
 * dnsdist's hashPassword(): hash @pw with a random salt and scrypt N =
 * @work_factor (a power of two in 2..DLB_WEB_SCRYPT_MAX_N), r = 8, p = 1, into
 * @out (>= DLB_WEB_HASH_LEN bytes). @return 0, or -1 with @err.
 */
int dlb_web_hash_password(const char *pw, size_t len, unsigned long work_factor, char *out,
			  size_t outsz, char *err, size_t errlen);

/** Does @s look like a hashed credential (dnsdist's isPasswordHashed())? */
bool dlb_web_is_hashed(const char *s, size_t len);

/* ---- settings (setWebserverConfig) ------------------------------------------ */

/**
 * Set the dashboard password (@which = 0) or the API key (@which = 1) to
 * @text, hashed first when @hash_plaintext and it is not a hash already.
 * A malformed hash ("$scrypt$" prefix but bad parameters) is refused.
 * @return 0, or -1 with @err (nothing changed).
 */
int dlb_web_set_credential(int which, const char *text, size_t len, bool hash_plaintext,
			   char *err, size_t errlen);

/**
 * Parse a web ACL: comma- or space-separated netmasks, "!" before one
 * negates it (the most specific match decides, as dnsdist's NetmaskGroup).
 * With @apply the ACL replaces the current one. @return 0, or -1 with @err.
 */
int dlb_web_set_acl(const char *text, bool apply, char *err, size_t errlen);

/** Is @name: @value usable as a response header (token name, no control character)? */
bool dlb_web_header_ok(const char *name, const char *value);

/**
 * Replace the custom headers with @n pairs (each checked with
 * dlb_web_header_ok; they override the default security headers of the same
 * name, and an empty value removes that header). @return 0, or -1 (no memory).
 */
int dlb_web_set_headers(const char *const *names, const char *const *values, size_t n);

enum dlb_web_flag {
	DLB_WEB_STATS_AUTH = 0,		/* statsRequireAuthentication, default true */
	DLB_WEB_API_AUTH,		/* apiRequiresAuthentication, default true */
	DLB_WEB_DASHBOARD_AUTH,		/* dashboardRequiresAuthentication, default true */
};
void dlb_web_set_flag(enum dlb_web_flag f, bool on);

/** maxConcurrentConnections (default 100), for every listener together. */
void dlb_web_set_max_connections(int n);

/**
 * showWebserverConfig()'s text (dnsdist 1.7's lines) into a malloc'ed
 * string the caller frees, or NULL (no memory).
 */
char *dlb_web_config_text(void);

/* ---- listeners (webserver()) ------------------------------------------------ */

/**
 * Parse a listen address ("127.0.0.1:8083", "[::1]:8083"; port 0 unless
 * given). @return 0, or -1 with @err.
 */
int dlb_web_parse_address(const char *addr, char *err, size_t errlen);

/**
 * webserver(@addr): bind and listen now (config time, before privileges are
 * dropped, as dnsdist), and serve once the daemon runs; when it already runs
 * (console) serve at once. A bind failure is logged and returned, not fatal
 * (dnsdist). @return 0, or -1 with @err.
 */
int dlb_web_listen(const char *addr, char *err, size_t errlen);

#endif
