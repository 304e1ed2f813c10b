/* A program outside the source tree, built against an installed libfarm
 * (scripts/check-install): opens a shm fabric, registers memory, closes. */
#include <stdio.h>
#include <stdlib.h>

#include <farm/farm.h>

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: %s DATA_DIR\n", argv[0]);
		return 2;
	}
	farm_fabric_attr a = {0};
	a.provider = "shm";
	a.machine_id = 1;
	a.data_dir = argv[1];
	farm_fabric *f;
	int rc = farm_fabric_open(&a, &f);
	if (rc) {
		fprintf(stderr, "farm_fabric_open: %s\n", farm_strerror(rc));
		return 1;
	}
	farm_mem *m;
	if ((rc = farm_mem_alloc(f, 1 << 20, 0, &m))) {
		fprintf(stderr, "farm_mem_alloc: %s\n", farm_strerror(rc));
		return 1;
	}
	printf("libfarm installed: provider %s, 1 MiB at %p, ofi %s\n",
	       farm_fabric_provider(f), farm_mem_addr(m),
	       farm_fabric_provider_available("ofi") ? "built" : "not built");
	farm_mem_free(m);
	farm_fabric_close(f);
	return 0;
}
