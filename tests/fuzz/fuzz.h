/*
 * fuzz.h - what the fuzz targets share: libFuzzer's entry point and CHECK,
 * an assertion that holds in release builds too (a failed one aborts, which
 * libFuzzer and the corpus replay under ctest both report).
 */
#ifndef DNSLB_TESTS_FUZZ_H
#define DNSLB_TESTS_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(x)			\
	do {				\
		if (!(x))		\
			abort();	\
	} while (0)

#endif
