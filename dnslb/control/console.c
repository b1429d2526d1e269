/*
 * console.c - the encrypted console of dnsdist 1.7 (protocol in console.h):
 * crypto helpers, the process's console settings, and the server on the
 * main libev loop.
 *
 * The server is non-blocking: one ev_io per listener and per connection.
 * A connection reads the client's nonce, then one frame at a time: the
 * length header first, refused (connection closed) when it exceeds
 * setConsoleOutputMaxMsgSize before a byte of the body is read or
 * allocated; the body buffer grows only as bytes arrive. While a reply is
 * being written the connection does not read, so at most one command and
 * one reply are buffered per connection. The evaluator (lua/console_lua.c)
 * runs synchronously on the main loop, as dnsdist's console runs under its
 * Lua lock.
 *
 * Checks at accept, in dnsdist's order: a valid key is configured, the
 * client is in the console ACL, the connection limit. A message that does
 * not decrypt (a client with another key: its first message, the
 * encrypted empty string, fails) closes the connection.
 *
 * Thread: main only. Ownership: connections and listeners belong to this
 * file; stop() frees them all.
 */
#include "dnslb/control/console.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <ev.h>
#include <sodium.h>

#include "dnslb/core/daemon.h"
#include "dnslb/core/log.h"

_Static_assert(DLB_CONSOLE_KEY_BYTES == crypto_secretbox_KEYBYTES, "key size");
_Static_assert(DLB_CONSOLE_NONCE_BYTES == crypto_secretbox_NONCEBYTES, "nonce size");
_Static_assert(DLB_CONSOLE_MAC_BYTES == crypto_secretbox_MACBYTES, "MAC size");

/* ---- protocol ----------------------------------------------------------------- */

static void
sodium_ready(void)
{
	static bool done;

	if (!done) {
		if (sodium_init() < 0) {
			dlb_err("libsodium failed to initialise");
			abort();
		}
		done = true;
	}
}

void
dlb_console_nonce_init(uint8_t nonce[DLB_CONSOLE_NONCE_BYTES])
{
	sodium_ready();
	randombytes_buf(nonce, DLB_CONSOLE_NONCE_BYTES);
}

void
dlb_console_nonce_merge(uint8_t out[DLB_CONSOLE_NONCE_BYTES],
			const uint8_t lower[DLB_CONSOLE_NONCE_BYTES],
			const uint8_t higher[DLB_CONSOLE_NONCE_BYTES])
{
	const size_t half = DLB_CONSOLE_NONCE_BYTES / 2;

	memcpy(out, lower, half);
	memcpy(out + half, higher + half, half);
}

void
dlb_console_nonce_increment(uint8_t nonce[DLB_CONSOLE_NONCE_BYTES])
{
	uint32_t v = ((uint32_t)nonce[0] << 24) | ((uint32_t)nonce[1] << 16) |
		     ((uint32_t)nonce[2] << 8) | nonce[3];

	v++;
	nonce[0] = (uint8_t)(v >> 24);
	nonce[1] = (uint8_t)(v >> 16);
	nonce[2] = (uint8_t)(v >> 8);
	nonce[3] = (uint8_t)v;
}

void
dlb_console_seal(uint8_t *out, const void *msg, size_t len, uint8_t nonce[DLB_CONSOLE_NONCE_BYTES],
		 const uint8_t key[DLB_CONSOLE_KEY_BYTES])
{
	sodium_ready();
	crypto_secretbox_easy(out, msg, len, nonce, key);
	dlb_console_nonce_increment(nonce);
}

int
dlb_console_open(uint8_t *out, const uint8_t *box, size_t len,
		 uint8_t nonce[DLB_CONSOLE_NONCE_BYTES], const uint8_t key[DLB_CONSOLE_KEY_BYTES])
{
	sodium_ready();
	if (len < DLB_CONSOLE_MAC_BYTES)
		return -1;
	if (crypto_secretbox_open_easy(out, box, len, nonce, key) != 0)
		return -1;
	dlb_console_nonce_increment(nonce);
	return 0;
}

