/*
 * health.h - active health checks of backends (dnsdist semantics), run by
 * the main thread's event loop. See health.c.
 *
 * Thread: main only.
 */
#ifndef DNSLB_HEALTH_H
#define DNSLB_HEALTH_H

#include <ev.h>
#include <stdint.h>

struct dlb_config;
struct dlb_health;

/** @return the checker for every backend of @cfg, or NULL (no memory). */
struct dlb_health *dlb_health_new(struct ev_loop *loop, struct dlb_config *cfg);
/**
 * Check every auto-mode backend once and wait for the answers (at most the
 * longest checkTimeout), so the initial states are known before serving;
 * then keep checking every checkInterval seconds on @loop.
 */
void dlb_health_initial(struct dlb_health *h);
/**
 * Once a second: judge lazy-mode backends by their recent traffic (timeouts,
 * and SERVFAILs unless TimeoutOnly) and take one down when the failure ratio
 * over at least lazyHealthCheckMinSampleCount queries reaches the threshold;
 * it is then probed every lazyHealthCheckFailedInterval seconds (doubling
 * with lazyHealthCheckUseExponentialBackOff, up to lazyHealthCheckMaxBackOff)
 * until `rise` probes succeed.
 */
void dlb_health_lazy_tick(struct dlb_health *h);
struct dlb_backend;
/**
 * newServer's checkFunction: called before each check of a backend with
 * be->check_fn, with the check's name (wire form, DLB_MAX_NAME bytes),
 * type, class and header flags, which it may replace. Set by the Lua
 * layer (lua/conf.c). @return 0, or -1 with a message in @err: the check
 * then fails, as in dnsdist when the function raises an error.
 */
extern int (*dlb_health_check_hook)(const struct dlb_backend *be, uint8_t *name, int *name_len,
				    uint16_t *type, uint16_t *cls, uint16_t *flags, char *err,
				    size_t errlen);
/**
 * Check @be too: a server newServer appended at runtime (its index must be
 * the next one). An auto-mode server is down until its first check answers;
 * that check starts now and decides, as the initial check does at startup.
 * @return 0, or -1 (no memory, or not the next index).
 */
int dlb_health_add(struct dlb_health *h, struct dlb_backend *be);
/** Health-check queries sent to backend @be_index so far. */
uint64_t dlb_health_checks_sent(const struct dlb_health *h, int be_index);
void dlb_health_free(struct dlb_health *h);

#endif
