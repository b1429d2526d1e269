/*
 * redis_lua.c - setRedis() and showRedis() (redis_lua.h, docs/fleet.md).
 */
#include "lua/redis_lua.h"

#include <arpa/inet.h>
#include <lauxlib.h>
#include <limits.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

#include "dnslb/core/netmask.h"
#include "dnslb/store/redis.h"
#include "lua/args.h"
#include "lua/conf.h"

static const char *const redis_keys[] = {
	"address", "user", "password", "db", "connectTimeout", "commandTimeout", "maxInFlight",
	"namespace", "node", NULL,
};

/* Option @key as a number in [lo, hi] (seconds). @return false when absent. */
static bool
opt_seconds(lua_State *L, int t, const char *fn, const char *key, double lo, double hi,
	    double *out)
{
	int isnum;
	double v;

	if (lua_getfield(L, t, key) == LUA_TNIL) {
		lua_pop(L, 1);
		return false;
	}
	v = lua_tonumberx(L, -1, &isnum);
	lua_pop(L, 1);
	if (!isnum || lua_type(L, -1) == LUA_TSTRING)
		luaL_error(L, "%s: '%s' must be a number of seconds", fn, key);
	if (!(v >= lo && v <= hi))
		luaL_error(L, "%s: '%s' is out of range (%f..%f)", fn, key, lo, hi);
	*out = v;
	return true;
}

/* Option @key as a string into @out (@cap bytes, NUL included). */
static void
opt_string(lua_State *L, int t, const char *fn, const char *key, char *out, size_t cap)
{
	const char *s = dlb_lua_opt_string_push(L, t, fn, key);

	if (s == NULL)
		return;
	if (strlen(s) >= cap)
		luaL_error(L, "%s: '%s' is too long (at most %d bytes)", fn, key, (int)cap - 1);
	snprintf(out, cap, "%s", s);
	lua_pop(L, 1);
}

/* "host:port", "[v6]:port", "host" (port 6379) or "/path/to.sock" (or "unix:/path"). */
static void
set_address(lua_State *L, const char *fn, const char *a, struct dlb_redis_settings *s)
{
	struct sockaddr_storage ss;
	socklen_t len;

	if (strncmp(a, "unix:", 5) == 0)
		a += 5;
	if (a[0] == '/') {
		if (strlen(a) >= sizeof(s->unix_path))
			luaL_error(L, "%s: unix socket path '%s' is too long", fn, a);
		snprintf(s->unix_path, sizeof(s->unix_path), "%s", a);
		s->host[0] = '\0';
		return;
	}
	if (dlb_sockaddr_parse(a, 6379, &ss, &len) != 0)
		luaL_error(L, "%s: invalid address '%s' (expected ip[:port] or a unix socket path)",
			   fn, a);
	/* hiredis wants the address and the port apart */
	if (ss.ss_family == AF_INET6) {
		const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)(const void *)&ss;

		inet_ntop(AF_INET6, &s6->sin6_addr, s->host, sizeof(s->host));
		s->port = ntohs(s6->sin6_port);
	} else {
		const struct sockaddr_in *s4 = (const struct sockaddr_in *)(const void *)&ss;

		inet_ntop(AF_INET, &s4->sin_addr, s->host, sizeof(s->host));
		s->port = ntohs(s4->sin_port);
	}
	s->unix_path[0] = '\0';
}

/*
 * setRedis("127.0.0.1:6379") / setRedis({address=, user=, password=, db=,
 * connectTimeout=, commandTimeout=, maxInFlight=, namespace=, node=}).
 * Config time only; a replaying state checks and forgets.
 */
