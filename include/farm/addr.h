/*
 * libfarm global addresses.
 *
 * A global address is 64 bits: the high 32 bits name a region, the low 32
 * bits are a byte offset inside it. Region id 0 is never allocated, so the
 * all-zero address FARM_GADDR_NULL is never a valid object address.
 * Regions are a power of two in size (include/farm/region.h), so an
 * address is valid for a cluster only when its offset is below that size.
 */
#ifndef FARM_ADDR_H
#define FARM_ADDR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <farm/error.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef uint64_t farm_gaddr;

#define FARM_GADDR_NULL ((farm_gaddr)0)
/* Region ids run from 1 to FARM_REGION_ID_MAX. */
#define FARM_REGION_ID_NONE 0u
#define FARM_REGION_ID_MAX  0xfffffffeu
/* Longest text farm_gaddr_format() writes, with its NUL. */
#define FARM_GADDR_STRLEN 24

static inline farm_gaddr farm_gaddr_make(uint32_t region, uint32_t offset)
{
	return ((farm_gaddr)region << 32) | offset;
}
static inline uint32_t farm_gaddr_region(farm_gaddr a)
{
	return (uint32_t)(a >> 32);
}
static inline uint32_t farm_gaddr_offset(farm_gaddr a)
{
	return (uint32_t)a;
}

/*
 * farm_gaddr_valid() - true when @a names a region id in range and an offset
 * that, with @len bytes after it, stays inside a region of @region_size
 * bytes (a power of two). @len 0 checks the offset alone.
 */
static inline bool farm_gaddr_valid(farm_gaddr a, uint64_t len,
                                    uint64_t region_size)
{
	uint32_t r = farm_gaddr_region(a);
	uint64_t off = farm_gaddr_offset(a);
	if (r == FARM_REGION_ID_NONE || r > FARM_REGION_ID_MAX)
		return false;
	if (off >= region_size || len > region_size - off)
		return false;
	return true;
}

/*
 * farm_gaddr_format() - write @a as "r<region>+0x<offset>" into @buf.
 * Returns the length written (without the NUL), or -ERANGE when @len is
 * too small (FARM_GADDR_STRLEN always suffices).
 */
FARM_API int farm_gaddr_format(farm_gaddr a, char *buf, size_t len);
/*
 * farm_gaddr_parse() - read the form farm_gaddr_format() writes (offset in
 * hex with 0x, or decimal). Returns 0, or -EINVAL on any other text.
 */
FARM_API FARM_MUST_CHECK int farm_gaddr_parse(const char *s, farm_gaddr *out);

#ifdef __cplusplus
}
#endif
#endif /* FARM_ADDR_H */
