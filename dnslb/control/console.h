/*
 * console.h - dnsdist 1.7's encrypted console: the wire protocol, the
 * console settings (controlSocket, setKey, console ACL and limits) and the
 * server that runs on the main loop.
 *
 * Protocol (dnsdist's dnsdist-console.cc and sodcrypto.cc, unchanged, so
 * `dnsdist -c` drives dnslb and `dnslb -c` drives dnsdist):
 *  1. the client connects and sends a 24-byte random nonce; the server
 *     answers with its own;
 *  2. each side reads with its own nonce's first 12 bytes followed by the
 *     peer's last 12, and writes with the peer's first 12 followed by its
 *     own last 12 (dlb_console_nonce_merge);
 *  3. a message is a 32-bit big-endian length followed by
 *     crypto_secretbox_easy(plaintext, nonce, key) (16-byte MAC first); each
 *     side increments the first 4 bytes of the nonce it used, as a
 *     big-endian counter, after every message it sealed or opened;
 *  4. a message of length 0 is answered by a length of 0 (no nonce change);
 *  5. the client first sends the encrypted empty string: a server holding
 *     another key fails to open it and closes the connection.
 *
 * The server evaluates each command through a callback (the Lua side,
 * lua/console_lua.c), so this file does not depend on Lua.
 *
 * Thread: main only (settings, server). The protocol helpers are pure and
 * may run anywhere.
 */
#ifndef DNSLB_CONSOLE_H
#define DNSLB_CONSOLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "dnslb/core/netmask.h"

struct ev_loop;
struct dlb_service;

#define DLB_CONSOLE_PORT		5199
#define DLB_CONSOLE_KEY_BYTES		32	/* crypto_secretbox_KEYBYTES */
#define DLB_CONSOLE_NONCE_BYTES		24	/* crypto_secretbox_NONCEBYTES */
#define DLB_CONSOLE_MAC_BYTES		16	/* crypto_secretbox_MACBYTES */
#define DLB_CONSOLE_KEY_B64_LEN		45	/* base64 of a key, with its NUL */
#define DLB_CONSOLE_MAX_ADDRS		8	/* controlSocket() listeners */
#define DLB_CONSOLE_MAX_CONNS_DEFAULT	100
#define DLB_CONSOLE_MAX_CONNS_HARD	1024	/* also when the setting is 0 (no limit) */
#define DLB_CONSOLE_MAX_MSG_DEFAULT	10000000u	/* setConsoleOutputMaxMsgSize */

/* ---- protocol ---------------------------------------------------------------- */

/** A fresh random nonce (libsodium's randombytes). */
void dlb_console_nonce_init(uint8_t nonce[DLB_CONSOLE_NONCE_BYTES]);

/** @out = the first half of @lower followed by the second half of @higher. */
void dlb_console_nonce_merge(uint8_t out[DLB_CONSOLE_NONCE_BYTES],
			     const uint8_t lower[DLB_CONSOLE_NONCE_BYTES],
			     const uint8_t higher[DLB_CONSOLE_NONCE_BYTES]);

/** Increment the first 4 bytes of @nonce as a big-endian counter (wrapping). */
void dlb_console_nonce_increment(uint8_t nonce[DLB_CONSOLE_NONCE_BYTES]);

/**
 * Seal @len bytes of @msg into @out (@len + DLB_CONSOLE_MAC_BYTES bytes),
 * then increment @nonce.
 */
void dlb_console_seal(uint8_t *out, const void *msg, size_t len,
		      uint8_t nonce[DLB_CONSOLE_NONCE_BYTES],
		      const uint8_t key[DLB_CONSOLE_KEY_BYTES]);

/**
 * Open the @len-byte box @box into @out (@len - DLB_CONSOLE_MAC_BYTES bytes),
 * then increment @nonce. @return 0, or -1 (too short, or it does not
 * authenticate under @key and @nonce: @nonce is then unchanged).
 */
int dlb_console_open(uint8_t *out, const uint8_t *box, size_t len,
		     uint8_t nonce[DLB_CONSOLE_NONCE_BYTES],
		     const uint8_t key[DLB_CONSOLE_KEY_BYTES]);

/** Write the 4-byte big-endian length header of a message of @len bytes. */
void dlb_console_frame_put_len(uint8_t hdr[4], uint32_t len);

/**
 * Read a length header. @return 0 with *@len set, or -1 when the length
 * exceeds @max: the peer must then be disconnected without reading more.
 */