static int
l_set_redis(lua_State *L)
{
	static const char fn[] = "setRedis";
	struct dlb_lua_conf *lc = dlb_lua_conf_of(L);
	enum dlb_lua_phase p = lc != NULL ? dlb_lua_conf_phase(lc) : DLB_LUA_PHASE_WORKER;
	struct dlb_redis_settings s;
	const char *a;
	int t = 0;

	if (p == DLB_LUA_PHASE_RUNNING)
		return luaL_error(L, "%s cannot be altered at runtime", fn);
	if (p == DLB_LUA_PHASE_RULES)
		return luaL_error(L, "%s cannot be called from a rule", fn);
	s = dlb_redis_settings;
	if (!s.enabled) {
		dlb_redis_settings_reset();
		s = dlb_redis_settings;
		dlb_redis_settings.enabled = false;
	}
	if (lua_type(L, 1) == LUA_TSTRING) {
		set_address(L, fn, lua_tostring(L, 1), &s);
	} else if (lua_type(L, 1) == LUA_TTABLE) {
		t = 1;
		lua_pushnil(L);
		while (lua_next(L, t) != 0) {
			lua_pop(L, 1);
			if (lua_type(L, -1) != LUA_TSTRING || !dlb_lua_name_in(lua_tostring(L, -1),
									    redis_keys))
				return luaL_error(L, "%s: unknown option '%s'", fn,
						  luaL_tolstring(L, -1, NULL));
		}
		if ((a = dlb_lua_opt_string_push(L, t, fn, "address")) != NULL) {
			set_address(L, fn, a, &s);
			lua_pop(L, 1);
		}
		opt_string(L, t, fn, "user", s.user, sizeof(s.user));
		opt_string(L, t, fn, "password", s.password, sizeof(s.password));
		dlb_lua_opt_int(L, t, fn, "db", 0, 65535, &s.db);
		opt_seconds(L, t, fn, "connectTimeout", 0.001, 3600, &s.connect_timeout);
		opt_seconds(L, t, fn, "commandTimeout", 0.001, 3600, &s.command_timeout);
		{
			int m = (int)s.max_in_flight;

			dlb_lua_opt_int(L, t, fn, "maxInFlight", 1, 1000000, &m);
			s.max_in_flight = (unsigned)m;
		}
		opt_string(L, t, fn, "namespace", s.ns, sizeof(s.ns));
		opt_string(L, t, fn, "node", s.node, sizeof(s.node));
		if (s.ns[0] == '\0' || strchr(s.ns, ' ') != NULL)
			return luaL_error(L, "%s: 'namespace' must be a non-empty word", fn);
		if (s.node[0] == '\0' || strchr(s.node, ' ') != NULL)
			return luaL_error(L, "%s: 'node' must be a non-empty word", fn);
	} else {
		return luaL_error(L, "%s: expected an address string or an options table", fn);
	}
	if (p == DLB_LUA_PHASE_CONFIG || p == DLB_LUA_PHASE_CHECK) {
		s.enabled = true;
		dlb_redis_settings = s;
	}
	return 0;
}

struct show_ctx {
	lua_State *L;
};

static void
show_one(const struct dlb_redis *r, void *ud)
{
	struct show_ctx *c = ud;
	struct dlb_redis_stats st;
	char line[256];

	dlb_redis_get_stats(r, &st);
	snprintf(line, sizeof(line), "%-12s %-5s %10llu %8llu %8llu %10llu %8u", dlb_redis_role(r),
		 st.up ? "up" : "down", (unsigned long long)st.commands,
		 (unsigned long long)st.errors, (unsigned long long)st.timeouts,
		 (unsigned long long)st.reconnects, st.in_flight);
	dlb_lua_print(c->L, line);
}

/* showRedis(): the settings, then one line per connection. */
static int
l_show_redis(lua_State *L)
{
	const struct dlb_redis_settings *s = &dlb_redis_settings;
	struct show_ctx c = { L };
	char line[1200];

	if (!s->enabled) {
		dlb_lua_print(L, "Redis is not configured (setRedis)");
		return 0;
	}
	if (s->unix_path[0] != '\0')
		snprintf(line, sizeof(line), "Redis at %s, db %d, namespace \"%s\", node \"%s\"",
			 s->unix_path, s->db, s->ns, s->node);
	else
		snprintf(line, sizeof(line), "Redis at %s:%d, db %d, namespace \"%s\", node \"%s\"",
			 s->host, s->port, s->db, s->ns, s->node);
	dlb_lua_print(L, line);
	snprintf(line, sizeof(line), "%-12s %-5s %10s %8s %8s %10s %8s", "Connection", "State",
		 "Commands", "Errors", "Timeouts", "Reconnects", "InFlight");
	dlb_lua_print(L, line);
	dlb_redis_visit(show_one, &c);
	return 0;
}

static const luaL_Reg redis_funcs[] = {
	{ "setRedis", l_set_redis },
	{ "showRedis", l_show_redis },
	{ NULL, NULL },
};

void
dlb_lua_redis_register(lua_State *L)
{
	lua_pushglobaltable(L);
	luaL_setfuncs(L, redis_funcs, 0);
	lua_pop(L, 1);
}
