/*
 * console_client.c - `dnslb -c`: the console client (console_client.h).
 *
 * As dnsdist's doClient(): connect, exchange nonces, check the key with the
 * encrypted empty string, then either run the -e command and print its
 * reply, or read lines with libedit ("> " prompt, "quit" or end of input
 * ends the session) and print each reply. History is kept in
 * $HOME/.dnslb_history, one line per command, as dnsdist keeps
 * ~/.dnsdist_history. Tab completes the global names the server holds: one
 * Lua line after connecting asks for them (it calls getServers() so that
 * neither dnslb nor dnsdist records it in delta()).
 *
 * Replies are bounded by setConsoleOutputMaxMsgSize() of the client's
 * config, as in dnsdist: a longer one ends the session.
 *
 * Thread: the client's only thread, blocking I/O; the daemon's terminal console
 * (dlb_console_local_start) reads on a thread of its own and evaluates on the main one.
 */
#include "dnslb/control/console_client.h"

#include <errno.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <editline/readline.h>
#include <ev.h>
#include <pthread.h>
#include <sodium.h>
#include <termios.h>

#include "dnslb/core/netmask.h"

#define HISTORY_NAME	"/.dnslb_history"
#define HISTORY_MAX	1000		/* lines loaded */
#define COMPLETION_MAX	8192		/* names kept */

/* ---- session ------------------------------------------------------------------------ */

/* @return 0, or -1 (errno set; EPIPE when the peer is gone). */
static int
write_all(int fd, const void *buf, size_t len)
{
	const uint8_t *p = buf;

	while (len > 0) {
		ssize_t w = write(fd, p, len);

		if (w == -1) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		p += w;
		len -= (size_t)w;
	}
	return 0;
}

/* @return 1 read, 0 at EOF (before all of it), -1 error (errno). */
static int
read_all(int fd, void *buf, size_t len)
{
	uint8_t *p = buf;

	while (len > 0) {
		ssize_t r = read(fd, p, len);

		if (r == 0)
			return 0;
		if (r == -1) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		p += r;
		len -= (size_t)r;
	}
	return 1;
}

/* Send @line, read the reply. */
static int
exchange(struct dlb_console_session *s, const char *line, size_t len, char **reply,
	 size_t *replylen, char *err, size_t errlen)
{
	uint8_t hdr[4], *box;
	uint32_t rlen;
	char *out;
	int r;

	*reply = NULL;
	*replylen = 0;
	if (len > UINT32_MAX - DLB_CONSOLE_MAC_BYTES) {
		snprintf(err, errlen, "Encrypted message is too long to be sent to the server");
		return DLB_CONSOLE_EIO;
	}
	box = malloc(4 + len + DLB_CONSOLE_MAC_BYTES);
	if (box == NULL) {
		snprintf(err, errlen, "out of memory");
		return DLB_CONSOLE_EIO;
	}
	dlb_console_frame_put_len(box, (uint32_t)(len + DLB_CONSOLE_MAC_BYTES));
	dlb_console_seal(box + 4, line, len, s->wnonce, s->key);
	r = write_all(s->fd, box, 4 + len + DLB_CONSOLE_MAC_BYTES);
	free(box);
	if (r != 0) {
		if (errno == EPIPE || errno == ECONNRESET)
			goto out_closed;
		snprintf(err, errlen, "Unable to send to the server: %s", strerror(errno));
		return DLB_CONSOLE_EIO;
	}
	r = read_all(s->fd, hdr, sizeof(hdr));
	if (r <= 0 || dlb_console_frame_get_len(hdr, s->max_msg, &rlen) != 0)
		goto out_closed;
	if (rlen == 0) {
		*reply = calloc(1, 1);
		if (*reply == NULL) {
			snprintf(err, errlen, "out of memory");
			return DLB_CONSOLE_EIO;
		}
		return 0;
	}
	box = malloc(rlen);
	out = malloc(rlen + 1);
	if (box == NULL || out == NULL) {
		free(box);
		free(out);
		snprintf(err, errlen, "out of memory");
		return DLB_CONSOLE_EIO;
	}
	r = read_all(s->fd, box, rlen);
	if (r <= 0) {
		free(box);
		free(out);
		goto out_closed;
	}
	if (dlb_console_open((uint8_t *)out, box, rlen, s->rnonce, s->key) != 0) {
		free(box);
		free(out);
		snprintf(err, errlen, "Could not decrypt the reply, please check that the key "
			 "configured with setKey() is correct");
		return DLB_CONSOLE_EIO;
	}
	free(box);
	out[rlen - DLB_CONSOLE_MAC_BYTES] = '\0';
	*reply = out;
	*replylen = rlen - DLB_CONSOLE_MAC_BYTES;
	return 0;

out_closed:
	snprintf(err, errlen, "Connection closed by the server.");
	return DLB_CONSOLE_ECLOSED;
}

