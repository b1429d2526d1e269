/*
 * main.c - command line (dnsdist-compatible), configuration, workers,
 * signals and orderly shutdown. The main thread runs libev's default loop for
 * signals; the data plane runs in the workers.
 */
#include <errno.h>
#include <getopt.h>
#include <grp.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <ev.h>

#include "dnslb/core/cache.h"
#include "dnslb/core/config.h"
#include "dnslb/core/tls.h"
#include "dnslb/control/console_client.h"
#include "dnslb/core/daemon.h"
#include "dnslb/pipeline/dynblock.h"
#include "dnslb/control/fleet.h"
#include "dnslb/upstream/health.h"

#include "dnslb/core/log.h"
#include "dnslb/core/notify.h"
#include "dnslb/store/kvstore.h"
#include "dnslb/store/redis.h"
#include "dnslb/runtime.h"
#include "dnslb/core/rcu.h"
#include "dnslb/core/netmask.h"
#include "dnslb/core/stats.h"
#include "dnslb/core/wire.h"
#include "dnslb/worker.h"
#include "lua/conf.h"
#include "lua/console_lua.h"
#include "lua/worker.h"
#include "rules/rules.h"

#define DEFAULT_CONFIG	"/etc/dnslb/dnslb.conf"

struct cli {
	const char *config;
	bool check_config;
	bool supervised;
	bool disable_syslog;
	bool verbose;
	const char *uid, *gid;
	int workers;			/* -1: from the config */
	const char *locals[DLB_MAX_FRONTENDS];
	int nlocals;
	const char *acls[256];
	int nacls;
	const char *backends[DLB_MAX_BACKENDS];
	int nbackends;
	/* console client mode (lua/console_lua.h) */
	bool client;			/* -c, or -e */
	const char *client_addr;	/* -c ADDR / --client=ADDR / a positional argument */
	const char *execute;		/* -e */
	const char *setkey;		/* -k */
};

static struct dlb_worker *workers[DLB_MAX_WORKERS];
static int nworkers;
static struct dlb_config *cfg;
static struct dlb_lua_conf *main_lc;	/* the config state: maintenance(), console */
static struct dlb_rcu_thread main_rcu;	/* cache expunges from Lua and cleaning */
static struct dlb_health *health;
static struct cli cli;			/* the command line, applied again by reloads */
static uint64_t lua_gen;		/* the rules' Lua generation (rules/rules.h) */
#define MAX_RETIRED_LC 4
static struct dlb_lua_conf *retired_lc[MAX_RETIRED_LC];	/* config states replaced by
					 * reloads, freed at the next maintenance tick
					 * (reload() may be running in one of them) */
static int nretired_lc;

/* per-backend rates over the last second, computed by the maintenance timer */
static struct {
	uint64_t last_queries, last_drops;
	double qps, drate;
} be_rates[DLB_MAX_BACKENDS];

/* dlb_be_totals_fn: a backend's figures summed over the workers. Thread: main. */
static void
be_totals(int b, struct dlb_be_totals *t)
{
	int nlat = 0;

	memset(t, 0, sizeof(*t));
	if (b < 0 || b >= cfg->nbackends)
		return;
	for (int i = 0; i < nworkers; i++) {
		const struct dlb_be_stats *bs = &workers[i]->be_stats[b];
		double lat;

		__atomic_load(&bs->latency_us, &lat, __ATOMIC_RELAXED);

		t->queries += __atomic_load_n(&bs->queries, __ATOMIC_RELAXED);
		t->responses += __atomic_load_n(&bs->responses, __ATOMIC_RELAXED);
		t->drops += __atomic_load_n(&bs->drops, __ATOMIC_RELAXED);
		t->send_errors += __atomic_load_n(&bs->send_errors, __ATOMIC_RELAXED);
		t->servfails += __atomic_load_n(&bs->servfails, __ATOMIC_RELAXED);
		t->refused += __atomic_load_n(&bs->refused, __ATOMIC_RELAXED);
		t->outstanding += __atomic_load_n(&bs->outstanding, __ATOMIC_RELAXED);
		t->tcp_new += __atomic_load_n(&bs->tcp_new, __ATOMIC_RELAXED);
		t->tcp_reused += __atomic_load_n(&bs->tcp_reused, __ATOMIC_RELAXED);
		t->tcp_died_sending += __atomic_load_n(&bs->tcp_died_sending, __ATOMIC_RELAXED);
		t->tcp_died_reading += __atomic_load_n(&bs->tcp_died_reading, __ATOMIC_RELAXED);
		t->tcp_gave_up += __atomic_load_n(&bs->tcp_gave_up, __ATOMIC_RELAXED);
		t->tcp_connect_timeouts += __atomic_load_n(&bs->tcp_connect_timeouts,
							   __ATOMIC_RELAXED);
		t->tcp_read_timeouts += __atomic_load_n(&bs->tcp_read_timeouts, __ATOMIC_RELAXED);
		t->tcp_write_timeouts += __atomic_load_n(&bs->tcp_write_timeouts, __ATOMIC_RELAXED);
		t->tls_resumptions += __atomic_load_n(&bs->tls_resumptions, __ATOMIC_RELAXED);
		if (lat > 0) {
			t->latency_us += lat;
			nlat++;
		}
	}
	if (nlat > 0)
		t->latency_us /= nlat;
	/* a DoH server's checks, counted by the main thread, as dnsdist counts them */
	t->tcp_new += __atomic_load_n(&cfg->backends[b]->check_conns, __ATOMIC_RELAXED);
	t->tls_resumptions += __atomic_load_n(&cfg->backends[b]->check_tls_resumptions,
					      __ATOMIC_RELAXED);
	t->qps = be_rates[b].qps;
	t->drate = be_rates[b].drate;
}

