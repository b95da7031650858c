#include "base/prog.h"

#include "base/err.h"
#include "base/fsutil.h"

#include <blis.h>
#include <cpuid.h>
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
				if (fs_is_dir(base) && try_base(base, rel, out, cap) == 0)
					return 0;
			}
		}
	}
	return try_base(GEM_SHARE, rel, out, cap);
}

/* The CPU's family as AMD numbers it (base family, plus the extended one above 0xf). */
static unsigned cpu_family(void)
{
	unsigned a, b, c, d, fam;
	if (!__get_cpuid(1, &a, &b, &c, &d))
		return 0;
	fam = (a >> 8) & 0xf;
	return fam == 0xf ? fam + ((a >> 20) & 0xff) : fam;
}

/* BLIS 0.9 tells AMD CPUs apart by family and model and knows none after Zen 3: on Zen 4 and
 * Zen 5 it runs its generic C kernels, about a tenth of the speed of its AVX-512 (skx) ones,
 * which these CPUs run. Such a CPU gets the kernels of its instructions, unless the user chose
 * with BLIS_ARCH_TYPE; BLIS reads it once, when first called, so this comes first. */
static void blas_pick_kernels(void)
{
	char id[16];
	int arch = -1;
	if (getenv("BLIS_ARCH_TYPE") || !__builtin_cpu_is("amd") || cpu_family() < 0x19)
		return;
	if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
	    __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl"))
		arch = BLIS_ARCH_SKX;
	else if (cpu_family() > 0x19 && __builtin_cpu_supports("avx2") &&
		 __builtin_cpu_supports("fma"))
		arch = BLIS_ARCH_HASWELL;
	if (arch < 0)
		return;
	snprintf(id, sizeof id, "%d", arch);
	setenv("BLIS_ARCH_TYPE", id, 0);
}

void prog_blas_init(void)
{
	blas_pick_kernels();
	bli_thread_set_num_threads(1);
}

const char *prog_blas_kernels(void)
{
	return bli_arch_string(bli_arch_query_id());
}

void prog_print_version(const char *prog)
{
	printf("%s %s\n", prog, GEM_VERSION);
}
