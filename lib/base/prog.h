/* prog: what every gem program sets up around its getopt_long loop and how it ends: exit
 * statuses, where the shared files (model specs, scripts) are, one BLIS thread, --version.
 * The functions return 0 or -1; the program decides what to print. */
#ifndef GEM_PROG_H
#define GEM_PROG_H
#include <stdatomic.h>
#include <stddef.h>

/* Exit statuses of every program: success, failure of the job, bad usage. */
enum { EXIT_JOB = 1, EXIT_USAGE = 2 };

/* The exit status for a library return code: 0 → 0, GEM_EUSAGE → EXIT_USAGE, any other
 * failure → EXIT_JOB. */
int prog_exit(int rc);

/* The flag a program's signal handler raises and its loops read. The kernel runs the handler
 * on any thread that does not block the signal (an HTTP thread, a matmul helper), and a
 * volatile sig_atomic_t is only safe to share with the thread it interrupted; a lock-free
 * atomic is safe to write in a handler on one thread and read on another. */
typedef atomic_int prog_stop_flag;
_Static_assert(ATOMIC_INT_LOCK_FREE == 2, "a signal handler may only touch lock-free atomics");

/* Find share/gem/<rel>: $GEM_SHARE_DIR, then ../share/gem beside the executable (a build
 * tree), then the installed GEM_SHARE. Writes the path into out; -1 if none exists. */
int prog_share_path(const char *rel, char *out, size_t cap);

/* One BLIS thread per process: parallelism comes from processes (doc/design.md); and on a CPU
 * BLIS 0.9 does not know, the kernels of its instructions rather than generic C. Before any
 * other BLIS call. */
void prog_blas_init(void);
/* The name of the kernels BLIS runs ("skx", "zen3", "generic", ...). */
const char *prog_blas_kernels(void);
/* Print "PROG VERSION" on stdout, as --version does. */
void prog_print_version(const char *prog);
#endif