int
dlb_console_session_start(struct dlb_console_session *s, int fd,
			  const uint8_t key[DLB_CONSOLE_KEY_BYTES], uint32_t max_msg, char *err,
			  size_t errlen)
{
	uint8_t ours[DLB_CONSOLE_NONCE_BYTES], theirs[DLB_CONSOLE_NONCE_BYTES];
	char *reply;
	size_t rlen;
	int r;

	memset(s, 0, sizeof(*s));
	s->fd = fd;
	memcpy(s->key, key, sizeof(s->key));
	s->max_msg = max_msg;
	dlb_console_nonce_init(ours);
	if (write_all(fd, ours, sizeof(ours)) != 0 || (r = read_all(fd, theirs, sizeof(theirs))) <= 0) {
		snprintf(err, errlen, "The server closed the connection right away, likely "
			 "indicating a key mismatch. Please check your setKey() directive.");
		return DLB_CONSOLE_ECLOSED;
	}
	dlb_console_nonce_merge(s->rnonce, ours, theirs);
	dlb_console_nonce_merge(s->wnonce, theirs, ours);
	/* the key check: a server with another key closes instead of answering */
	r = exchange(s, "", 0, &reply, &rlen, err, errlen);
	free(reply);
	if (r == DLB_CONSOLE_ECLOSED)
		snprintf(err, errlen, "The server closed the connection right away, likely "
			 "indicating a key mismatch. Please check your setKey() directive.");
	return r;
}

int
dlb_console_session_command(struct dlb_console_session *s, const char *line, size_t len,
			    char **reply, size_t *replylen, char *err, size_t errlen)
{
	return exchange(s, line, len, reply, replylen, err, errlen);
}

void
dlb_console_session_close(struct dlb_console_session *s)
{
	if (s->fd >= 0)
		close(s->fd);
	s->fd = -1;
	sodium_memzero(s->key, sizeof(s->key));
}

/* ---- interactive ------------------------------------------------------------------ */

/* The server's global names, for completion (sorted by the server). */
static char **names;
static size_t nnames;

static const char completion_query[] =
	"(function() getServers() local r = {} "
	"for k, v in pairs(_G) do if type(k) == 'string' then "
	"r[#r + 1] = type(v) == 'function' and k .. '(' or k "
	"if type(v) == 'table' and k ~= '_G' then for f, fv in pairs(v) do "
	"if type(f) == 'string' then r[#r + 1] = k .. '.' .. f .. "
	"(type(fv) == 'function' and '(' or '') end end end end end "
	"table.sort(r) return table.concat(r, ' ') end)()";

static void
names_free(void)
{
	for (size_t i = 0; i < nnames; i++)
		free(names[i]);
	free(names);
	names = NULL;
	nnames = 0;
}

/* Split the reply to completion_query into names. */
static void
names_load(char *reply)
{
	size_t cap = 0;

	for (char *save = NULL, *t = strtok_r(reply, " \n", &save); t != NULL && nnames < COMPLETION_MAX;
	     t = strtok_r(NULL, " \n", &save)) {
		if (nnames == cap) {
			size_t ncap = cap == 0 ? 256 : cap * 2;
			char **nv = realloc(names, ncap * sizeof(*nv));

			if (nv == NULL)
				return;
			names = nv;
			cap = ncap;
		}
		names[nnames] = strdup(t);
		if (names[nnames] == NULL)
			return;
		nnames++;
	}
}

static char *
complete_name(const char *text, int state)
{
	static size_t next;
	size_t len = strlen(text);

	if (state == 0)
		next = 0;
	while (next < nnames) {
		const char *n = names[next++];

		if (strncmp(n, text, len) == 0)
			return strdup(n);
	}
	return NULL;
}

static char **
complete(const char *text, int start, int end)
{
	(void)start;
	(void)end;
	rl_attempted_completion_over = 1;	/* never complete file names */
	rl_completion_append_character = '\0';	/* "showServers(" then the arguments */
	return rl_completion_matches(text, complete_name);
}

/* $HOME/.dnslb_history ($HOME overrides the password database, as in dnsdist). */
static void
history_path(char *out, size_t outsz)
{
	const char *home = getenv("HOME");

	if (home == NULL || home[0] == '\0') {
		struct passwd *pw = getpwuid(geteuid());

		home = pw != NULL && pw->pw_dir != NULL ? pw->pw_dir : ".";
	}
	snprintf(out, outsz, "%s" HISTORY_NAME, home);
}

