/*
 * Without clang's libFuzzer: a main() that feeds every file of the
 * directories (or files) named on the command line to the harness's
 * LLVMFuzzerTestOneInput once, so the seed corpus and every regression
 * input still run in `make check`. Exits 0 when all were replayed (a
 * decoder that crashes or aborts fails the test by itself).
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
/* Harnesses that define it (fuzz_quiet.h) get it called first. */
__attribute__((weak)) int LLVMFuzzerInitialize(int *argc, char ***argv);

static int replay_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	if (!f) {
		perror(path);
		return -1;
	}
	uint8_t *buf = NULL;
	size_t len = 0, cap = 0;
	for (;;) {
		if (len == cap) {
			cap = cap ? cap * 2 : 4096;
			uint8_t *nb = realloc(buf, cap);
			if (!nb) {
				free(buf);
				fclose(f);
				return -1;
			}
			buf = nb;
		}
		size_t r = fread(buf + len, 1, cap - len, f);
		if (!r)
			break;
		len += r;
	}
	fclose(f);
	LLVMFuzzerTestOneInput(buf, len);
	free(buf);
	return 0;
}

int main(int argc, char **argv)
{
	unsigned n = 0;
	if (LLVMFuzzerInitialize)
		LLVMFuzzerInitialize(&argc, &argv);
	for (int i = 1; i < argc; i++) {
		struct stat st;
		if (stat(argv[i], &st)) {
			perror(argv[i]);
			return 1;
		}
		if (!S_ISDIR(st.st_mode)) {
			if (replay_file(argv[i]))
				return 1;
			n++;
			continue;
		}
		DIR *d = opendir(argv[i]);
		if (!d) {
			perror(argv[i]);
			return 1;
		}
		struct dirent *e;
		while ((e = readdir(d))) {
			if (e->d_name[0] == '.')
				continue;
			char p[4096];
			snprintf(p, sizeof(p), "%s/%s", argv[i], e->d_name);
			if (replay_file(p)) {
				closedir(d);
				return 1;
			}
			n++;
		}
		closedir(d);
	}
	printf("replayed %u inputs (built without libFuzzer)\n", n);
	return 0;
}
