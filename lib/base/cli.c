#include "base/cli.h"

#include "base/err.h"

#include <blis.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int cli_double(const char *s, double min, double max, double *out)
{
	char *end;
	double v;
	if (!s || !*s)
		return -1;
	errno = 0;
	v = strtod(s, &end);
	if (errno || *end || !isfinite(v) || v < min || v > max)
		return -1;
	*out = v;
	return 0;
}

int cli_float(const char *s, double min, double max, float *out)
{
	double v;
	if (cli_double(s, min, max, &v))
		return -1;
	*out = (float)v;
	return 0;
}

int cli_long(const char *s, long min, long max, long *out)
{
	char *end;
	long v;
	if (!s || !*s)
		return -1;
	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || *end || v < min || v > max)
		return -1;
	*out = v;
	return 0;
}

int cli_u64(const char *s, uint64_t *out)
{
	char *end;
	unsigned long long v;
	if (!s || !*s || *s == '-')
		return -1;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || *end)
		return -1;
	*out = v;
	return 0;
}

static int is_dir(const char *p)
{
	struct stat st;
	return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static int try_base(const char *base, const char *rel, char *out, size_t cap)
{
	struct stat st;
	int n = snprintf(out, cap, "%s/%s", base, rel);
	return n > 0 && (size_t)n < cap && stat(out, &st) == 0 ? 0 : -1;
}

int cli_share_path(const char *rel, char *out, size_t cap)
{
	const char *env = getenv("GEM_SHARE_DIR");
	char exe[PATH_MAX], base[PATH_MAX + 32];
	ssize_t n;
	if (env && *env && try_base(env, rel, out, cap) == 0)
		return 0;
	n = readlink("/proc/self/exe", exe, sizeof exe - 1);
	if (n > 0) {
		char *slash;
		exe[n] = 0;
		slash = strrchr(exe, '/');
		if (slash) {
			*slash = 0;
			/* bin/gem-x in a checkout, or build/san/bin/gem-x under SANITIZE=1 */
			static const char *ups[] = {"/../share/gem", "/../../../share/gem"};
			for (size_t i = 0; i < sizeof ups / sizeof *ups; i++) {
				snprintf(base, sizeof base, "%s%s", exe, ups[i]);
				if (is_dir(base) && try_base(base, rel, out, cap) == 0)
					return 0;
			}
		}
	}
	return try_base(GEM_SHARE, rel, out, cap);
}

void cli_blas_init(void)
{
	bli_thread_set_num_threads(1);
}

int cli_threads_passive(int threads, char **argv)
{
	if (threads <= 1 || getenv("OMP_WAIT_POLICY"))
		return 0;
	if (setenv("OMP_WAIT_POLICY", "passive", 1) < 0)
		return -1;
	execv("/proc/self/exe", argv);
	unsetenv("OMP_WAIT_POLICY");
	return -1;
}

double cli_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

double cli_wall(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void cli_print_version(const char *prog)
{
	printf("%s %s\n", prog, GEM_VERSION);
}

int cli_read_token(const char *file, char **token, char *err)
{
	char buf[4096];
	FILE *f = fopen(file, "r");
	size_t n;
	if (!f)
		return gem_errf(err, GEM_EUSAGE, "%s: %s", file, strerror(errno));
	n = fgets(buf, sizeof buf, f) ? strcspn(buf, "\r\n") : 0;
	fclose(f);
	if (n == 0)
		return gem_errf(err, GEM_EUSAGE, "%s: no token on the first line", file);
	buf[n] = 0;
	if (!(*token = strdup(buf)))
		return gem_errf(err, GEM_ENOMEM, "out of memory");
	return 0;
}

int cli_hostport(const char *arg, char *host, size_t cap, int *port)
{
	const char *colon = strrchr(arg, ':');
	long p;
	size_t hl;
	if (!colon || cli_long(colon + 1, 0, 65535, &p))
		return -1;
	hl = (size_t)(colon - arg);
	if (hl >= 2 && arg[0] == '[' && arg[hl - 1] == ']') {
		arg++;
		hl -= 2;
	}
	if (hl >= cap)
		return -1;
	if (hl == 0)
		snprintf(host, cap, "127.0.0.1");
	else
		snprintf(host, cap, "%.*s", (int)hl, arg);
	*port = (int)p;
	return 0;
}

const char *cli_num(char *buf, size_t cap, const char *fmt, double v)
{
	if (isfinite(v))
		snprintf(buf, cap, fmt, v);
	else
		snprintf(buf, cap, "n/a");
	return buf;
}

int cli_level_force(int *forced, int have, int level)
{
	int was = cli_level(forced, have);
	if (level >= 0)
		*forced = level < have ? level : have;
	return was;
}

int cli_level(const int *forced, int have)
{
	return *forced >= 0 ? *forced : have;
}