static void
usage(FILE *f)
{
	fprintf(f,
		"Usage: dnslb [OPTION]... [BACKEND-ADDRESS]...\n"
		"DNS load balancer, configured in dnsdist's Lua language.\n\n"
		"  -C, --config FILE      configuration file (default " DEFAULT_CONFIG ")\n"
		"      --check-config     check the configuration and exit\n"
		"  -l, --local ADDR       listen on ADDR (UDP and TCP), repeatable; replaces the\n"
		"                         listeners of the configuration\n"
		"  -a, --acl NETMASK      allow queries from NETMASK, repeatable\n"
		"      --workers N        number of worker threads (default: the config's\n"
		"                         setWorkerThreads, else one per CPU)\n"
		"      --supervised       run in the foreground without a console (systemd)\n"
		"      --disable-syslog   log to stdout only\n"
		"      --log-timestamps   prepend the local time to each line logged to stdout\n"
		"  -u, --uid USER         drop privileges to USER after binding\n"
		"  -g, --gid GROUP        drop privileges to GROUP after binding\n"
		"  -c, --client [ADDR]    console client: connect to ADDR, else to the config's\n"
		"                         controlSocket (the config is only read for it and setKey)\n"
		"  -e, --execute CMD      with -c: run one console command, print the reply, exit\n"
		"  -k, --setkey KEY       the console key (base64), over the config's setKey\n"
		"  -v, --verbose          verbose logging\n"
		"  -V, --version          print the version and exit\n"
		"  -h, --help             this text\n\n"
		"Each BACKEND-ADDRESS is added as newServer(\"ADDRESS\").\n"
		"Signals: TERM/INT exit, HUP reloads the config file, USR1 prints the counters.\n");
}

/*
 * dnsdist's two lines: the version with the Lua it runs, then the features
 * compiled in. Every feature here is always built (no optional
 * dependencies): the list says what a config may use.
 */
static void
print_version(void)
{
	printf("dnslb %s (%s)\n", DLB_VERSION, dlb_lua_release());
	printf("Enabled features: carbon console(libsodium) dynblocks ecs fleet(hiredis) "
	       "kvstore(hiredis) packet-cache proxy-protocol recvmmsg/sendmmsg systemd "
	       "web(libmicrohttpd)\n");
}