static void
history_load(const char *path)
{
	FILE *f = fopen(path, "r");
	char *line = NULL;
	size_t cap = 0;
	ssize_t n;

	stifle_history(HISTORY_MAX);
	if (f == NULL)
		return;
	while ((n = getline(&line, &cap, f)) != -1) {
		if (n > 0 && line[n - 1] == '\n')
			line[n - 1] = '\0';
		if (line[0] != '\0')
			add_history(line);
	}
	free(line);
	fclose(f);
}

/* Print a reply as it came; an empty one is a blank line (dnsdist). */
static void
print_reply(const char *reply, size_t len, bool blank_if_empty)
{
	if (len > 0)
		fwrite(reply, 1, len, stdout);
	else if (blank_if_empty)
		fputc('\n', stdout);
	fflush(stdout);
}

/* Add @line to the history (and the history file @hist, if open), unless it
 * is empty or repeats @last. */
static void
remember_line(const char *line, const char *last, FILE *hist)
{
	if (line[0] == '\0' || (last != NULL && strcmp(line, last) == 0))
		return;
	add_history(line);
	if (hist != NULL) {
		fprintf(hist, "%s\n", line);
		fflush(hist);
	}
}

static int
interactive(struct dlb_console_session *s)
{
	char path[4096], err[512], *last = NULL, *reply;
	FILE *hist;
	size_t rlen;
	int rc = 0;

	if (dlb_console_session_command(s, completion_query, sizeof(completion_query) - 1, &reply,
					&rlen, err, sizeof(err)) != 0) {
		fprintf(stderr, "%s\n", err);
		return 1;
	}
	names_load(reply);
	free(reply);
	rl_readline_name = "dnslb";
	rl_attempted_completion_function = complete;
	rl_completer_word_break_characters = (char *)" \t\n\"\\'`@$><=;|&{(),+-*/%^~[]:#";
	history_path(path, sizeof(path));
	history_load(path);
	hist = fopen(path, "a");
	for (;;) {
		char *line = readline("> ");
		int r;

		if (line == NULL)
			break;
		remember_line(line, last, hist);
		free(last);
		last = line;
		if (strcmp(line, "quit") == 0)
			break;
		if (line[0] == '\0')
			continue;
		r = dlb_console_session_command(s, line, strlen(line), &reply, &rlen, err,
						sizeof(err));
		if (r == DLB_CONSOLE_ECLOSED) {
			printf("%s\n", err);
			rc = 1;
			break;
		}
		if (r != 0) {
			fprintf(stderr, "%s\n", err);
			rc = 1;
			break;
		}
		print_reply(reply, rlen, true);
		free(reply);
	}
	free(last);
	if (hist != NULL)
		fclose(hist);
	names_free();
	return rc;
}

int
dlb_console_client_run(const struct dlb_console_client_opts *o)
{
	struct dlb_console_session s;
	char text[64], err[512], *reply;
	size_t rlen;
	int fd, r;

	if (!o->has_key) {
		fprintf(stderr, "The currently configured console key is not valid, please "
			"configure a valid key using the setKey() directive\n");
		return 1;
	}
	signal(SIGPIPE, SIG_IGN);
	dlb_sockaddr_format((const struct sockaddr *)&o->addr, text, sizeof(text));
	fd = socket(o->addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd == -1 || connect(fd, (const struct sockaddr *)&o->addr, o->addrlen) == -1) {
		fprintf(stderr, "Unable to connect to %s: %s\n", text, strerror(errno));
		if (fd != -1)
			close(fd);
		return 1;
	}
	r = dlb_console_session_start(&s, fd, o->key, o->max_msg, err, sizeof(err));
	if (r != 0) {
		fprintf(stderr, "%s\n", err);
		dlb_console_session_close(&s);
		return 1;
	}
	if (o->command == NULL) {
		r = interactive(&s);
		dlb_console_session_close(&s);
		return r;
	}
	r = dlb_console_session_command(&s, o->command, strlen(o->command), &reply, &rlen, err,
					sizeof(err));
	dlb_console_session_close(&s);
	if (r == DLB_CONSOLE_ECLOSED) {
		printf("%s\n", err);	/* dnsdist prints it on stdout */
		return 1;
	}
	if (r != 0) {
		fprintf(stderr, "%s\n", err);
		return 1;
	}
	print_reply(reply, rlen, false);
	free(reply);
	return 0;
}

