/*
 * daemon.c - the control plane's view of the running daemon (daemon.h).
 */
#include "dnslb/core/daemon.h"

#include <stdio.h>
#include <time.h>

struct dlb_daemon dlb_daemon;

#define MAX_SERVICES 8
static const struct dlb_service *services[MAX_SERVICES];
static int nservices, nstarted;

void
dlb_daemon_add_service(const struct dlb_service *s)
{
	for (int i = 0; i < nservices; i++)
		if (services[i] == s)
			return;
	if (nservices < MAX_SERVICES)
		services[nservices++] = s;
}

int
dlb_daemon_start_services(char *err, size_t errlen)
{
	for (nstarted = 0; nstarted < nservices; nstarted++) {
		if (services[nstarted]->start(dlb_daemon.loop, err, errlen) != 0) {
			dlb_daemon_stop_services();
			return -1;
		}
	}
	return 0;
}

void
dlb_daemon_stop_services(void)
{
	while (nstarted > 0) {
		const struct dlb_service *s = services[--nstarted];

		if (s->stop != NULL)
			s->stop();
	}
}

double
dlb_daemon_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}