static int
parse_cli(int argc, char **argv, struct cli *c)
{
	enum { OPT_CHECK = 1000, OPT_SUPERVISED, OPT_NOSYSLOG, OPT_WORKERS, OPT_LOGTS };
	static const struct option longopts[] = {
		{ "config", required_argument, NULL, 'C' },
		{ "check-config", no_argument, NULL, OPT_CHECK },
		{ "local", required_argument, NULL, 'l' },
		{ "acl", required_argument, NULL, 'a' },
		{ "workers", required_argument, NULL, OPT_WORKERS },
		{ "supervised", no_argument, NULL, OPT_SUPERVISED },
		{ "disable-syslog", no_argument, NULL, OPT_NOSYSLOG },
		{ "log-timestamps", no_argument, NULL, OPT_LOGTS },
		{ "uid", required_argument, NULL, 'u' },
		{ "gid", required_argument, NULL, 'g' },
		{ "client", optional_argument, NULL, 'c' },
		{ "execute", required_argument, NULL, 'e' },
		{ "setkey", required_argument, NULL, 'k' },
		{ "verbose", no_argument, NULL, 'v' },
		{ "version", no_argument, NULL, 'V' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int opt;

	memset(c, 0, sizeof(*c));
	c->workers = -1;
	while ((opt = getopt_long(argc, argv, "C:l:a:u:g:vVhce:k:", longopts, NULL)) != -1) {
		switch (opt) {
		case 'C':
			c->config = optarg;
			break;
		case OPT_CHECK:
			c->check_config = true;
			break;
		case OPT_LOGTS:
			dlb_log_set_timestamps(true);
			break;
		case 'l':
			if (c->nlocals == DLB_MAX_FRONTENDS) {
				fprintf(stderr, "too many -l options\n");
				return -1;
			}
			c->locals[c->nlocals++] = optarg;
			break;
		case 'a':
			if (c->nacls == 256) {
				fprintf(stderr, "too many -a options\n");
				return -1;
			}
			c->acls[c->nacls++] = optarg;
			break;
		case OPT_WORKERS: {
			char *end;
			long v = strtol(optarg, &end, 10);

			if (*end != '\0' || v < 1 || v > DLB_MAX_WORKERS) {
				fprintf(stderr, "--workers: expected 1..%d\n", DLB_MAX_WORKERS);
				return -1;
			}
			c->workers = (int)v;
			break;
		}
		case OPT_SUPERVISED:
			c->supervised = true;
			break;
		case OPT_NOSYSLOG:
			c->disable_syslog = true;
			break;
		case 'u':
			c->uid = optarg;
			break;
		case 'g':
			c->gid = optarg;
			break;
		case 'c':
			c->client = true;
			if (optarg != NULL)
				c->client_addr = optarg;
			break;
		case 'e':
			c->execute = optarg;
			c->client = true;
			break;
		case 'k':
			c->setkey = optarg;
			break;
		case 'v':
			c->verbose = true;
			break;
		case 'V':
			print_version();
			exit(0);
		case 'h':
			usage(stdout);
			exit(0);
		default:
			usage(stderr);
			return -1;
		}
	}
	for (int i = optind; i < argc; i++) {
		if (c->client) {
			c->client_addr = argv[i];	/* dnsdist -c ADDR */
			continue;
		}
		if (c->nbackends == DLB_MAX_BACKENDS) {
			fprintf(stderr, "too many backends\n");
			return -1;
		}
		c->backends[c->nbackends++] = argv[i];
	}
	if (c->config == NULL)
		c->config = DEFAULT_CONFIG;
	return 0;
}

/* Apply -l, -a and positional backends on top of the configuration. */
static int
apply_cli(const struct cli *c, struct dlb_config *conf)
{
	if (c->nlocals > 0) {
		conf->nfrontends = 0;
		for (int i = 0; i < c->nlocals; i++) {
			struct dlb_frontend_cfg fe;

			memset(&fe, 0, sizeof(fe));
			if (dlb_sockaddr_parse(c->locals[i], DLB_DEFAULT_PORT, &fe.addr,
					       &fe.addrlen) != 0) {
				fprintf(stderr, "Invalid listen address '%s'\n", c->locals[i]);
				return -1;
			}
			dlb_sockaddr_format((struct sockaddr *)&fe.addr, fe.text, sizeof(fe.text));
			dlb_config_add_frontend(conf, &fe);
		}
	}
	for (int i = 0; i < c->nacls; i++) {
		struct dlb_netmask nm;

		if (dlb_netmask_parse(c->acls[i], &nm) != 0) {
			fprintf(stderr, "Invalid ACL entry '%s'\n", c->acls[i]);
			return -1;
		}
		dlb_nmg_add(&conf->acl, &nm);
	}
	for (int i = 0; i < c->nbackends; i++) {
		struct dlb_backend *be = dlb_backend_new();

		if (be == NULL || dlb_sockaddr_parse(c->backends[i], DLB_DEFAULT_PORT, &be->addr,
						     &be->addrlen) != 0) {
			fprintf(stderr, "Invalid backend address '%s'\n", c->backends[i]);
			free(be);
			return -1;
		}
		dlb_sockaddr_format((struct sockaddr *)&be->addr, be->addr_text,
				    sizeof(be->addr_text));
		if (dlb_config_add_backend(conf, be) != 0) {
			fprintf(stderr, "Too many backends\n");
			free(be);
			return -1;
		}
		if (!c->check_config)
			dlb_info("Added downstream server %s", be->addr_text);
	}
	if (conf->nfrontends == 0) {
		/* dnsdist's implicit default listener */
		struct dlb_frontend_cfg fe;

		memset(&fe, 0, sizeof(fe));
		dlb_sockaddr_parse("127.0.0.1:53", DLB_DEFAULT_PORT, &fe.addr, &fe.addrlen);
		dlb_sockaddr_format((struct sockaddr *)&fe.addr, fe.text, sizeof(fe.text));
		dlb_config_add_frontend(conf, &fe);
	}
	if (c->workers > 0)
		conf->workers = c->workers;
	if (conf->workers <= 0) {
		long n = sysconf(_SC_NPROCESSORS_ONLN);

		conf->workers = n < 1 ? 1 : (n > DLB_MAX_WORKERS ? DLB_MAX_WORKERS : (int)n);
	}
	return 0;
}

/*
 * Can @fe's address be bound? The workers bind one socket each with
 * SO_REUSEPORT, which would let a second dnslb (or anything else of the
 * same user with SO_REUSEPORT) share the address silently. dnsdist refuses
 * to start unless the listener has reusePort=true: so for the other
 * listeners, try the address first with sockets that share nothing (no
 * SO_REUSEPORT; the UDP one without SO_REUSEADDR either, which would share
 * a UDP port too), and close them before the workers bind. The address can
 * still be taken in between, by a process starting in the same instant:
 * that window is the time to open the workers' sockets. A reusePort=true
 * listener is tried with SO_REUSEPORT, for the other failures (no
 * privilege for the port, ...). @return 0, or -1 with errno set.
 */
/* What dnsdist's "Listening on <address>" line adds for @fe. */
static const char *
listening_for(const struct dlb_frontend_cfg *fe)
{
	return fe->doh != NULL ? " for DoH" : fe->tls != NULL ? " for TLS" : "";
}

static int
probe_frontend(const struct dlb_frontend_cfg *fe)
{
	static const int types[2] = { SOCK_DGRAM, SOCK_STREAM };

	/* a DNS over TLS or HTTPS listener has no UDP socket */
	for (int i = dlb_frontend_stream_only(fe) ? 1 : 0; i < 2; i++) {
		int fd = socket(fe->addr.ss_family, types[i] | SOCK_CLOEXEC, 0);
		int one = 1, rc, saved;

		if (fd == -1)
			return -1;
		if (fe->addr.ss_family == AF_INET6)
			setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
		/* as the workers' sockets (dnslb/frontend/frontend.c) */
		setsockopt(fd, IPPROTO_IP, IP_FREEBIND, &one, sizeof(one));
		if (fe->iface[0] != '\0' &&
		    setsockopt(fd, SOL_SOCKET, SO_BINDTODEVICE, fe->iface,
			       (socklen_t)strlen(fe->iface)) == -1) {
			saved = errno;
			close(fd);
			errno = saved;
			return -1;
		}
		if (fe->reuseport)
			setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one));
		/* TCP: only a listening socket counts, not a connection in TIME_WAIT */
		if (types[i] == SOCK_STREAM || fe->reuseport)
			setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		rc = bind(fd, (const struct sockaddr *)&fe->addr, fe->addrlen);
		saved = errno;
		close(fd);
		if (rc == -1) {
			errno = saved;
			return -1;
		}
	}
	return 0;
}

