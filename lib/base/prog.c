#include "base/prog.h"

#include "base/err.h"

#include <blis.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int prog_exit(int rc)
{
	return rc == 0 ? 0 : rc == GEM_EUSAGE ? EXIT_USAGE : EXIT_JOB;
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

int prog_share_path(const char *rel, char *out, size_t cap)
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

void prog_blas_init(void)
{
	bli_thread_set_num_threads(1);
}

int prog_threads_passive(int threads, char **argv)
{
	if (threads <= 1 || getenv("OMP_WAIT_POLICY"))
		return 0;
	if (setenv("OMP_WAIT_POLICY", "passive", 1) < 0)
		return -1;
	execv("/proc/self/exe", argv);
	unsetenv("OMP_WAIT_POLICY");
	return -1;
}

void prog_print_version(const char *prog)
{
	printf("%s %s\n", prog, GEM_VERSION);
}
