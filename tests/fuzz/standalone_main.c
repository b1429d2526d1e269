/*
 * standalone_main.c - replay files through LLVMFuzzerTestOneInput without
 * libFuzzer (the corpus regression test under ctest). Arguments are files or
 * directories (not recursive). Exits 0 when every input ran, 1 when a path
 * could not be read; a crash ends the process as usual.
 *
 * Thread: single.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int
run_file(const char *path)
{
	FILE *f;
	uint8_t *buf;
	long sz;
	size_t got;

	f = fopen(path, "rb");
	if (f == NULL) {
		perror(path);
		return -1;
	}
	if (fseek(f, 0, SEEK_END) != 0 || (sz = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
		perror(path);
		fclose(f);
		return -1;
	}
	/* exact size, so ASan sees any read past the input */
	buf = malloc(sz > 0 ? (size_t)sz : 1);
	if (buf == NULL) {
		fclose(f);
		return -1;
	}
	got = fread(buf, 1, (size_t)sz, f);
	fclose(f);
	if (got != (size_t)sz) {
		fprintf(stderr, "%s: short read\n", path);
		free(buf);
		return -1;
	}
	LLVMFuzzerTestOneInput(buf, got);
	free(buf);
	return 0;
}

static int
run_dir(const char *dir, unsigned *count)
{
	struct dirent *de;
	DIR *d;
	int rc = 0;

	d = opendir(dir);
	if (d == NULL) {
		perror(dir);
		return -1;
	}
	while ((de = readdir(d)) != NULL) {
		char path[4096];
		struct stat st;

		if (de->d_name[0] == '.')
			continue;
		if (snprintf(path, sizeof(path), "%s/%s", dir, de->d_name) >= (int)sizeof(path))
			continue;
		if (stat(path, &st) != 0 || !S_ISREG(st.st_mode))
			continue;
		if (run_file(path) != 0)
			rc = -1;
		else
			(*count)++;
	}
	closedir(d);
	return rc;
}

int
main(int argc, char **argv)
{
	unsigned count = 0;
	int rc = 0;

	for (int i = 1; i < argc; i++) {
		struct stat st;

		if (stat(argv[i], &st) != 0) {
			perror(argv[i]);
			rc = 1;
		} else if (S_ISDIR(st.st_mode)) {
			if (run_dir(argv[i], &count) != 0)
				rc = 1;
		} else if (run_file(argv[i]) != 0) {
			rc = 1;
		} else {
			count++;
		}
	}
	printf("%u inputs replayed\n", count);
	return rc;
}