void
dlb_console_frame_put_len(uint8_t hdr[4], uint32_t len)
{
	hdr[0] = (uint8_t)(len >> 24);
	hdr[1] = (uint8_t)(len >> 16);
	hdr[2] = (uint8_t)(len >> 8);
	hdr[3] = (uint8_t)len;
}

int
dlb_console_frame_get_len(const uint8_t hdr[4], uint32_t max, uint32_t *len)
{
	uint32_t v = ((uint32_t)hdr[0] << 24) | ((uint32_t)hdr[1] << 16) |
		     ((uint32_t)hdr[2] << 8) | hdr[3];

	if (v > max)
		return -1;
	*len = v;
	return 0;
}

int
dlb_console_key_decode(const char *b64, uint8_t key[DLB_CONSOLE_KEY_BYTES], char *err,
		       size_t errlen)
{
	size_t n = strlen(b64), binlen = 0, tlen = 0;
	unsigned char *bin;
	char *text;
	int rc = -1;

	sodium_ready();
	/* padding optional, blanks ignored: dnsdist's decoder is as lenient */
	text = malloc(n + 1);
	bin = malloc(n / 4 * 3 + 3);
	if (text == NULL || bin == NULL) {
		snprintf(err, errlen, "out of memory");
		goto out;
	}
	for (size_t i = 0; i < n; i++)
		if (b64[i] != ' ' && b64[i] != '\t' && b64[i] != '\r' && b64[i] != '\n')
			text[tlen++] = b64[i];
	while (tlen > 0 && text[tlen - 1] == '=')
		tlen--;
	if (sodium_base642bin(bin, n / 4 * 3 + 3, text, tlen, NULL, &binlen, NULL,
			      sodium_base64_VARIANT_ORIGINAL_NO_PADDING) != 0) {
		snprintf(err, errlen, "Unable to decode %.200s as Base64", b64);
		goto out;
	}
	if (binlen != DLB_CONSOLE_KEY_BYTES) {
		snprintf(err, errlen, "Invalid encryption key of size %zu, use setKey() to set a "
			 "valid key", binlen);
		goto out;
	}
	memcpy(key, bin, DLB_CONSOLE_KEY_BYTES);
	rc = 0;
out:
	if (bin != NULL) {
		sodium_memzero(bin, n / 4 * 3 + 3);
		free(bin);
	}
	if (text != NULL) {
		sodium_memzero(text, n + 1);
		free(text);
	}
	return rc;
}

void
dlb_console_key_new(uint8_t key[DLB_CONSOLE_KEY_BYTES], char out[DLB_CONSOLE_KEY_B64_LEN])
{
	sodium_ready();
	crypto_secretbox_keygen(key);
	sodium_bin2base64(out, DLB_CONSOLE_KEY_B64_LEN, key, DLB_CONSOLE_KEY_BYTES,
			  sodium_base64_VARIANT_ORIGINAL);
}

/* ---- settings ------------------------------------------------------------------- */

static struct dlb_console_settings settings;
static bool settings_ready;

static void
settings_free(void)
{
	dlb_nmg_deinit(&settings.acl);
	sodium_memzero(settings.key, sizeof(settings.key));
	settings_ready = false;
}

struct dlb_console_settings *
dlb_console_settings(void)
{
	static bool atexit_done;

	if (!settings_ready) {
		struct dlb_netmask nm;

		sodium_ready();
		memset(&settings, 0, sizeof(settings));
		dlb_nmg_init(&settings.acl);
		/* dnsdist's default console ACL; allocation failure leaves it empty (closed) */
		if (dlb_netmask_parse("127.0.0.0/8", &nm) == 0)
			dlb_nmg_add(&settings.acl, &nm);
		if (dlb_netmask_parse("::1/128", &nm) == 0)
			dlb_nmg_add(&settings.acl, &nm);
		settings.max_conns = DLB_CONSOLE_MAX_CONNS_DEFAULT;
		settings.log_conns = true;
		settings.max_msg = DLB_CONSOLE_MAX_MSG_DEFAULT;
		settings_ready = true;
		if (!atexit_done) {
			atexit(settings_free);	/* before LeakSanitizer looks */
			atexit_done = true;
		}
	}
	return &settings;
}

