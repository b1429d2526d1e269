/*
 * fuzz.h - what the fuzz targets share: libFuzzer's entry point and CHECK,
 * an assertion that holds in release builds too (a failed one aborts, which
 * libFuzzer and the corpus replay under ctest both report).
 */
#ifndef DNSLB_TESTS_FUZZ_H
#define DNSLB_TESTS_FUZZ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(x)			\
	do {				\
		if (!(x))		\
			abort();	\
	} while (0)

/*
 * The input of the targets that take a query and a second message (a
 * backend's answer, a value from Redis): a control byte, the query's length
 * (2 bytes, big endian), the query, then the rest. @return false if @data is
 * shorter than that.
 */
static inline bool
fuzz_split(const uint8_t *data, size_t size, uint8_t *ctl, const uint8_t **query, size_t *qlen,
	   const uint8_t **rest, size_t *rlen)
{
	if (size < 3)
		return false;
	*ctl = data[0];
	*qlen = (size_t)data[1] << 8 | data[2];
	if (*qlen > size - 3)
		return false;
	*query = data + 3;
	*rest = *query + *qlen;
	*rlen = size - 3 - *qlen;
	return true;
}

#endif
