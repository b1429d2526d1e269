/*
 * Small helpers shared by the perf/ programs (header-only so each program
 * stays one self-contained translation unit).
 */
#ifndef DLB_PERF_PERFUTIL_H
#define DLB_PERF_PERFUTIL_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>

/* Parse "a.b.c.d:port" or "[v6]:port" into @ss.  @return 0, or -1 if malformed. */
static inline int
parse_addr(const char *s, struct sockaddr_storage *ss, socklen_t *len)
{
	char host[128];
	const char *colon, *port;

	memset(ss, 0, sizeof(*ss));
	if (s[0] == '[') {
		const char *end = strchr(s, ']');
		if (end == NULL || end[1] != ':' || (size_t)(end - s - 1) >= sizeof(host))
			return -1;
		memcpy(host, s + 1, (size_t)(end - s - 1));
		host[end - s - 1] = '\0';
		port = end + 2;
	} else {
		colon = strrchr(s, ':');
		if (colon == NULL || (size_t)(colon - s) >= sizeof(host))
			return -1;
		memcpy(host, s, (size_t)(colon - s));
		host[colon - s] = '\0';
		port = colon + 1;
	}
	int p = atoi(port);
	if (p <= 0 || p > 65535)
		return -1;
	struct sockaddr_in *in4 = (struct sockaddr_in *)ss;
	struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ss;
	if (inet_pton(AF_INET, host, &in4->sin_addr) == 1) {
		in4->sin_family = AF_INET;
		in4->sin_port = htons((uint16_t)p);
		*len = sizeof(*in4);
		return 0;
	}
	if (inet_pton(AF_INET6, host, &in6->sin6_addr) == 1) {
		in6->sin6_family = AF_INET6;
		in6->sin6_port = htons((uint16_t)p);
		*len = sizeof(*in6);
		return 0;
	}
	return -1;
}

/* Raise the soft limit on open files to the hard one (programs holding many connections). */
static inline void
raise_nofile(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
}

#endif
