/*
 * web_lua.c - webserver(), setWebserverConfig(), showWebserverConfig(),
 * hashPassword() and carbonServer() (web_lua.h, docs/web.md).
 *
 * Each function checks every argument first (raising the usual
 * "<fn>: ..." errors), then, in the phases that apply settings, calls
 * dnslb/control/web.c or dnslb/control/carbon.c, whose setters either apply a whole change
 * or refuse it. Nothing is kept in Lua: the settings live in those modules.
 *
 * Thread: main (config state); worker and reload states only validate.
 */
#include "lua/web_lua.h"

#include <lauxlib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dnslb/control/carbon.h"
#include "dnslb/core/daemon.h"
#include "dnslb/core/log.h"
#include "dnslb/control/web.h"
#include "lua/args.h"
#include "lua/conf.h"

/* The phase of @L; a state without a dlb_lua_conf only validates. */
static enum dlb_lua_phase
phase_of(lua_State *L)
{
	struct dlb_lua_conf *lc = dlb_lua_conf_of(L);

	return lc != NULL ? dlb_lua_conf_phase(lc) : DLB_LUA_PHASE_WORKER;
}

/* Only validate: worker and reload replays, and rules states. */
static bool
validate_only(lua_State *L)
{
	enum dlb_lua_phase p = phase_of(L);

	return dlb_lua_phase_throwaway(p) || p == DLB_LUA_PHASE_RULES;
}

/* Optional string argument: NULL when absent or nil. */
static const char *
opt_string_arg(lua_State *L, int arg, const char *fn, size_t *len)
{
	const char *s;

	if (lua_isnoneornil(L, arg))
		return NULL;
	s = dlb_lua_arg_string(L, arg, fn);
	lua_tolstring(L, arg, len);
	return s;
}

/* A credential must not be a malformed "$scrypt$..." hash. */
static void
check_credential(lua_State *L, const char *fn, const char *what, const char *s, size_t len)
{
	if (len > DLB_WEB_MAX_CRED)
		luaL_error(L, "%s: the %s is too long (%d bytes at most)", fn, what,
			   DLB_WEB_MAX_CRED);
	if (len >= 8 && memcmp(s, "$scrypt$", 8) == 0 && !dlb_web_is_hashed(s, len))
		luaL_error(L, "%s: the %s is not a valid hashed credential "
			   "($scrypt$ln=L,p=P,r=R$salt$hash, N = 2^L at most %d, p at most 4, "
			   "r at most 8)", fn, what, DLB_WEB_SCRYPT_MAX_N);
}

struct headers {
	const char *names[DLB_WEB_MAX_HEADERS];
	const char *values[DLB_WEB_MAX_HEADERS];
	size_t n;
};

/*
 * The customHeaders table at stack index @t: string keys and values, each
 * usable as a header. The strings stay anchored in the table, which the
 * caller keeps on the stack.
 */
static void
check_headers(lua_State *L, int t, const char *fn, struct headers *h)
{
	h->n = 0;
	lua_pushnil(L);
	while (lua_next(L, t) != 0) {
		const char *name, *value;

		if (lua_type(L, -2) != LUA_TSTRING || lua_type(L, -1) != LUA_TSTRING)
			luaL_error(L, "%s: customHeaders must map header names to strings", fn);
		name = lua_tostring(L, -2);
		value = lua_tostring(L, -1);
		if (!dlb_web_header_ok(name, value))
			luaL_error(L, "%s: invalid custom header '%s'", fn, name);
		if (h->n == DLB_WEB_MAX_HEADERS)
			luaL_error(L, "%s: too many custom headers (%d at most)", fn,
				   DLB_WEB_MAX_HEADERS);
		h->names[h->n] = name;
		h->values[h->n] = value;
		h->n++;
		lua_pop(L, 1);
	}
}

static void
check_acl(lua_State *L, const char *fn, const char *acl)
{
	char err[256];

	if (dlb_web_set_acl(acl, false, err, sizeof(err)) != 0)
		luaL_error(L, "%s: %s", fn, err);
}

static void
apply_credential(lua_State *L, const char *fn, int which, const char *s, size_t len, bool hash)
{
	char err[256];

	if (dlb_web_set_credential(which, s, len, hash, err, sizeof(err)) != 0)
		luaL_error(L, "%s: %s", fn, err);
}

static void
apply_headers(lua_State *L, const char *fn, const struct headers *h)
{
	if (dlb_web_set_headers(h->names, h->values, h->n) != 0)
		luaL_error(L, "%s: out of memory", fn);
}

