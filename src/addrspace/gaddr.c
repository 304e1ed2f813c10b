/*
 * Global addresses as text (include/farm/addr.h).
 */
#include <farm/addr.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

int farm_gaddr_format(farm_gaddr a, char *buf, size_t len)
{
	if (!buf)
		return -EINVAL;
	int n = snprintf(buf, len, "r%" PRIu32 "+0x%" PRIx32,
	                 farm_gaddr_region(a), farm_gaddr_offset(a));
	if (n < 0 || (size_t)n >= len)
		return -ERANGE;
	return n;
}

/* An unsigned 32-bit number: decimal, or hex with 0x. No sign, no space. */
static const char *parse_u32(const char *s, uint32_t *out)
{
	int base = 10;
	if (s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
		base = 16;
		s += 2;
	}
	uint64_t v = 0;
	const char *p = s;
	for (;; p++) {
		int d;
		if (*p >= '0' && *p <= '9')
			d = *p - '0';
		else if (base == 16 && *p >= 'a' && *p <= 'f')
			d = *p - 'a' + 10;
		else if (base == 16 && *p >= 'A' && *p <= 'F')
			d = *p - 'A' + 10;
		else
			break;
		v = v * (uint64_t)base + (uint64_t)d;
		if (v > UINT32_MAX)
			return NULL;
	}
	if (p == s)
		return NULL;
	*out = (uint32_t)v;
	return p;
}

int farm_gaddr_parse(const char *s, farm_gaddr *out)
{
	if (!s || !out || *s != 'r')
		return -EINVAL;
	uint32_t region, off;
	const char *p = parse_u32(s + 1, &region);
	if (!p || *p != '+')
		return -EINVAL;
	p = parse_u32(p + 1, &off);
	if (!p || *p != '\0')
		return -EINVAL;
	*out = farm_gaddr_make(region, off);
	return 0;
}
