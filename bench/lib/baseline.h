/*
 * baseline: reference figures measured in the same run as a messaging
 * benchmark, so that its figures can be reported as ratios to them.
 *
 * Every function forks one helper process (the TCP server, or the other end
 * of a shared-memory ring), measures from this process, then stops the
 * helper and reaps it before returning. The helper gets SIGKILL if the
 * thread that forked it dies (PR_SET_PDEATHSIG), and this process kills and
 * reaps it on every error path. Handshakes are a pipe (the helper says it is
 * ready, and the TCP server sends its port) and the channel itself (end of
 * stream on the socket, a sentinel on the ring); there are no sleeps.
 *
 * Each run has a short warm-up (0.1 s, less for runs under 0.4 s) that is
 * not counted. A peer that makes no progress for 5 s fails the run with
 * -ETIMEDOUT. The caller must not have SIGCHLD set to SIG_IGN (the helper
 * could then not be reaped).
 *
 * All functions return 0 or a negative errno (-EINVAL for arguments out of
 * range, -ETIMEDOUT for a stall, -EPROTO for wrong data, the helper's error
 * when it fails) and print what went wrong to stderr; *out is written only
 * on success. There is no global state, but the figures mean something only
 * when runs are made one at a time, on two otherwise idle cores.
 */
#ifndef FARM_BENCH_BASELINE_H
#define FARM_BENCH_BASELINE_H

#include <stdbool.h>
#include <stddef.h>

#define BL_TCP_MAX_PAYLOAD  65536u
#define BL_TCP_MAX_INFLIGHT 4096u
#define BL_RING_MAX_SLOTS   (1u << 20)

struct bl_result {
	double rate;   /* operations (requests or messages) per second */
	double p50_ns; /* round-trip median (0 for one-way streams) */
	double p99_ns; /* round-trip p99 (0 for one-way streams) */
};

/*
 * TCP request/response over loopback between this process and a forked
 * server process, one connection, TCP_NODELAY. @payload bytes each way
 * (1..65536). @inflight requests outstanding at once (1 = no pipelining;
 * >1: pipelined, the client keeps @inflight requests in flight, at most
 * 4096). @busy: both sides spin on non-blocking recv (MSG_DONTWAIT) instead
 * of blocking.
 *
 * The server binds 127.0.0.1 port 0 and sends the port up a pipe. It
 * replies to each request once all of it has arrived, with @payload bytes
 * (several replies that are due at once go out in one send). The client
 * tops its window up to @inflight requests as replies complete and sends
 * the new requests with one send (MSG_DONTWAIT); while a send cannot
 * proceed it waits for either direction (poll), so the two sides can never
 * block each other whatever @payload * @inflight is.
 *
 * Runs for about @seconds after a short warm-up. rate is replies completed
 * per second in that window. Latency percentiles are measured per request
 * (from just before its send to the receipt of the last byte of its reply)
 * with CLOCK_MONOTONIC; at most 1M latencies are kept (every k-th, k
 * doubling as the run grows, so they span the whole window).
 */
int bl_tcp_rr(size_t payload, unsigned inflight, bool busy, double seconds,
              struct bl_result *out);

/*
 * The best of the four TCP configurations {inflight 1, @max_inflight} x
 * {blocking, busy} by rate (two when @max_inflight is 1), each run for
 * @seconds_each; *which gets a short description like
 * "tcp busy, 16 in flight" (may be NULL; truncated to @whichlen);
 * *@single (may be NULL) gets the better of the two one-in-flight runs.
 * Fails with the first configuration that fails.
 */
int bl_tcp_best(size_t payload, unsigned max_inflight, double seconds_each,
                struct bl_result *out, char *which, size_t whichlen,
                struct bl_result *single);

/*
 * A plain shared-memory single-producer single-consumer ring between this
 * process (consumer) and a forked producer: @slots slots of 64 bytes
 * (2..1M; cache-line aligned, in a MAP_SHARED|MAP_ANONYMOUS mapping made
 * before fork), each slot begins with an 8-byte sequence word the consumer
 * polls (acquire load); the producer writes 56 payload bytes then stores
 * the sequence (release). The consumer reads the payload, then hands slots
 * back by publishing its consumed count (release) in a separate cache line
 * (128 bytes apart from anything else) that the producer reads (acquire)
 * only when its cached copy says the ring is full. One message = one slot
 * (64 B incl. the sequence word). The consumer checks every message's
 * payload. Streams for about @seconds; out->rate is messages/s counted by
 * the consumer; p50/p99 are 0. To stop, the consumer publishes a sentinel
 * count, which the producer sees once the ring is full.
 */
int bl_ring_stream(unsigned slots, double seconds, struct bl_result *out);

/*
 * Same ring, request/response: two rings of @slots slots (one each way),
 * one request in flight: this process writes a 56-byte request, the forked
 * server polls for it and writes it back as the reply. rate is round trips
 * per second; p50/p99 are per round trip (sampled as in bl_tcp_rr). To
 * stop, this process sends a sentinel request.
 */
int bl_ring_rr(unsigned slots, double seconds, struct bl_result *out);

/* bl_ring_rr with the forked server pinned to CPU @server_cpu (-1: not
 * pinned); this process stays where its caller put it. A caller that
 * measures its own request/response pinned to two CPUs measures the
 * ring on the same two: unpinned under load, the two spinning processes
 * can share a CPU and each round trip waits for a time slice. */
int bl_ring_rr_pinned(unsigned slots, double seconds, int server_cpu,
                      struct bl_result *out);

#endif /* FARM_BENCH_BASELINE_H */