/* webserver(addr[, password[, apikey[, customHeaders[, acl]]]]) */
static int
l_webserver(lua_State *L)
{
	const char *fn = "webserver";
	const char *addr = dlb_lua_arg_string(L, 1, fn), *pw, *key, *acl;
	size_t pwlen = 0, keylen = 0, acllen = 0;
	struct headers h;
	bool have_headers = false;
	char err[256];

	pw = opt_string_arg(L, 2, fn, &pwlen);
	key = opt_string_arg(L, 3, fn, &keylen);
	if (!lua_isnoneornil(L, 4)) {
		luaL_argexpected(L, lua_type(L, 4) == LUA_TTABLE, 4, "table");
		check_headers(L, 4, fn, &h);
		have_headers = true;
	}
	acl = opt_string_arg(L, 5, fn, &acllen);
	if (dlb_web_parse_address(addr, err, sizeof(err)) != 0)
		return luaL_error(L, "%s: %s", fn, err);
	if (pw != NULL)
		check_credential(L, fn, "password", pw, pwlen);
	if (key != NULL)
		check_credential(L, fn, "API key", key, keylen);
	if (acl != NULL)
		check_acl(L, fn, acl);
	if (validate_only(L) || phase_of(L) == DLB_LUA_PHASE_CHECK)
		return 0;

	/* dnsdist: a bind failure is reported, and the settings are not applied */
	if (dlb_web_listen(addr, err, sizeof(err)) != 0) {
		if (phase_of(L) == DLB_LUA_PHASE_RUNNING)
			dlb_lua_print(L, err);
		return 0;
	}
	if (pw != NULL) {
		if (!dlb_web_is_hashed(pw, pwlen))
			dlb_warn("Passing a plain-text password to 'webserver()' is deprecated, "
				 "please use 'setWebserverConfig()' instead.");
		apply_credential(L, fn, 0, pw, pwlen, false);
	}
	if (key != NULL)
		apply_credential(L, fn, 1, key, keylen, false);
	if (have_headers)
		apply_headers(L, fn, &h);
	if (acl != NULL && dlb_web_set_acl(acl, true, err, sizeof(err)) != 0)
		return luaL_error(L, "%s: %s", fn, err);
	return 0;
}

static const char *const webconfig_keys[] = {
	"password", "apiKey", "acl", "customHeaders", "statsRequireAuthentication",
	"maxConcurrentConnections", "hashPlaintextCredentials", "apiRequiresAuthentication",
	"dashboardRequiresAuthentication", NULL,
};

/* setWebserverConfig{password=, apiKey=, acl=, customHeaders=, ...} */
static int
l_set_webserver_config(lua_State *L)
{
	const char *fn = "setWebserverConfig";
	static const struct {
		const char *key;
		enum dlb_web_flag flag;
	} flags[] = {
		{ "statsRequireAuthentication", DLB_WEB_STATS_AUTH },
		{ "apiRequiresAuthentication", DLB_WEB_API_AUTH },
		{ "dashboardRequiresAuthentication", DLB_WEB_DASHBOARD_AUTH },
	};
	int t = dlb_lua_opt_table(L, 1, fn), top, maxconn = 0;
	bool hash = false, have_max, have_headers = false;
	bool flag_set[3] = { false }, flag_val[3] = { false };
	const char *pw, *key, *acl;
	size_t pwlen = 0, keylen = 0;
	struct headers h;

	if (t == 0)
		return 0;
	top = lua_gettop(L);
	dlb_lua_warn_unknown_keys(L, t, fn, "option", webconfig_keys);
	dlb_lua_opt_bool(L, t, fn, "hashPlaintextCredentials", &hash);
	pw = dlb_lua_opt_string_push(L, t, fn, "password");
	if (pw != NULL) {
		lua_tolstring(L, -1, &pwlen);
		check_credential(L, fn, "password", pw, pwlen);
	}
	key = dlb_lua_opt_string_push(L, t, fn, "apiKey");
	if (key != NULL) {
		lua_tolstring(L, -1, &keylen);
		check_credential(L, fn, "API key", key, keylen);
	}
	acl = dlb_lua_opt_string_push(L, t, fn, "acl");
	if (acl != NULL)
		check_acl(L, fn, acl);
	if (lua_getfield(L, t, "customHeaders") != LUA_TNIL) {
		if (!lua_istable(L, -1))
			return luaL_error(L, "%s: 'customHeaders' must be a table", fn);
		check_headers(L, lua_gettop(L), fn, &h);
		have_headers = true;
	}
	for (size_t i = 0; i < 3; i++)
		flag_set[i] = dlb_lua_opt_bool(L, t, fn, flags[i].key, &flag_val[i]);
	have_max = dlb_lua_opt_int(L, t, fn, "maxConcurrentConnections", 1, 100000, &maxconn);
	if (validate_only(L)) {
		lua_settop(L, top);
		return 0;
	}

	if (pw != NULL) {
		if (!dlb_web_is_hashed(pw, pwlen))
			dlb_info("Passing a plain-text password via the 'password' parameter to "
				 "'setWebserverConfig()' is not advised, please consider "
				 "generating a hashed one using 'hashPassword()' instead.");
		apply_credential(L, fn, 0, pw, pwlen, hash);
	}
	if (key != NULL) {
		if (!dlb_web_is_hashed(key, keylen))
			dlb_info("Passing a plain-text API key via the 'apiKey' parameter to "
				 "'setWebserverConfig()' is not advised, please consider "
				 "generating a hashed one using 'hashPassword()' instead.");
		apply_credential(L, fn, 1, key, keylen, hash);
	}
	if (acl != NULL) {
		char err[256];

		if (dlb_web_set_acl(acl, true, err, sizeof(err)) != 0)
			return luaL_error(L, "%s: %s", fn, err);
	}
	if (have_headers)
		apply_headers(L, fn, &h);
	for (size_t i = 0; i < 3; i++)
		if (flag_set[i])
			dlb_web_set_flag(flags[i].flag, flag_val[i]);
	if (have_max)
		dlb_web_set_max_connections(maxconn);
	lua_settop(L, top);
	return 0;
}

