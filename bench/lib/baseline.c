/*
 * What both baselines share (baseline_int.h): a run's window, the latency
 * sampler and the helper process. The TCP baseline is baseline_tcp.c, the
 * shared-memory rings baseline_ring.c; baseline.h says what each measures.
 */
#include "baseline_int.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h> /* isfinite */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#define WARMUP_NS   (BU_NS_PER_S / 10)
#define MAX_SECONDS 3600.0

/* ---- a run's window ----------------------------------------------------- */

int bl_check_seconds(double seconds)
{
	return isfinite(seconds) && seconds > 0 && seconds <= MAX_SECONDS
	               ? 0
	               : -EINVAL;
}

void bl_durations(double seconds, uint64_t *warm, uint64_t *dur)
{
	*dur = (uint64_t)(seconds * (double)BU_NS_PER_S);
	if (*dur < 1)
		*dur = 1;
	*warm = *dur < 4 * WARMUP_NS ? *dur / 4 : WARMUP_NS;
}

/* ---- latency samples -------------------------------------------------- */

int bl_sampler_init(struct bl_sampler *s)
{
	s->v = malloc(BL_MAX_SAMPLES * sizeof(*s->v));
	s->n = 0;
	s->stride = 1;
	s->skip = 0;
	return s->v ? 0 : -ENOMEM;
}

/* Nearest rank. */
static double sampler_pct(const struct bl_sampler *s, double q)
{
	if (!s->n)
		return 0;
	double x = q * (double)s->n;
	size_t rank = (size_t)x;
	if ((double)rank < x)
		rank++;
	if (rank < 1)
		rank = 1;
	if (rank > s->n)
		rank = s->n;
	return (double)s->v[rank - 1];
}

void bl_sampler_finish(struct bl_sampler *s, struct bl_result *r)
{
	qsort(s->v, s->n, sizeof(*s->v), bu_cmp_u64);
	r->p50_ns = sampler_pct(s, 0.50);
	r->p99_ns = sampler_pct(s, 0.99);
}

/* ---- the helper process ------------------------------------------------ */

pid_t bl_spawn(bl_child_fn fn, void *arg, int *rfd)
{
	int p[2];
	if (pipe2(p, O_CLOEXEC) < 0) {
		int err = -errno;
		fprintf(stderr, BL_PFX "pipe: %s\n", strerror(errno));
		return err;
	}
	pid_t parent = getpid();
	pid_t pid = fork();
	if (pid < 0) {
		int err = -errno;
		fprintf(stderr, BL_PFX "fork: %s\n", strerror(errno));
		close(p[0]);
		close(p[1]);
		return err;
	}
	if (pid == 0) {
		close(p[0]);
		if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != parent)
			_exit(ECHILD);
		int code = fn(arg, p[1]);
		_exit(code < 0 ? -code : code > 255 ? 255 : code);
	}
	close(p[1]);
	*rfd = p[0];
	return pid;
}

int bl_reap(pid_t pid, bool kill_it)
{
	int st;
	if (kill_it)
		kill(pid, SIGKILL);
	while (waitpid(pid, &st, 0) < 0) {
		if (errno != EINTR) {
			int err = -errno;
			fprintf(stderr, BL_PFX "waitpid: %s\n",
			        strerror(errno));
			return err;
		}
	}
	if (kill_it)
		return 0;
	if (WIFEXITED(st)) {
		int code = WEXITSTATUS(st);
		if (code)
			fprintf(stderr, BL_PFX "helper process failed: %s\n",
			        strerror(code));
		return -code;
	}
	fprintf(stderr, BL_PFX "helper process killed by signal %d\n",
	        WIFSIGNALED(st) ? WTERMSIG(st) : 0);
	return -ECHILD;
}

int bl_await_child(pid_t pid, int rfd, void *msg, size_t len)
{
	int err = bu_read_full(rfd, msg, len, NULL);
	close(rfd);
	if (err == -EPIPE) {
		err = bl_reap(pid, false);
		if (!err) {
			fprintf(stderr,
			        BL_PFX "helper exited before it was ready\n");
			err = -EPIPE;
		}
		return err;
	}
	if (err) {
		fprintf(stderr, BL_PFX "reading from the helper: %s\n",
		        strerror(-err));
		bl_reap(pid, true);
	}
	return err;
}

int bl_end(pid_t pid, int err)
{
	if (err) {
		bl_reap(pid, true);
		return err;
	}
	return bl_reap(pid, false);
}
