/*
 * carbon.h - carbonServer(): push every figure to a Graphite (carbon)
 * server in its plaintext protocol, "<path> <value> <unix time>\r\n" per
 * line, every interval seconds (dnsdist-carbon.cc; docs/web.md, "Carbon").
 *
 * Paths are namespace.ourname.instance.<metric> for the global metrics, then
 * ...servers.<name>.<figure>, ...frontends.<address>_<proto>.<figure> and
 * ...pools.<name>.<figure>, with dots in the names written as underscores.
 *
 * Each target has its own timer on the main loop; a push opens a
 * non-blocking TCP connection, writes as the socket accepts, and closes.
 * Nothing ever blocks the loop: a push not finished within its deadline
 * (the interval, at most 5 s) is dropped, and so is one still running when
 * the next is due.
 *
 * Thread: main only.
 */
#ifndef DNSLB_CARBON_H
#define DNSLB_CARBON_H

#include <stddef.h>

struct dlb_service;

/** Most carbonServer() targets. */
#define DLB_CARBON_MAX 8
/** Longest ourname, namespace and instance, in bytes. */
#define DLB_CARBON_MAX_NAME 128

/** The service main.c starts and stops (registered by lua/web_lua.c). */
extern const struct dlb_service dlb_carbon_service;

/**
 * Check carbonServer()'s arguments: @addr ("192.0.2.1", "192.0.2.1:2003",
 * "[2001:db8::1]:2003"; port 2003 by default); @ourname, @ns, @instance may
 * be NULL or "" (defaults) but must not hold whitespace or control
 * characters, which would break the line protocol; @interval >= 1 s.
 * @return 0, or -1 with @err.
 */
int dlb_carbon_check(const char *addr, const char *ourname, unsigned interval, const char *ns,
		     const char *instance, char *err, size_t errlen);

/**
 * Add a target (arguments as dlb_carbon_check; NULL or "" ourname is the
 * host name with dots as underscores, namespace "dnsdist", instance "main").
 * Pushes start with the service, or at once when it already runs (console).
 * @return 0, or -1 with @err.
 */
int dlb_carbon_add(const char *addr, const char *ourname, unsigned interval, const char *ns,
		   const char *instance, char *err, size_t errlen);

#endif