void
dlb_console_acl_text(char *out, size_t outsz)
{
	const struct dlb_nmg *acl = &dlb_console_settings()->acl;
	size_t o = 0;

	if (outsz == 0)
		return;
	out[0] = '\0';
	for (size_t i = 0; i < acl->n && o < outsz; i++) {
		char nm[64];
		int w;

		dlb_netmask_format(&acl->v[i], nm, sizeof(nm));
		w = snprintf(out + o, outsz - o, "%s%s", i > 0 ? ", " : "", nm);
		if (w < 0)
			break;
		o += (size_t)w;
	}
}

/* ---- server ------------------------------------------------------------------------ */

struct listener {
	ev_io io;
	char text[64];
};

enum conn_state {
	CONN_NONCE = 0,			/* reading the client's nonce */
	CONN_HEADER,			/* reading a length header */
	CONN_BODY,			/* reading a message */
};

struct conn {
	ev_io io;			/* EV_READ, or EV_WRITE while a reply is pending */
	struct conn *next, *prev;
	char peer[64];
	uint8_t key[DLB_CONSOLE_KEY_BYTES];	/* the key when it connected */
	uint8_t ours[DLB_CONSOLE_NONCE_BYTES], theirs[DLB_CONSOLE_NONCE_BYTES];
	uint8_t rnonce[DLB_CONSOLE_NONCE_BYTES], wnonce[DLB_CONSOLE_NONCE_BYTES];
	enum conn_state state;
	size_t got;			/* bytes of the nonce / header / body read */
	uint8_t hdr[4];
	uint8_t *body;
	size_t body_cap;
	uint32_t body_len;
	uint8_t *out;			/* pending output */
	size_t out_len, out_off;
	bool busy;			/* a command is being evaluated */
	bool dead;			/* stop() ran during the command: free it after */
};

static struct {
	struct ev_loop *loop;
	bool started;
	struct listener *listeners[DLB_CONSOLE_MAX_ADDRS];
	int nlisteners;
	struct conn *conns;
	struct dlb_console_stats stats;
	dlb_console_eval_fn *eval;
	bool drop_reply;		/* dlb_console_drop_reply() during eval */
} srv;

void
dlb_console_drop_reply(void)
{
	srv.drop_reply = true;
}

void
dlb_console_set_eval(dlb_console_eval_fn *fn)
{
	srv.eval = fn;
}

bool
dlb_console_started(void)
{
	return srv.started;
}

void
dlb_console_get_stats(struct dlb_console_stats *out)
{
	*out = srv.stats;
}

static void
conn_free(struct conn *c)
{
	ev_io_stop(srv.loop, &c->io);
	close(c->io.fd);
	if (c->prev != NULL)
		c->prev->next = c->next;
	else
		srv.conns = c->next;
	if (c->next != NULL)
		c->next->prev = c->prev;
	srv.stats.current--;
	sodium_memzero(c->key, sizeof(c->key));
	free(c->body);
	free(c->out);
	free(c);
}

static void
conn_close(struct conn *c, bool log_closed)
{
	if (log_closed && dlb_console_settings()->log_conns)
		dlb_info("Closed control connection from %s", c->peer);
	conn_free(c);
}

/* Watch @c for @events only. */
static void
conn_watch(struct conn *c, int events)
{
	if ((c->io.events & (EV_READ | EV_WRITE)) == events)
		return;
	ev_io_stop(srv.loop, &c->io);
	ev_io_set(&c->io, c->io.fd, events);
	ev_io_start(srv.loop, &c->io);
}

/* Queue @len bytes of @hdr+@box (taken) for writing. */
static void
conn_queue(struct conn *c, uint8_t *buf, size_t len)
{
	c->out = buf;
	c->out_len = len;
	c->out_off = 0;
	conn_watch(c, EV_WRITE);
}

/* Write what is pending. @return 0, or -1 when @c was closed. */
static int
conn_flush(struct conn *c)
{
	while (c->out_off < c->out_len) {
		ssize_t w = write(c->io.fd, c->out + c->out_off, c->out_len - c->out_off);

		if (w == -1) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				return 0;
			conn_close(c, true);
			return -1;
		}
		c->out_off += (size_t)w;
	}
	free(c->out);
	c->out = NULL;
	c->out_len = c->out_off = 0;
	conn_watch(c, EV_READ);
	return 0;
}