static int
drop_privileges(const char *user, const char *group)
{
	if (group != NULL) {
		struct group *gr = getgrnam(group);
		gid_t gid;

		if (gr != NULL)
			gid = gr->gr_gid;
		else if (strspn(group, "0123456789") == strlen(group))
			gid = (gid_t)strtoul(group, NULL, 10);
		else {
			dlb_err("Unknown group '%s'", group);
			return -1;
		}
		if (setgroups(0, NULL) == -1 && errno != EPERM) {
			dlb_err("setgroups: %s", strerror(errno));
			return -1;
		}
		if (setgid(gid) == -1) {
			dlb_err("Unable to set group ID to %s: %s", group, strerror(errno));
			return -1;
		}
	}
	if (user != NULL) {
		struct passwd *pw = getpwnam(user);
		uid_t uid;

		if (pw != NULL)
			uid = pw->pw_uid;
		else if (strspn(user, "0123456789") == strlen(user))
			uid = (uid_t)strtoul(user, NULL, 10);
		else {
			dlb_err("Unknown user '%s'", user);
			return -1;
		}
		if (setuid(uid) == -1) {
			dlb_err("Unable to set user ID to %s: %s", user, strerror(errno));
			return -1;
		}
	}
	return 0;
}

/* SIGUSR1: counters summed over workers, then per backend. */
static void
print_stats(void)
{
	const struct dlb_stats *v[DLB_MAX_WORKERS];
	struct dlb_stats sum;

	for (int i = 0; i < nworkers; i++)
		v[i] = &workers[i]->stats;
	dlb_stats_sum(v, nworkers, &sum);
	dlb_stats_print(&sum, stdout);
	for (int b = 0; b < cfg->nbackends; b++) {
		struct dlb_be_totals t;

		be_totals(b, &t);
		printf("backend %s queries %" PRIu64 " responses %" PRIu64 " drops %" PRIu64
		       " outstanding %" PRIu64 " timeouts %" PRIu64 " senderrors %" PRIu64
		       " servfails %" PRIu64 " refused %" PRIu64 " latency_us %" PRIu64 "\n",
		       cfg->backends[b]->name, t.queries, t.responses, t.drops, t.outstanding, t.drops,
		       t.send_errors, t.servfails, t.refused, (uint64_t)t.latency_us);
	}
	printf("stat-end\n");
	fflush(stdout);
}

/* Is every pool that uses @c without a server up? (keepStaleData) */
static bool
cache_pools_all_down(const struct dlb_cache *c)
{
	for (int i = 0; i < cfg->npools; i++) {
		const struct dlb_pool *p = cfg->pools[i];
		bool up = false;

		if (p->cache != c)
			continue;
		for (int j = 0; j < p->n && !up; j++)
			up = dlb_backend_is_up(p->members[j]);
		if (!up)
			return true;
	}
	return false;
}

/*
 * Every second: wake a worker that may have waited in its UDP socket since
 * the last time (dlb_worker_wake_idle), free what the main thread retired;
 * every setCacheCleaningDelay seconds, purge expired entries down to
 * (100 - setCacheCleaningPercentage)% of each cache's size.
 */
static void
maintenance_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
	static double last_clean;
	double now = ev_now(loop);

	for (int i = 0; i < nworkers; i++)
		dlb_worker_wake_idle(workers[i]);
	for (int b = 0; b < cfg->nbackends && b < DLB_MAX_BACKENDS; b++) {
		struct dlb_be_totals tot;

		be_totals(b, &tot);
		be_rates[b].qps = (double)(tot.queries - be_rates[b].last_queries);
		be_rates[b].drate = (double)(tot.drops - be_rates[b].last_drops);
		be_rates[b].last_queries = tot.queries;
		be_rates[b].last_drops = tot.drops;
	}
	if (health != NULL)
		dlb_health_lazy_tick(health);
	/* DNS over TLS listeners: ticketsKeysRotationDelay */
	for (int i = 0; i < cfg->nfrontends; i++)
		if (cfg->frontends[i].tls != NULL)
			dlb_tls_server_maintain(cfg->frontends[i].tls, now);
	dlb_rules_maintenance(now);
	while (nretired_lc > 0)
		dlb_lua_conf_free(retired_lc[--nretired_lc]);
	dlb_dynblock_maintenance();	/* harvest the rates before maintenance() applies rules */
	if (main_lc != NULL)
		dlb_lua_conf_maintenance(main_lc);
	if (last_clean == 0)
		last_clean = now;	/* the first cleaning comes one delay after start */
	if (now - last_clean >= cfg->set.cache_cleaning_delay) {
		last_clean = now;
		for (int i = 0; i < cfg->ncaches; i++) {
			struct dlb_cache *c = cfg->caches[i];
			const struct dlb_cache_opts *o = dlb_cache_get_opts(c);
			size_t keep = (size_t)o->max_entries * (size_t)(100 - cfg->set.cache_cleaning_pct) / 100;

			if (o->keep_stale_data && cache_pools_all_down(c))
				continue;
			dlb_cache_purge_expired(c, &main_rcu, keep, now);
		}
	}
	dlb_rcu_poll(&main_rcu);
}


/* ---- reloading (docs/architecture.md#publication) ----------------------- */

