/*
 * doh_probe.c - dnslb's DoH request reader (dnslb/frontend/doh_req.c) on one
 * request, for tests/diff/test_doh_reader.py, which asks Debian's dnsdist
 * 1.7.3 the same: URLs "/dns-query" and "/other/", exactPathMatching on.
 *
 *   doh_probe METHOD PATH [BODY-FILE]
 *
 * Prints the HTTP status, a newline and the body dnsdist would send for a
 * refusal (nothing after the status for a query that goes on to the
 * pipeline, whose answer the reader does not make).
 */
#include <stdio.h>
#include <string.h>

#include "dnslb/frontend/doh_req.h"

int
main(int argc, char **argv)
{
	static const char *const urls[] = { "/dns-query", "/other/" };
	const struct dlb_doh_paths ep = { urls, 2, true };
	static uint8_t body[70000], out[65535];
	size_t blen = 0, n, qlen;
	char norm[4096];
	enum dlb_doh_verdict v;

	if (argc < 3)
		return 2;
	if (argc > 3) {
		FILE *f = fopen(argv[3], "rb");

		if (f == NULL)
			return 2;
		blen = fread(body, 1, sizeof(body), f);
		fclose(f);
	}
	n = dlb_doh_normalize(argv[2], strlen(argv[2]), norm, sizeof(norm));
	if (n == 0 || !dlb_doh_route(&ep, norm, n))
		v = DLB_DOH_NOT_FOUND;
	else if (!dlb_doh_exact(&ep, norm, n))
		v = DLB_DOH_NO_ENDPOINT;
	else
		v = dlb_doh_query(argv[1], strlen(argv[1]), argv[2], strlen(argv[2]), body, blen, out,
				  sizeof(out), &qlen);
	printf("%d\n%s", dlb_doh_status(v), v == DLB_DOH_QUERY ? "" : dlb_doh_text(v));
	return 0;
}
