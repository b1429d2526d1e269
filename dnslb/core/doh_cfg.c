/*
 * doh_cfg.c - a DNS over HTTPS listener's configuration (doh_cfg.h).
 */
#include "dnslb/core/doh_cfg.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the response map --------------------------------------------------------- */

static void
entry_free(struct dlb_doh_map_entry *e)
{
	regfree(&e->re);
	free(e->regex_text);
	free(e->content);
	for (size_t i = 0; i < e->nheaders; i++) {
		free(e->headers[i].name);
		free(e->headers[i].value);
	}
	free(e->headers);
}

int
dlb_doh_map_add(struct dlb_doh_map *m, const char *regex, int status, const void *content,
		size_t content_len, const struct dlb_doh_header *headers, size_t nh, char *err,
		size_t errsz)
{
	struct dlb_doh_map_entry *v, *e;
	int rc;

	if (status < 100 || status > 599) {
		snprintf(err, errsz, "invalid HTTP status code %d", status);
		return -1;
	}
	v = realloc(m->v, (m->n + 1) * sizeof(*v));
	if (v == NULL)
		goto nomem;
	m->v = v;
	e = &v[m->n];
	memset(e, 0, sizeof(*e));
	rc = regcomp(&e->re, regex, REG_ICASE | REG_NOSUB | REG_EXTENDED);
	if (rc != 0) {
		char why[128];

		regerror(rc, &e->re, why, sizeof(why));
		snprintf(err, errsz, "invalid regular expression '%s': %s", regex, why);
		return -1;
	}
	e->status = status;
	e->regex_text = strdup(regex);
	e->content = malloc(content_len + 1);
	if (e->regex_text == NULL || e->content == NULL)
		goto nomem_entry;
	if (content_len > 0)
		memcpy(e->content, content, content_len);
	e->content_len = content_len;
	if (headers != NULL) {
		e->headers = calloc(nh ? nh : 1, sizeof(*e->headers));
		if (e->headers == NULL)
			goto nomem_entry;
		for (size_t i = 0; i < nh; i++) {
			e->headers[i].name = strdup(headers[i].name);
			e->headers[i].value = strdup(headers[i].value);
			e->nheaders = i + 1;
			if (e->headers[i].name == NULL || e->headers[i].value == NULL)
				goto nomem_entry;
			for (char *c = e->headers[i].name; *c; c++)
				*c = (char)tolower((unsigned char)*c);
		}
	}
	m->n++;
	return 0;
nomem_entry:
	entry_free(e);
nomem:
	snprintf(err, errsz, "out of memory");
	return -1;
}

void
dlb_doh_map_clear(struct dlb_doh_map *m)
{
	for (size_t i = 0; i < m->n; i++)
		entry_free(&m->v[i]);
	free(m->v);
	m->v = NULL;
	m->n = 0;
}

const struct dlb_doh_map_entry *
dlb_doh_map_match(const struct dlb_doh_map *m, const char *path)
{
	for (size_t i = 0; i < m->n; i++)
		if (regexec(&m->v[i].re, path, 0, NULL, 0) == 0)
			return &m->v[i];
	return NULL;
}

/* ---- a listener's configuration --------------------------------------------- */

struct dlb_doh_cfg *
dlb_doh_cfg_new(void)
{
	struct dlb_doh_cfg *c = calloc(1, sizeof(*c));

	if (c == NULL)
		return NULL;
	c->server_tokens = strdup("h2o/dnsdist");
	if (c->server_tokens == NULL) {
		free(c);
		return NULL;
	}
	c->paths.paths = (const char *const *)c->urls;
	c->paths.exact = true;
	c->cache_control = true;
	c->idle_timeout = 30;
	return c;
}

int
dlb_doh_cfg_add_url(struct dlb_doh_cfg *c, const char *url)
{
	if (url[0] != '/' || c->paths.n >= DLB_DOH_MAX_URLS)
		return -1;
	c->urls[c->paths.n] = strdup(url);
	if (c->urls[c->paths.n] == NULL)
		return -1;
	c->paths.n++;
	return 0;
}

int
dlb_doh_cfg_add_header(struct dlb_doh_cfg *c, const char *name, const char *value)
{
	struct dlb_doh_header *v = realloc(c->custom, (c->ncustom + 1) * sizeof(*v));

	if (v == NULL)
		return -1;
	c->custom = v;
	v[c->ncustom].name = strdup(name);
	v[c->ncustom].value = strdup(value);
	if (v[c->ncustom].name == NULL || v[c->ncustom].value == NULL) {
		free(v[c->ncustom].name);
		free(v[c->ncustom].value);
		return -1;
	}
	for (char *p = v[c->ncustom].name; *p; p++)
		*p = (char)tolower((unsigned char)*p);
	c->ncustom++;
	return 0;
}

int
dlb_doh_cfg_set_map(struct dlb_doh_cfg *c, struct dlb_doh_map *m)
{
	struct dlb_doh_map *old = __atomic_load_n(&c->map, __ATOMIC_ACQUIRE);

	if (old != NULL) {
		struct dlb_doh_map **v = realloc(c->old_maps, (c->nold + 1) * sizeof(*v));

		if (v == NULL)
			return -1;
		c->old_maps = v;
		v[c->nold++] = old;
	}
	__atomic_store_n(&c->map, m, __ATOMIC_RELEASE);
	return 0;
}

static bool
same_str(const char *a, const char *b)
{
	return (a == NULL && b == NULL) || (a != NULL && b != NULL && strcmp(a, b) == 0);
}

bool
dlb_doh_cfg_same(const struct dlb_doh_cfg *a, const struct dlb_doh_cfg *b)
{
	if (a->paths.n != b->paths.n || a->paths.exact != b->paths.exact ||
	    a->ncustom != b->ncustom || a->cache_control != b->cache_control ||
	    a->trust_xff != b->trust_xff || a->idle_timeout != b->idle_timeout ||
	    !same_str(a->server_tokens, b->server_tokens))
		return false;
	for (size_t i = 0; i < a->paths.n; i++)
		if (strcmp(a->urls[i], b->urls[i]) != 0)
			return false;
	for (size_t i = 0; i < a->ncustom; i++)
		if (strcmp(a->custom[i].name, b->custom[i].name) != 0 ||
		    strcmp(a->custom[i].value, b->custom[i].value) != 0)
			return false;
	return true;
}

static void
map_free(struct dlb_doh_map *m)
{
	if (m == NULL)
		return;
	dlb_doh_map_clear(m);
	free(m);
}

void
dlb_doh_cfg_free(struct dlb_doh_cfg *c)
{
	if (c == NULL)
		return;
	for (size_t i = 0; i < c->paths.n; i++)
		free(c->urls[i]);
	for (size_t i = 0; i < c->ncustom; i++) {
		free(c->custom[i].name);
		free(c->custom[i].value);
	}
	free(c->custom);
	free(c->server_tokens);
	map_free(c->map);
	for (size_t i = 0; i < c->nold; i++)
		map_free(c->old_maps[i]);
	free(c->old_maps);
	free(c);
}