/* The reply to a complete message. @return 0, or -1 when @c was closed. */
static int
conn_message(struct conn *c)
{
	uint32_t max = dlb_console_settings()->max_msg;
	uint8_t *plain, *buf;
	char *reply = NULL;
	size_t plen, rlen = 0, maxout;

	if (c->body_len == 0) {
		/* dnsdist ACKs an empty message with an empty one, nonces unchanged */
		buf = calloc(1, 4);
		if (buf == NULL) {
			conn_close(c, true);
			return -1;
		}
		conn_queue(c, buf, 4);
		return 0;
	}
	plen = c->body_len - (c->body_len >= DLB_CONSOLE_MAC_BYTES ? DLB_CONSOLE_MAC_BYTES : 0);
	plain = malloc(plen + 1);
	if (plain == NULL) {
		conn_close(c, true);
		return -1;
	}
	if (dlb_console_open(plain, c->body, c->body_len, c->rnonce, c->key) != 0) {
		srv.stats.bad_key++;
		dlb_err("Got an exception in client connection from %s: Could not decrypt message, "
			"please check that the key configured with setKey() is correct", c->peer);
		free(plain);
		conn_close(c, false);
		return -1;
	}
	plain[plen] = '\0';
	free(c->body);
	c->body = NULL;
	c->body_cap = 0;

	maxout = max > DLB_CONSOLE_MAC_BYTES ? max - DLB_CONSOLE_MAC_BYTES : 0;
	if (plen > 0 && srv.eval != NULL) {
		srv.stats.commands++;
		c->busy = true;
		srv.drop_reply = false;
		reply = srv.eval((const char *)plain, plen, maxout, &rlen);
		c->busy = false;
		if (srv.drop_reply && !c->dead) {
			srv.drop_reply = false;
			free(plain);
			free(reply);
			conn_close(c, false);
			return -1;
		}
		if (c->dead) {
			free(plain);
			free(reply);
			conn_free(c);
			return -1;
		}
		if (reply == NULL) {
			dlb_err("Out of memory answering a control connection from %s", c->peer);
			free(plain);
			conn_close(c, true);
			return -1;
		}
		if (rlen > maxout)
			rlen = maxout;
	}
	free(plain);
	buf = malloc(4 + rlen + DLB_CONSOLE_MAC_BYTES);
	if (buf == NULL) {
		free(reply);
		conn_close(c, true);
		return -1;
	}
	dlb_console_frame_put_len(buf, (uint32_t)(rlen + DLB_CONSOLE_MAC_BYTES));
	dlb_console_seal(buf + 4, reply != NULL ? reply : "", rlen, c->wnonce, c->key);
	free(reply);
	conn_queue(c, buf, 4 + rlen + DLB_CONSOLE_MAC_BYTES);
	return 0;
}

/* Read into the current target. @return bytes read (>0), 0 at EOF, -1 EAGAIN, -2 error. */
static ssize_t
conn_read(struct conn *c, void *dst, size_t want)
{
	for (;;) {
		ssize_t r = read(c->io.fd, dst, want);

		if (r >= 0)
			return r;
		if (errno == EINTR)
			continue;
		if (errno == EAGAIN || errno == EWOULDBLOCK)
			return -1;
		return -2;
	}
}