/* The rules module's publish hook, once workers run: new rules, new snapshot. */
static int
rules_published(const struct dlb_ruleset *rs, struct dlb_rcu_thread *rt)
{
	const struct dlb_ruleset *prev = cfg->rules;

	cfg->rules = rs;
	if (dlb_config_publish(cfg, rt) == 0)
		return 0;
	cfg->rules = prev;
	return -1;
}

/* Listeners a reload opened or revived, until it commits (for an undo). */
static int reload_fe_opened[DLB_MAX_FRONTENDS], reload_nfe_opened;

/*
 * What a failed reload had already opened: servers (in no pool yet) are
 * retired, listeners closed again.
 */
static void
reload_undo_servers(int first_new)
{
	char why[256];

	for (int i = first_new; i < cfg->nbackends; i++)
		dlb_config_retire_backend(cfg, cfg->backends[i]);
	if (reload_nfe_opened == 0)
		return;
	for (int k = 0; k < reload_nfe_opened; k++)
		__atomic_store_n(&cfg->frontends[reload_fe_opened[k]].removed, true,
				 __ATOMIC_RELEASE);
	reload_nfe_opened = 0;
	if (dlb_daemon_sync_listeners(why, sizeof(why)) != 0)
		dlb_err("Reload: closing the listeners again: %s", why);
}

/*
 * Open the file's new listeners (and those it adds back) in every worker.
 * @return 0, or -1 with @err (what was opened is in reload_fe_opened).
 */
static int
reload_listeners(const struct dlb_config *ncfg, struct dlb_reload_plan *plan, char *err,
		 size_t errlen)
{
	char why[256];

	reload_nfe_opened = 0;
	/* a new address: free, as at startup (a listener a reload brings back may
	 * still hold its own UDP socket: not tried) */
	for (int j = 0; j < ncfg->nfrontends; j++) {
		if (plan->fe_map[j] < 0 && probe_frontend(&ncfg->frontends[j]) != 0) {
			snprintf(err, errlen, "could not open a new listener: binding socket to %s: %s",
				 ncfg->frontends[j].text, strerror(errno));
			return -1;
		}
	}
	/* a DNS over TLS listener a reload keeps (the plan refused any other
	 * change): its certificates and keys read again from their files */
	for (int j = 0; j < ncfg->nfrontends; j++) {
		const struct dlb_frontend_cfg *fe = plan->fe_map[j] >= 0 ?
						    &cfg->frontends[plan->fe_map[j]] : NULL;

		if (fe != NULL && fe->tls != NULL &&
		    dlb_tls_server_reload(fe->tls, why, sizeof(why)) != 0) {
			snprintf(err, errlen, "reloading the certificates of %s: %s", fe->text, why);
			return -1;
		}
	}
	for (int j = 0; j < ncfg->nfrontends; j++) {
		int i = plan->fe_map[j];

		if (i < 0) {
			i = cfg->nfrontends;
			cfg->frontends[i] = ncfg->frontends[j];
			cfg->frontends[i].removed = false;
			__atomic_store_n(&cfg->nfrontends, i + 1, __ATOMIC_RELEASE);
			plan->fe_map[j] = i;
		} else if (__atomic_load_n(&cfg->frontends[i].removed, __ATOMIC_RELAXED)) {
			__atomic_store_n(&cfg->frontends[i].removed, false, __ATOMIC_RELEASE);
		} else {
			continue;
		}
		reload_fe_opened[reload_nfe_opened++] = i;
	}
	if (reload_nfe_opened == 0)
		return 0;
	if (dlb_daemon_sync_listeners(why, sizeof(why)) != 0) {
		snprintf(err, errlen, "listeners: %s", why);
		return -1;
	}
	for (int k = 0; k < reload_nfe_opened; k++)
		dlb_info("Listening on %s%s", cfg->frontends[reload_fe_opened[k]].text,
			 listening_for(&cfg->frontends[reload_fe_opened[k]]));
	return 0;
}

/* Stop listening where the file no longer does; new options of kept listeners. */
static void
reload_commit_listeners(const struct dlb_config *ncfg, const struct dlb_reload_plan *plan)
{
	bool kept[DLB_MAX_FRONTENDS] = { false };
	bool changed = false;
	char why[256];

	for (int j = 0; j < ncfg->nfrontends; j++) {
		struct dlb_frontend_cfg *fe = &cfg->frontends[plan->fe_map[j]];

		kept[plan->fe_map[j]] = true;
		__atomic_store_n(&fe->max_concurrent_tcp, ncfg->frontends[j].max_concurrent_tcp,
				 __ATOMIC_RELAXED);
		__atomic_store_n(&fe->max_in_flight, ncfg->frontends[j].max_in_flight,
				 __ATOMIC_RELAXED);
	}
	for (int i = 0; i < cfg->nfrontends; i++) {
		if (kept[i] || __atomic_load_n(&cfg->frontends[i].removed, __ATOMIC_RELAXED))
			continue;
		__atomic_store_n(&cfg->frontends[i].removed, true, __ATOMIC_RELEASE);
		dlb_info("Reload: no longer listening on %s", cfg->frontends[i].text);
		changed = true;
	}
	reload_nfe_opened = 0;
	if (changed && dlb_daemon_sync_listeners(why, sizeof(why)) != 0)
		dlb_err("Reload: closing listeners: %s", why);
}

/*
 * Open the reload's new servers: every worker opens its sockets towards
 * them; they join no pool yet (dlb_config_adopt puts them in). @plan's -1
 * server entries become their indexes. @return 0, or -1 with @err.
 */
