/*
 * web_lua.h - the Lua functions of the web server and carbon (docs/web.md):
 * webserver(), setWebserverConfig(), showWebserverConfig(), hashPassword()
 * and carbonServer(), with dnsdist 1.7's arguments.
 *
 * Phases (lua/conf.h): CONFIG applies and binds (the sockets open before
 * privileges are dropped; serving starts with the daemon); RUNNING (the
 * console) applies and serves at once; CHECK validates and applies only the
 * settings, binding nothing; the throwaway phases (WORKER, RELOAD) only
 * validate, so a reload keeps the running web server and carbon settings.
 *
 * Thread: main (the config state); in worker states the functions only
 * validate their arguments.
 */
#ifndef DNSLB_LUA_WEB_LUA_H
#define DNSLB_LUA_WEB_LUA_H

#include <lua.h>

/**
 * Register the functions in @L, and (for the config state) the web and
 * carbon services with the daemon (dnslb/core/daemon.h).
 */
void dlb_lua_web_register(lua_State *L);

#endif