static void
conn_readable(struct conn *c)
{
	/* one message at a time: stop once a reply is queued */
	while (c->out == NULL) {
		ssize_t r;

		switch (c->state) {
		case CONN_NONCE:
			r = conn_read(c, c->theirs + c->got, sizeof(c->theirs) - c->got);
			break;
		case CONN_HEADER:
			r = conn_read(c, c->hdr + c->got, sizeof(c->hdr) - c->got);
			break;
		case CONN_BODY:
		default:
			if (c->got == c->body_cap) {
				/* grow with what arrives: a header alone reserves nothing */
				size_t cap = c->body_cap == 0 ? 4096 : c->body_cap * 2;
				uint8_t *nb;

				if (cap > c->body_len)
					cap = c->body_len;
				nb = realloc(c->body, cap);
				if (nb == NULL) {
					dlb_err("Out of memory reading a control connection from %s",
						c->peer);
					conn_close(c, true);
					return;
				}
				c->body = nb;
				c->body_cap = cap;
			}
			r = conn_read(c, c->body + c->got, c->body_cap - c->got);
			break;
		}
		if (r == -1)
			return;
		if (r == 0 || r == -2) {
			conn_close(c, true);
			return;
		}
		c->got += (size_t)r;
		switch (c->state) {
		case CONN_NONCE:
			if (c->got < sizeof(c->theirs))
				break;
			dlb_console_nonce_merge(c->rnonce, c->ours, c->theirs);
			dlb_console_nonce_merge(c->wnonce, c->theirs, c->ours);
			c->state = CONN_HEADER;
			c->got = 0;
			break;
		case CONN_HEADER:
			if (c->got < sizeof(c->hdr))
				break;
			if (dlb_console_frame_get_len(c->hdr, dlb_console_settings()->max_msg,
						      &c->body_len) != 0) {
				srv.stats.oversized++;
				dlb_log_ratelimited(DLB_LOG_WARN, "Control connection from %s "
						    "closed: a message exceeds %u bytes "
						    "(setConsoleOutputMaxMsgSize)", c->peer,
						    dlb_console_settings()->max_msg);
				conn_close(c, true);
				return;
			}
			c->got = 0;
			c->state = CONN_BODY;
			if (c->body_len == 0) {
				c->state = CONN_HEADER;
				if (conn_message(c) != 0)
					return;
			}
			break;
		case CONN_BODY:
			if (c->got < c->body_len)
				break;
			c->got = 0;
			c->state = CONN_HEADER;
			if (conn_message(c) != 0)
				return;
			break;
		}
	}
}

static void
conn_cb(struct ev_loop *loop, ev_io *w, int revents)
{
	struct conn *c = (struct conn *)w;

	(void)loop;
	if (revents & EV_WRITE) {
		if (conn_flush(c) != 0)
			return;
		if (c->out != NULL)
			return;
	}
	conn_readable(c);
}

int
dlb_console_serve_fd(struct ev_loop *loop, int fd, const char *peer)
{
	struct dlb_console_settings *s = dlb_console_settings();
	struct conn *c;
	int one = 1;

	c = calloc(1, sizeof(*c));
	if (c == NULL || fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) == -1) {
		free(c);
		close(fd);
		return -1;
	}
	c->out = malloc(DLB_CONSOLE_NONCE_BYTES);
	if (c->out == NULL) {
		free(c);
		close(fd);
		return -1;
	}
	/* a socketpair (tests) has no TCP_NODELAY: ignore the failure */
	(void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	srv.loop = loop;
	snprintf(c->peer, sizeof(c->peer), "%s", peer);
	memcpy(c->key, s->key, sizeof(c->key));
	dlb_console_nonce_init(c->ours);
	memcpy(c->out, c->ours, sizeof(c->ours));
	c->out_len = sizeof(c->ours);
	c->state = CONN_NONCE;
	c->next = srv.conns;
	if (srv.conns != NULL)
		srv.conns->prev = c;
	srv.conns = c;
	srv.stats.current++;
	srv.stats.accepted++;
	ev_io_init(&c->io, conn_cb, fd, EV_WRITE);
	ev_io_start(loop, &c->io);
	return 0;
}