/* showWebserverConfig(): the text, returned (dnsdist returns it too). */
static int
l_show_webserver_config(lua_State *L)
{
	char *s = dlb_web_config_text();

	if (s == NULL)
		return luaL_error(L, "showWebserverConfig: out of memory");
	lua_pushstring(L, s);
	free(s);
	return 1;
}

/* hashPassword(password[, workFactor = 1024]) */
static int
l_hash_password(lua_State *L)
{
	const char *fn = "hashPassword";
	size_t len;
	const char *pw = dlb_lua_arg_string(L, 1, fn);
	lua_Integer wf;
	char out[DLB_WEB_HASH_LEN], err[256];

	lua_tolstring(L, 1, &len);
	wf = dlb_lua_opt_arg_int(L, 2, fn, 0, (lua_Integer)1 << 40, 1024);
	if (dlb_web_hash_password(pw, len, (unsigned long)wf, out, sizeof(out), err,
				  sizeof(err)) != 0)
		return luaL_error(L, "%s: %s", fn, err);
	lua_pushstring(L, out);
	return 1;
}

/* carbonServer(address[, ourname[, interval = 30[, namespace[, instance]]]]) */
static int
l_carbon_server(lua_State *L)
{
	const char *fn = "carbonServer";
	const char *addr = dlb_lua_arg_string(L, 1, fn), *ourname, *ns, *instance;
	size_t len;
	unsigned interval;
	char err[256];

	ourname = opt_string_arg(L, 2, fn, &len);
	interval = (unsigned)dlb_lua_opt_arg_int(L, 3, fn, 1, 0x7fffffff, 30);
	ns = opt_string_arg(L, 4, fn, &len);
	instance = opt_string_arg(L, 5, fn, &len);
	if (dlb_carbon_check(addr, ourname, interval, ns, instance, err, sizeof(err)) != 0)
		return luaL_error(L, "%s: %s", fn, err);
	if (validate_only(L) || phase_of(L) == DLB_LUA_PHASE_CHECK)
		return 0;
	if (dlb_carbon_add(addr, ourname, interval, ns, instance, err, sizeof(err)) != 0)
		return luaL_error(L, "%s: %s", fn, err);
	return 0;
}

void
dlb_lua_web_register(lua_State *L)
{
	enum dlb_lua_phase p = phase_of(L);

	lua_register(L, "webserver", l_webserver);
	lua_register(L, "setWebserverConfig", l_set_webserver_config);
	lua_register(L, "showWebserverConfig", l_show_webserver_config);
	lua_register(L, "hashPassword", l_hash_password);
	lua_register(L, "carbonServer", l_carbon_server);
	/* the config state only: worker states are built by other threads' owners */
	if (dlb_lua_conf_of(L) != NULL &&
	    (p == DLB_LUA_PHASE_CONFIG || p == DLB_LUA_PHASE_CHECK || p == DLB_LUA_PHASE_RUNNING)) {
		dlb_daemon_add_service(&dlb_web_service);
		dlb_daemon_add_service(&dlb_carbon_service);
	}
}