static int
reload_servers(const struct dlb_config *ncfg, struct dlb_reload_plan *plan, char *err,
	       size_t errlen)
{
	for (int j = 0; j < ncfg->nbackends; j++) {
		struct dlb_backend *be;
		char why[256];
		int rc;

		if (plan->be_map[j] >= 0)
			continue;
		be = malloc(sizeof(*be));
		if (be == NULL) {
			snprintf(err, errlen, "out of memory");
			return -1;
		}
		memcpy(be, ncfg->backends[j], sizeof(*be));
		if (be->tls != NULL)
			dlb_tls_client_ref(be->tls);	/* ncfg keeps its own */
		be->healthy = 1;
		be->removed = false;
		rc = dlb_daemon_open_backend(be, why, sizeof(why));
		if (rc < 0)
			dlb_backend_free(be);
		if (rc != 0) {
			snprintf(err, errlen, "server %s: %s", ncfg->backends[j]->addr_text, why);
			return -1;
		}
		plan->be_map[j] = be->index;
	}
	return 0;
}

/*
 * Reload (SIGHUP, reload()): evaluate the config file again in a new config
 * state against a throwaway configuration, with its rules staged; check it
 * against the running one (what a reload cannot change: the message says
 * which differ); open its new listeners and servers; build its snapshot and
 * one Lua state per worker. Only then, with nothing left to fail, adopt it:
 * one snapshot swap (settings, ACL, policies, pools' caches and members),
 * the Lua states, then the rules (staged, all chains in one swap) in the
 * same step. In-flight queries finish normally; caches keep their
 * contents. On any failure nothing is published, what was opened is closed
 * again and @err says why (file:line for Lua errors).
 */
static int
reload_config(bool in_lua, char *err, size_t errlen)
{
	struct dlb_config *ncfg = dlb_config_new();
	struct dlb_lua_conf *nlc = NULL;
	struct dlb_lua_worker *lws[DLB_MAX_WORKERS] = { NULL };
	struct dlb_ruleset *staged = NULL;
	struct dlb_snapshot *snap = NULL;
	struct dlb_ruleset *old_rules;
	struct dlb_reload_plan plan;
	int first_new = cfg->nbackends;
	const char *diff;
	int rc = -1;

	if (in_lua && nretired_lc == MAX_RETIRED_LC) {
		snprintf(err, errlen, "too many reloads within a second; try again");
		goto out;
	}
	if (ncfg == NULL || (staged = dlb_rules_stage_begin()) == NULL ||
	    (nlc = dlb_lua_conf_new(ncfg, DLB_LUA_PHASE_RELOAD)) == NULL) {
		snprintf(err, errlen, "out of memory");
		goto out;
	}
	if (dlb_lua_conf_load_file(nlc, cli.config, err, errlen) != 0)
		goto out;
	dlb_rules_stage_end();
	if (apply_cli(&cli, ncfg) != 0) {
		snprintf(err, errlen, "the command line options do not apply");
		goto out;
	}
	if ((diff = dlb_config_plan_reload(cfg, ncfg, &plan)) != NULL) {
		snprintf(err, errlen, "%s", diff);
		goto out;
	}
	if (reload_listeners(ncfg, &plan, err, errlen) != 0 ||
	    (snap = dlb_config_adopt_prepare(cfg, ncfg, &plan, err, errlen)) == NULL ||
	    reload_servers(ncfg, &plan, err, errlen) != 0)
		goto out_undo;
	dlb_lua_conf_set_plan(nlc, &plan);
	for (int i = 0; i < nworkers; i++) {
		lws[i] = dlb_luaw_new(nlc, cfg, i, err, errlen);
		if (lws[i] == NULL)
			goto out_undo;
	}
	if (dlb_lua_conf_adopt(nlc, cfg, &main_rcu, err, errlen) != 0)
		goto out_undo;

	/* nothing can fail any more: the Lua states (a worker takes its new one
	 * with the first query that sees their generation), then one snapshot
	 * swap (rules, settings, ACL, policies, pools), then the listeners */
	lua_gen++;
	for (int i = 0; i < nworkers; i++) {
		dlb_worker_give_lua(workers[i], lws[i], lua_gen);
		lws[i] = NULL;
	}
	old_rules = dlb_rules_stage_take(staged, lua_gen);
	snap->rules = staged;
	staged = NULL;
	dlb_config_adopt(cfg, ncfg, &plan, snap, &main_rcu);
	snap = NULL;
	dlb_rules_retire(old_rules, &main_rcu);
	reload_commit_listeners(ncfg, &plan);
	if (in_lua)
		retired_lc[nretired_lc++] = main_lc;	/* reload() is running in it */
	else
		dlb_lua_conf_free(main_lc);
	main_lc = nlc;
	dlb_daemon.lc = nlc;
	nlc = NULL;
	rc = 0;
	goto out;
out_undo:
	reload_undo_servers(first_new);
out:
	dlb_snapshot_free(snap);
	dlb_rules_stage_end();
	if (staged != NULL)
		dlb_rules_stage_discard(staged);
	for (int i = 0; i < nworkers; i++)
		dlb_luaw_free(lws[i]);
	dlb_lua_conf_free(nlc);
	if (ncfg != NULL)
		dlb_config_free(ncfg);
	return rc;
}