static void
accept_cb(struct ev_loop *loop, ev_io *w, int revents)
{
	struct dlb_console_settings *s = dlb_console_settings();
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	uint32_t limit;
	char peer[64];
	int fd;

	(void)revents;
	fd = accept4(w->fd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
	if (fd == -1) {
		if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR &&
		    errno != ECONNABORTED)
			dlb_log_ratelimited(DLB_LOG_ERR, "Control socket accept failed: %s",
					    strerror(errno));
		return;
	}
	dlb_sockaddr_format((struct sockaddr *)&ss, peer, sizeof(peer));
	if (!s->has_key) {
		srv.stats.refused_nokey++;
		dlb_debug("Control connection from %s dropped because we don't have a valid key "
			  "configured, please configure one using setKey()", peer);
		close(fd);
		return;
	}
	if (!dlb_nmg_match(&s->acl, (struct sockaddr *)&ss)) {
		srv.stats.refused_acl++;
		dlb_debug("Control connection from %s dropped because of ACL", peer);
		close(fd);
		return;
	}
	limit = s->max_conns == 0 || s->max_conns > DLB_CONSOLE_MAX_CONNS_HARD ?
		DLB_CONSOLE_MAX_CONNS_HARD : s->max_conns;
	if (srv.stats.current >= limit) {
		srv.stats.refused_max++;
		dlb_log_ratelimited(DLB_LOG_ERR, "Control connection died: Too many concurrent "
				    "console connections");
		close(fd);
		return;
	}
	if (s->log_conns)
		dlb_warn("Got control connection from %s", peer);
	dlb_console_serve_fd(loop, fd, peer);
}

int
dlb_console_listen(const struct sockaddr *sa, socklen_t salen, char *err, size_t errlen)
{
	struct listener *l;
	char text[64];
	int fd, one = 1;

	dlb_sockaddr_format(sa, text, sizeof(text));
	if (!srv.started) {
		snprintf(err, errlen, "Unable to bind to control socket on %s: the console is "
			 "not running", text);
		return -1;
	}
	if (srv.nlisteners == DLB_CONSOLE_MAX_ADDRS) {
		snprintf(err, errlen, "Unable to bind to control socket on %s: too many control "
			 "sockets (at most %d)", text, DLB_CONSOLE_MAX_ADDRS);
		return -1;
	}
	fd = socket(sa->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd == -1)
		goto out_err;
	if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) == -1 ||
	    bind(fd, sa, salen) == -1 || listen(fd, 64) == -1) {
		int e = errno;

		close(fd);
		errno = e;
		goto out_err;
	}
	l = calloc(1, sizeof(*l));
	if (l == NULL) {
		close(fd);
		snprintf(err, errlen, "Unable to bind to control socket on %s: out of memory", text);
		return -1;
	}
	snprintf(l->text, sizeof(l->text), "%s", text);
	ev_io_init(&l->io, accept_cb, fd, EV_READ);
	ev_io_start(srv.loop, &l->io);
	srv.listeners[srv.nlisteners++] = l;
	dlb_info("Accepting control connections on %s", text);
	return 0;

out_err:
	snprintf(err, errlen, "Unable to bind to control socket on %s: %s", text, strerror(errno));
	return -1;
}

static void
console_stop(void)
{
	while (srv.nlisteners > 0) {
		struct listener *l = srv.listeners[--srv.nlisteners];

		ev_io_stop(srv.loop, &l->io);
		close(l->io.fd);
		free(l);
	}
	for (struct conn *c = srv.conns, *next; c != NULL; c = next) {
		next = c->next;
		if (c->busy)
			c->dead = true;	/* freed when its command returns */
		else
			conn_free(c);
	}
	srv.started = false;
}

static int
console_start(struct ev_loop *loop, char *err, size_t errlen)
{
	struct dlb_console_settings *s = dlb_console_settings();
	char acl[1024];

	srv.loop = loop;
	srv.started = true;
	if (s->naddrs == 0)
		return 0;
	dlb_console_acl_text(acl, sizeof(acl));
	dlb_info("Console ACL allowing connections from: %s", acl);
	if (!s->has_key)
		dlb_warn("Warning, the console has been enabled via 'controlSocket()' but no key "
			 "has been set with 'setKey()' so all connections will fail until a key has "
			 "been set");
	for (int i = 0; i < s->naddrs; i++) {
		if (dlb_console_listen((struct sockaddr *)&s->addrs[i], s->addrlens[i], err,
				       errlen) != 0) {
			console_stop();	/* daemon.c stops only the services that started */
			return -1;
		}
	}
	return 0;
}

const struct dlb_service dlb_console_service = {
	.name = "console",
	.start = console_start,
	.stop = console_stop,
};
