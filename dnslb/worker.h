/*
 * worker.h - one data-plane thread: creation (sockets bound on the main
 * thread, before privileges are dropped), its life and orderly stop. Its
 * state, and what the data plane does with it, is dnslb/core/wstate.h.
 *
 * Thread: main, unless said otherwise.
 */
#ifndef DNSLB_WORKER_H
#define DNSLB_WORKER_H

#include "dnslb/core/wstate.h"

/**
 * Create worker @id: its loop, listeners (bound now, so privileges can be
 * dropped afterwards) and backend sockets.
 * @return NULL with a logged error.
 */
struct dlb_worker *dlb_worker_new(int id, const struct dlb_config *cfg);
/**
 * Hand worker @w the Lua state @lw of generation @gen (a reload). Ownership:
 * taken. Thread: main, before the ruleset of @gen is published.
 */
void dlb_worker_give_lua(struct dlb_worker *w, struct dlb_lua_worker *lw, uint64_t gen);

/**
 * A reload added or removed listeners (cfg->frontends[].removed, and
 * cfg->nfrontends): ask worker @w to open, resume or pause its listeners to
 * match, and then store cfg->fe_gen in @w->fe_gen. Thread: main (ev_async).
 */
void dlb_worker_sync_listeners(struct dlb_worker *w);

/**
 * A server was appended to the running config (newServer from the console):
 * ask worker @w to open its sockets towards every backend it has not opened
 * yet. Thread: main (ev_async). Completion shows in @w->nbe.
 */
void dlb_worker_open_new_backends(struct dlb_worker *w);

/** Start the thread. */
int dlb_worker_start(struct dlb_worker *w);
/** Ask the worker to stop (thread-safe) and wait for it. */
void dlb_worker_stop_join(struct dlb_worker *w);
void dlb_worker_free(struct dlb_worker *w);

#endif