/* SIGHUP (@in_lua false) and reload() in the config state. */
static int
do_reload(bool in_lua, char *err, size_t errlen)
{
	/* systemd holds ExecReload= until READY=1 follows, success or not */
	dlb_notify_reloading();
	if (reload_config(in_lua, err, errlen) != 0) {
		dlb_err("Reload of '%s' failed, the running configuration is kept: %s", cli.config,
			err);
		dlb_notify_ready("running; the last reload failed, the configuration before it is kept");
		return -1;
	}
	dlb_notify_ready("running");
	dlb_info("Reloaded '%s': rules, Lua code, servers, pools, caches, ACL, policies and "
		 "settings replaced", cli.config);
	return 0;
}

static int
reload_hook(char *err, size_t errlen)
{
	return do_reload(true, err, errlen);
}

static void
signal_cb(struct ev_loop *loop, ev_signal *s, int revents)
{
	switch (s->signum) {
	case SIGTERM:
	case SIGINT:
		dlb_info("Received signal %d, exiting", s->signum);
		ev_break(loop, EVBREAK_ALL);
		break;
	case SIGHUP: {
		char err[1024];

		dlb_info("Received SIGHUP, reloading '%s'", cli.config);
		do_reload(false, err, sizeof(err));
		break;
	}
	case SIGUSR1:
		print_stats();
		break;
	}
}

