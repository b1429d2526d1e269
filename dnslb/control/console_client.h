/*
 * console_client.h - the console client (`dnslb -c`): connects to a dnslb or
 * dnsdist console (protocol in console.h), runs one command (-e) or an
 * interactive session (libedit: history in ~/.dnslb_history, completion of
 * the server's global Lua names).
 *
 * Thread: the client process's only thread. Blocking I/O.
 */
#ifndef DNSLB_CONSOLE_CLIENT_H
#define DNSLB_CONSOLE_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "dnslb/control/console.h"

/** An open, keyed session. */
struct dlb_console_session {
	int fd;
	uint8_t key[DLB_CONSOLE_KEY_BYTES];
	uint8_t rnonce[DLB_CONSOLE_NONCE_BYTES], wnonce[DLB_CONSOLE_NONCE_BYTES];
	uint32_t max_msg;		/* the largest reply accepted */
};

/** dlb_console_session_command() outcomes besides 0. */
enum {
	DLB_CONSOLE_EIO = -1,		/* I/O error or undecryptable reply (@err says) */
	DLB_CONSOLE_ECLOSED = -2,	/* the server closed the connection */
};

/**
 * Start a session on the connected stream @fd: exchange nonces, then send
 * the encrypted empty string and read the answer (a server with another key
 * closes the connection: DLB_CONSOLE_ECLOSED). Ownership: @s owns @fd from
 * now on, also on failure (dlb_console_session_close). @return 0 or <0.
 */
int dlb_console_session_start(struct dlb_console_session *s, int fd,
			      const uint8_t key[DLB_CONSOLE_KEY_BYTES], uint32_t max_msg,
			      char *err, size_t errlen);

/**
 * Send @len bytes of @line and read the reply into *@reply (malloc'ed,
 * NUL-terminated, *@replylen bytes; the caller frees it). @return 0 or <0.
 */
int dlb_console_session_command(struct dlb_console_session *s, const char *line, size_t len,
				char **reply, size_t *replylen, char *err, size_t errlen);

/** Close the connection (idempotent). */
void dlb_console_session_close(struct dlb_console_session *s);

/** What `dnslb -c` needs, from the config file and the command line. */
struct dlb_console_client_opts {
	struct sockaddr_storage addr;	/* controlSocket(), or -c ADDR */
	socklen_t addrlen;
	uint8_t key[DLB_CONSOLE_KEY_BYTES];
	bool has_key;			/* a valid key from setKey() or -k */
	uint32_t max_msg;		/* setConsoleOutputMaxMsgSize() */
	const char *command;		/* -e: run it and exit; NULL: interactive */
};

/**
 * Connect and run the command, or the interactive loop. Messages go to
 * stderr ("Unable to connect to ...", the key mismatch message), replies to
 * stdout. @return the process exit status: 0, or 1 when it cannot connect,
 * the key is not valid or the server closed the connection.
 */
int dlb_console_client_run(const struct dlb_console_client_opts *o);

struct ev_loop;
/**
 * The daemon's own console on its terminal (dnslb started without
 * --supervised, stdin a terminal), as dnsdist's: a "> " prompt read with
 * libedit on @loop (never blocking it), each line evaluated by @eval like a
 * remote console command, history in ~/.dnslb_history. "quit" or end of
 * input (Ctrl-D) stops the daemon (ev_break), as leaving dnsdist's console
 * does. Thread: main. @return 0.
 */
int dlb_console_local_start(struct ev_loop *loop, dlb_console_eval_fn *eval);
void dlb_console_local_stop(void);

#endif