int dlb_console_frame_get_len(const uint8_t hdr[4], uint32_t max, uint32_t *len);

/**
 * Decode a base64 console key. @return 0, or -1 with dnsdist's message in
 * @err ("Unable to decode <key> as Base64", "Invalid encryption key of size
 * <n>, use setKey() to set a valid key").
 */
int dlb_console_key_decode(const char *b64, uint8_t key[DLB_CONSOLE_KEY_BYTES], char *err,
			   size_t errlen);

/** A fresh random key, and its base64 text into @out (DLB_CONSOLE_KEY_B64_LEN bytes). */
void dlb_console_key_new(uint8_t key[DLB_CONSOLE_KEY_BYTES], char out[DLB_CONSOLE_KEY_B64_LEN]);

/* ---- settings ---------------------------------------------------------------- */

/**
 * What the configuration and the console set. One per process; the first
 * call fills in dnsdist's defaults (no listener, no key, ACL 127.0.0.0/8 and
 * ::1/128, 100 connections, logging on, 10,000,000-byte messages).
 * Ownership: the ACL is freed at exit.
 */
struct dlb_console_settings {
	struct sockaddr_storage addrs[DLB_CONSOLE_MAX_ADDRS];	/* controlSocket() */
	socklen_t addrlens[DLB_CONSOLE_MAX_ADDRS];
	int naddrs;
	uint8_t key[DLB_CONSOLE_KEY_BYTES];	/* setKey(): for new connections */
	bool has_key;
	struct dlb_nmg acl;		/* setConsoleACL() & co. */
	uint32_t max_conns;		/* 0: no limit (up to DLB_CONSOLE_MAX_CONNS_HARD) */
	bool log_conns;			/* setConsoleConnectionsLogging() */
	uint32_t max_msg;		/* bytes: the largest message read or written */
};

/** The process's settings (main thread). */
struct dlb_console_settings *dlb_console_settings(void);

/** The console ACL as dnsdist logs it: "127.0.0.0/8, ::1/128" into @out. */
void dlb_console_acl_text(char *out, size_t outsz);

/* ---- server ---------------------------------------------------------------------- */

/**
 * Evaluate one console command (@len bytes of @line, NUL-terminated, which
 * may hold other NULs) and return the reply text, malloc'ed, its length in
 * *@outlen (at most @maxout bytes), or NULL when out of memory. Thread: main.
 */
typedef char *dlb_console_eval_fn(const char *line, size_t len, size_t maxout, size_t *outlen);

/** Set the evaluator (lua/console_lua.c does). Without one, every reply is empty. */
void dlb_console_set_eval(dlb_console_eval_fn *fn);

/**
 * The command being evaluated gets no reply: its connection is closed
 * instead (shutdown(), as dnsdist, whose process is gone). Thread: main.
 */
void dlb_console_drop_reply(void);

/**
 * The console service (daemon.h): start() listens on every controlSocket()
 * address (nothing when there is none); stop() closes the listeners and
 * every connection.
 */
extern const struct dlb_service dlb_console_service;

/** Has the service started (a runtime controlSocket() then listens at once)? */
bool dlb_console_started(void);

/**
 * Listen on @sa as well, now (a runtime controlSocket()). Logs "Accepting
 * control connections on <addr>". @return 0, or -1 with @err.
 */
int dlb_console_listen(const struct sockaddr *sa, socklen_t salen, char *err, size_t errlen);

/**
 * Serve an accepted connection @fd (set non-blocking here) from @peer on
 * @loop: the ACL, key and connection-limit checks are the caller's (the
 * accept path makes them). Ownership: the console closes @fd. @return 0, or
 * -1 (out of memory: @fd is closed).
 */
int dlb_console_serve_fd(struct ev_loop *loop, int fd, const char *peer);

/** Counters since startup (main thread). */
struct dlb_console_stats {
	uint64_t accepted;		/* connections served */
	uint64_t refused_acl;		/* closed: client outside the console ACL */
	uint64_t refused_nokey;		/* closed: no valid key configured */
	uint64_t refused_max;		/* closed: too many concurrent connections */
	uint64_t bad_key;		/* closed: a message did not decrypt */
	uint64_t oversized;		/* closed: a message longer than the limit */
	uint64_t commands;		/* commands evaluated */
	uint32_t current;		/* connections open now */
};
void dlb_console_get_stats(struct dlb_console_stats *out);

#endif