int
main(int argc, char **argv)
{
	struct dlb_lua_conf *lc = NULL;
	char err[1024];
	struct ev_loop *loop;
	ev_timer maintenance;
	ev_signal sigs[4];
	static const int signums[4] = { SIGTERM, SIGINT, SIGHUP, SIGUSR1 };
	bool services_ok = false;
	int rc = 1;

	if (parse_cli(argc, argv, &cli) != 0)
		return 1;
	dlb_log_init(!cli.disable_syslog && !cli.check_config && !cli.client, cli.verbose);
	dlb_wire_hash_init();
	dlb_rcu_init();
	if (cli.client)
		return dlb_lua_console_client_main(cli.config, cli.client_addr, cli.execute,
						   cli.setkey);
	if (cli.setkey != NULL && dlb_lua_console_cli_key(cli.setkey, err, sizeof(err)) != 0) {
		fprintf(stderr, "%s\n", err);
		return 1;
	}
	if (dlb_rcu_register(&main_rcu) != 0) {
		fprintf(stderr, "out of memory\n");
		return 1;
	}
	signal(SIGPIPE, SIG_IGN);
	dlb_daemon.start = dlb_daemon_now();
	dlb_daemon.start_wall = (double)time(NULL);

	cfg = dlb_config_new();
	if (cfg == NULL) {
		fprintf(stderr, "out of memory\n");
		return 1;
	}
	lc = dlb_lua_conf_new(cfg, cli.check_config ? DLB_LUA_PHASE_CHECK : DLB_LUA_PHASE_CONFIG);
	main_lc = lc;
	if (lc != NULL)
		dlb_lua_conf_set_rcu(lc, &main_rcu);
	if (lc == NULL || dlb_lua_conf_load_file(lc, cli.config, err, sizeof(err)) != 0) {
		if (cli.check_config)
			printf("Error while parsing the configuration file '%s': %s\n", cli.config,
			       lc != NULL ? err : "out of memory");
		else
			dlb_err("Fatal error while loading the configuration '%s': %s", cli.config,
				lc != NULL ? err : "out of memory");
		goto out;
	}
	if (apply_cli(&cli, cfg) != 0)
		goto out;
	if (dlb_config_build_rings(cfg, NULL) != 0) {
		dlb_err("out of memory building the consistent-hashing rings");
		goto out;
	}
	if (cli.check_config) {
		printf("Configuration '%s' OK!\n", cli.config);
		rc = 0;
		goto out;
	}
	if (cfg->verbose || cli.verbose)
		dlb_log_set_verbose(true);

	for (int i = 0; i < cfg->nfrontends; i++) {
		if (probe_frontend(&cfg->frontends[i]) != 0) {
			dlb_err("Fatal error: binding socket to %s: %s", cfg->frontends[i].text,
				strerror(errno));
			goto out;
		}
	}
	for (int i = 0; i < cfg->nfrontends; i++)
		dlb_info("Listening on %s%s", cfg->frontends[i].text,
			 listening_for(&cfg->frontends[i]));	/* as dnsdist */
	if (cfg->nbackends == 0)
		dlb_warn("No downstream server configured: queries will be %s",
			 cfg->set.servfail_when_no_server ? "answered SERVFAIL" : "dropped");
	for (int i = 0; i < cfg->workers; i++) {
		workers[i] = dlb_worker_new(i, cfg);
		if (workers[i] == NULL) {
			dlb_err("Unable to start worker %d", i);
			goto out_workers;
		}
		nworkers++;
		/* its own Lua state for LuaRule/LuaAction/LuaResponseAction (lua/worker.h) */
		workers[i]->lua = dlb_luaw_new(lc, cfg, i, err, sizeof(err));
		if (workers[i]->lua == NULL) {
			dlb_err("Fatal error while building the Lua state of worker %d from '%s': %s",
				i, cli.config, err);
			goto out_workers;
		}
	}
	/* setRedis: each worker's data connection, connecting from now on (docs/fleet.md) */
	for (int i = 0; dlb_redis_settings.enabled && i < nworkers; i++) {
		char role[32];

		snprintf(role, sizeof(role), "worker %d", i);
		workers[i]->redis = dlb_redis_new(workers[i]->loop, role);
		if (workers[i]->redis == NULL) {
			dlb_err("out of memory");
			goto out_workers;
		}
		dlb_redis_start(workers[i]->redis);
	}
	if (drop_privileges(cli.uid, cli.gid) != 0)
		goto out_workers;

	cfg->be_totals = be_totals;
	cfg->lua_policy_next = cfg->set.nlua_policies % DLB_MAX_LUA_POLICIES;
	/* from now on workers read the published snapshot: the console and reloads
	 * change the builder values and publish again */
	cfg->rules = dlb_rules_current();
	if (dlb_config_publish(cfg, NULL) != 0) {
		dlb_err("out of memory");
		goto out_workers;
	}
	dlb_rules_set_publish_hook(rules_published);

	/* the initial health checks decide each backend's state before serving */
	loop = ev_default_loop(0);
	health = dlb_health_new(loop, cfg);
	if (health == NULL) {
		dlb_err("out of memory");
		goto out_workers;
	}
	dlb_health_initial(health);

	/* dnsdist's rings hold every query from the start: so does the dynamic
	 * blocks' measuring, when rules or a maintenance() may look at it */
	dlb_dyn_track_start(workers, nworkers, dlb_lua_conf_has_maintenance(lc), ev_time());
	dlb_dyn_top_start(dlb_dyn_now());

	/* Workers must not get the process signals: block them before spawning. */
	{
		sigset_t set, old;
		int started = 0;

		sigemptyset(&set);
		for (int i = 0; i < 4; i++)
			sigaddset(&set, signums[i]);
		pthread_sigmask(SIG_BLOCK, &set, &old);
		for (; started < nworkers; started++)
			if (dlb_worker_start(workers[started]) != 0)
				break;
		pthread_sigmask(SIG_SETMASK, &old, NULL);
		if (started < nworkers) {
			dlb_err("Unable to start worker thread %d", started);
			for (int i = 0; i < started; i++)
				dlb_worker_stop_join(workers[i]);
			goto out_workers;
		}
	}

	dlb_daemon.cfg = cfg;
	dlb_daemon.workers = workers;
	dlb_daemon.nworkers = nworkers;
	dlb_daemon.loop = loop;
	dlb_daemon.lc = main_lc;
	dlb_daemon.health = health;
	dlb_daemon.rcu = &main_rcu;
	dlb_daemon.running = true;
	if (dlb_redis_settings.enabled) {
		dlb_daemon.redis_ctl = dlb_redis_new(loop, "control");
		dlb_daemon.redis_sub = dlb_redis_new(loop, "pubsub");
		if (dlb_daemon.redis_ctl != NULL)
			dlb_redis_start(dlb_daemon.redis_ctl);
		if (dlb_daemon.redis_sub != NULL)
			dlb_redis_start(dlb_daemon.redis_sub);
	}
	dlb_kvstore_start(loop, &main_rcu);	/* newRedisKVStore mirrors (docs/fleet.md) */
	dlb_fleet_start(loop);	/* shared dynamic blocks, fleet view: with setRedis only */
	for (int i = 0; i < 4; i++) {
		ev_signal_init(&sigs[i], signal_cb, signums[i]);
		ev_signal_start(loop, &sigs[i]);
	}
	ev_timer_init(&maintenance, maintenance_cb, 1., 1.);
	ev_timer_start(loop, &maintenance);
	dlb_lua_conf_set_phase(lc, DLB_LUA_PHASE_RUNNING);
	dlb_lua_conf_set_reload_hook(reload_hook);
	if (dlb_daemon_start_services(err, sizeof(err)) != 0) {
		dlb_err("%s", err);
	} else {
		services_ok = true;
		dlb_info("dnslb %s running with %d worker%s", DLB_VERSION, nworkers,
			 nworkers == 1 ? "" : "s");
		/* every worker has its sockets bound and its loop started */
		dlb_notify_ready("running");
		dlb_notify_watchdog_start(loop);
		/* dnsdist in the foreground has a console on its terminal */
		if (!cli.supervised && isatty(STDIN_FILENO))
			dlb_console_local_start(loop, dlb_lua_console_eval);
		ev_run(loop, 0);
		dlb_notify_stopping();
		dlb_notify_watchdog_stop(loop);
		dlb_console_local_stop();
	}
	dlb_daemon.running = false;
	dlb_daemon_stop_services();
	ev_timer_stop(loop, &maintenance);
	dlb_lua_conf_set_reload_hook(NULL);

	for (int i = 0; i < nworkers; i++)
		dlb_worker_stop_join(workers[i]);
	for (int i = 0; i < 4; i++)
		ev_signal_stop(loop, &sigs[i]);
	dlb_fleet_stop();
	dlb_kvstore_stop();
	dlb_redis_free(dlb_daemon.redis_ctl);
	dlb_redis_free(dlb_daemon.redis_sub);
	dlb_daemon.redis_ctl = dlb_daemon.redis_sub = NULL;
	dlb_health_free(health);
	health = NULL;
	dlb_daemon.health = NULL;
	ev_loop_destroy(loop);
	dlb_info("Exiting");
	rc = services_ok ? 0 : 1;
out_workers:
	cfg->be_totals = NULL;
	dlb_health_free(health);
	for (int i = 0; i < nworkers; i++) {
		dlb_redis_free(workers[i]->redis);	/* its loop is still there */
		dlb_worker_free(workers[i]);
	}
out:
	dlb_rules_set_publish_hook(NULL);
	dlb_rules_shutdown();
	dlb_lua_conf_free(main_lc);	/* lc, or the state of the last reload */
	while (nretired_lc > 0)
		dlb_lua_conf_free(retired_lc[--nretired_lc]);
	main_lc = NULL;
	dlb_rcu_unregister(&main_rcu);	/* everything retired is freed before the caches go */
	dlb_config_free(cfg);
	fflush(stdout);
	return rc;
}
