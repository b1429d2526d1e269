/*
 * doh_cfg.h - what one DNS over HTTPS listener (addDOHLocal) is configured
 * with: its URL paths, the header fields its answers carry, the response map
 * (newDOHResponseMapEntry) and its HTTP bounds. Built by the configuration
 * (lua/conf.c), owned by the listener's struct dlb_frontend_cfg, read by the
 * workers (dnslb/frontend/doh_conn.c) through the request reader
 * (dnslb/frontend/doh_req.h).
 *
 * Thread: built and freed by the main thread; read by any worker. Only the
 * response map changes after start (setResponsesMap): a new map is
 * published with one atomic pointer store, and replaced maps are kept until
 * the configuration is freed, so a worker never reads a freed one.
 */
#ifndef DNSLB_DOH_CFG_H
#define DNSLB_DOH_CFG_H

#include <regex.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* An HTTP header field. */
struct dlb_doh_header {
	char *name;			/* lowercase */
	char *value;
};

/* An endpoint: the URL paths of one addDOHLocal. */
struct dlb_doh_paths {
	const char *const *paths;	/* each begins with '/' */
	size_t n;
	bool exact;			/* exactPathMatching (default true) */
};

/* ---- the response map (newDOHResponseMapEntry, setResponsesMap) ------------- */

struct dlb_doh_map_entry {
	char *regex_text;
	regex_t re;			/* POSIX extended, case-insensitive, as dnsdist's Regex */
	int status;
	uint8_t *content;
	size_t content_len;
	struct dlb_doh_header *headers;	/* NULL: the frontend's customResponseHeaders */
	size_t nheaders;
};

struct dlb_doh_map {
	struct dlb_doh_map_entry *v;
	size_t n;
};

/**
 * Add an entry to @m: @regex (compiled here), @status, @content (copied),
 * @headers (@nh, copied; NULL: none of its own). @return 0, or -1 with
 * @err (@errsz bytes) saying why (a bad regex, a status outside 100..599,
 * no memory).
 */
int dlb_doh_map_add(struct dlb_doh_map *m, const char *regex, int status, const void *content,
		    size_t content_len, const struct dlb_doh_header *headers, size_t nh, char *err,
		    size_t errsz);
void dlb_doh_map_clear(struct dlb_doh_map *m);

/** The first entry of @m whose regex matches @path (NUL-terminated,
 * query string included), or NULL. */
const struct dlb_doh_map_entry *dlb_doh_map_match(const struct dlb_doh_map *m, const char *path);

/* ---- a listener's configuration --------------------------------------------- */

#define DLB_DOH_MAX_URLS	64
#define DLB_DOH_MAX_CUSTOM	32	/* customResponseHeaders kept */

struct dlb_doh_cfg {
	char *urls[DLB_DOH_MAX_URLS];	/* owned; each begins with '/' */
	struct dlb_doh_paths paths;	/* views urls */
	struct dlb_doh_header *custom;	/* customResponseHeaders (owned, names lowercase) */
	size_t ncustom;
	char *server_tokens;		/* serverTokens (default "h2o/dnsdist"); owned */
	bool cache_control;		/* sendCacheControlHeaders (default true) */
	bool trust_xff;			/* trustForwardedForHeader (default false) */
	unsigned idle_timeout;		/* idleTimeout, s (default 30) */
	struct dlb_doh_map *map;	/* atomic: the response map in force; NULL: none */
	struct dlb_doh_map **old_maps;	/* replaced maps, freed with the configuration */
	size_t nold;
};

/** A configuration with dnsdist's defaults and no URL. NULL when out of memory. */
struct dlb_doh_cfg *dlb_doh_cfg_new(void);
/** Add URL path @url (copied). @return 0, or -1 (not a path, too many, no memory). */
int dlb_doh_cfg_add_url(struct dlb_doh_cfg *c, const char *url);
/** Add a customResponseHeaders field (copied, the name lowercased). @return 0 or -1. */
int dlb_doh_cfg_add_header(struct dlb_doh_cfg *c, const char *name, const char *value);
/** Publish @m (taken) as the response map; the one it replaces is kept. @return 0 or -1. */
int dlb_doh_cfg_set_map(struct dlb_doh_cfg *c, struct dlb_doh_map *m);
/** Do @a and @b serve the same (URLs, fields, options; the maps aside)? */
bool dlb_doh_cfg_same(const struct dlb_doh_cfg *a, const struct dlb_doh_cfg *b);
void dlb_doh_cfg_free(struct dlb_doh_cfg *c);

#endif