/* ---- the daemon's own console on its terminal ------------------------------------------ */

/*
 * A thread reads lines with the blocking readline() (so editing, history,
 * Ctrl-D and the terminal modes are libedit's own) and hands each one to
 * the main loop through an ev_async; the main thread evaluates it (the Lua
 * states are the main thread's) and hands the reply back.
 */

/* dnsdist's default setConsoleOutputMaxMsgSize */
#define LOCAL_MAX_OUTPUT 10000000

static struct {
	struct ev_loop *loop;
	ev_async async;
	dlb_console_eval_fn *eval;
	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	char *line;			/* to evaluate (the reader waits) */
	bool quit;			/* end of input or "quit" */
	char *reply;			/* back to the reader */
	size_t rlen;
	bool replied;
	struct termios tio;
	bool have_tio;
	bool on;
} local = { .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER };

static void *
local_reader(void *arg)
{
	char path[4096], *last = NULL;
	FILE *hist;

	(void)arg;
	rl_readline_name = "dnslb";
	history_path(path, sizeof(path));
	history_load(path);
	hist = fopen(path, "a");
	for (;;) {
		char *line = readline("> ");

		if (line == NULL || strcmp(line, "quit") == 0) {
			if (line == NULL)
				fputc('\n', stdout);
			free(line);
			break;
		}
		remember_line(line, last, hist);
		free(last);
		last = line;
		if (line[0] == '\0')
			continue;
		pthread_mutex_lock(&local.mu);
		local.line = line;
		local.replied = false;
		ev_async_send(local.loop, &local.async);
		while (!local.replied)
			pthread_cond_wait(&local.cv, &local.mu);
		local.line = NULL;
		pthread_mutex_unlock(&local.mu);
		if (local.reply != NULL) {
			print_reply(local.reply, local.rlen, true);
			/* the prompt goes on a line of its own */
			if (local.rlen > 0 && local.reply[local.rlen - 1] != '\n')
				fputc('\n', stdout);
		} else
			fprintf(stderr, "out of memory\n");
		free(local.reply);
		local.reply = NULL;
	}
	free(last);
	if (hist != NULL)
		fclose(hist);
	pthread_mutex_lock(&local.mu);
	local.quit = true;
	pthread_mutex_unlock(&local.mu);
	ev_async_send(local.loop, &local.async);
	return NULL;
}

/* Main thread: evaluate the waiting line, or stop the daemon at the end of input. */
static void
local_async_cb(struct ev_loop *loop, ev_async *a, int revents)
{
	char *line, *reply = NULL;
	size_t rlen = 0;
	bool quit;

	pthread_mutex_lock(&local.mu);
	line = local.replied ? NULL : local.line;
	quit = local.quit;
	pthread_mutex_unlock(&local.mu);
	if (line != NULL) {
		reply = local.eval(line, strlen(line), LOCAL_MAX_OUTPUT, &rlen);
		pthread_mutex_lock(&local.mu);
		local.reply = reply;
		local.rlen = rlen;
		local.replied = true;
		pthread_cond_signal(&local.cv);
		pthread_mutex_unlock(&local.mu);
	}
	if (quit)
		ev_break(loop, EVBREAK_ALL);	/* as dnsdist: leaving its console stops it */
}

int
dlb_console_local_start(struct ev_loop *loop, dlb_console_eval_fn *eval)
{
	sigset_t all, old;
	int rc;

	if (local.on)
		return 0;
	local.loop = loop;
	local.eval = eval;
	local.have_tio = tcgetattr(STDIN_FILENO, &local.tio) == 0;
	ev_async_init(&local.async, local_async_cb);
	ev_async_start(loop, &local.async);
	/* the reader gets no process signal: the main loop handles them */
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	rc = pthread_create(&local.thread, NULL, local_reader, NULL);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc != 0) {
		ev_async_stop(loop, &local.async);
		return -1;
	}
	pthread_detach(local.thread);
	local.on = true;
	return 0;
}

void
dlb_console_local_stop(void)
{
	if (!local.on)
		return;
	/* the reader may sit in readline() until the process ends: give the
	 * terminal its modes back, and answer a line it may be waiting on */
	ev_async_stop(local.loop, &local.async);
	pthread_mutex_lock(&local.mu);
	if (local.line != NULL && !local.replied) {
		local.reply = NULL;
		local.replied = true;
		pthread_cond_signal(&local.cv);
	}
	pthread_mutex_unlock(&local.mu);
	if (local.have_tio)
		tcsetattr(STDIN_FILENO, TCSANOW, &local.tio);
	local.on = false;
}
