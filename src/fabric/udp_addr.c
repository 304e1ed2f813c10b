/*
 * The udp provider's addresses: "host:port" and "[v6host]:port" parsed into
 * a socket address and formatted back (the form a machine's card carries).
 */

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "fabric/udp_int.h"

int farm_udp_parse_addr(const char *s, struct sockaddr_storage *ss,
                        socklen_t *sl)
{
	char host[64];
	const char *colon = strrchr(s, ':');
	if (!colon || (size_t)(colon - s) >= sizeof(host))
		return -EINVAL;
	char *end;
	long port = strtol(colon + 1, &end, 10);
	if (*end || port < 0 || port > 65535 || end == colon + 1)
		return -EINVAL;
	size_t hl = (size_t)(colon - s);
	if (hl >= 2 && s[0] == '[' && s[hl - 1] == ']') {
		memcpy(host, s + 1, hl - 2);
		host[hl - 2] = 0;
	} else {
		memcpy(host, s, hl);
		host[hl] = 0;
	}
	memset(ss, 0, sizeof(*ss));
	struct sockaddr_in *a4 = (struct sockaddr_in *)ss;
	struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)ss;
	if (inet_pton(AF_INET, host, &a4->sin_addr) == 1) {
		a4->sin_family = AF_INET;
		a4->sin_port = htons((uint16_t)port);
		*sl = sizeof(*a4);
		return 0;
	}
	if (inet_pton(AF_INET6, host, &a6->sin6_addr) == 1) {
		a6->sin6_family = AF_INET6;
		a6->sin6_port = htons((uint16_t)port);
		*sl = sizeof(*a6);
		return 0;
	}
	return -EINVAL;
}

int farm_udp_format_addr(const struct sockaddr_storage *ss, char *buf,
                         size_t len)
{
	char host[INET6_ADDRSTRLEN];
	if (ss->ss_family == AF_INET) {
		const struct sockaddr_in *a = (const struct sockaddr_in *)ss;
		inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host));
		return snprintf(buf, len, "%s:%u", host, ntohs(a->sin_port));
	}
	const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)ss;
	inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof(host));
	return snprintf(buf, len, "[%s]:%u", host, ntohs(a->sin6_port));
}

/* Whether a datagram from @from comes from the admitted address @adm: the
 * same family and port, and the same host unless @adm names none (a
 * wildcard bind, whose datagrams leave from whichever address routes). */
bool farm_udp_addr_admits(const struct sockaddr_storage *adm, socklen_t al,
                          const struct sockaddr_storage *from, socklen_t fl)
{
	if (adm->ss_family != from->ss_family || al != fl)
		return false;
	if (adm->ss_family == AF_INET) {
		const struct sockaddr_in *a = (const struct sockaddr_in *)adm;
		const struct sockaddr_in *b = (const struct sockaddr_in *)from;
		return a->sin_port == b->sin_port &&
		       (a->sin_addr.s_addr == htonl(INADDR_ANY) ||
		        a->sin_addr.s_addr == b->sin_addr.s_addr);
	}
	const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)adm;
	const struct sockaddr_in6 *b = (const struct sockaddr_in6 *)from;
	return a->sin6_port == b->sin6_port &&
	       (IN6_IS_ADDR_UNSPECIFIED(&a->sin6_addr) ||
	        memcmp(&a->sin6_addr, &b->sin6_addr, sizeof(a->sin6_addr)) ==
	                0);
}
