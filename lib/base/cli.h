/* cli: what every gem program needs around its getopt_long loop: strict number parsing, where
 * the shared files (model specs, scripts) are, one BLIS thread, and a monotonic clock. The
 * functions return 0 or -1; the program decides what to print and how to exit. */
#ifndef GEM_CLI_H
#define GEM_CLI_H
#include <stddef.h>
#include <stdint.h>

/* The level of a set of kernels (0 portable, higher ones faster, as the CPU has them) that a test
 * forces in *forced (-1: none) with level (-1 only asks); have is what the CPU has, and a level
 * above it becomes have. Returns the level in use before. */
int cli_level_force(int *forced, int have, int level);
/* The level in use: *forced's, or have. */
int cli_level(const int *forced, int have);

/* Exit statuses of every program: success, failure of the job, bad usage. */
enum { EXIT_JOB = 1, EXIT_USAGE = 2 };

/* Parse a whole string as a number within [min, max]; trailing junk, NaN, overflow → -1. */
int cli_double(const char *s, double min, double max, double *out);
int cli_float(const char *s, double min, double max, float *out);
int cli_long(const char *s, long min, long max, long *out);
int cli_u64(const char *s, uint64_t *out);

/* Parse HOST:PORT, [V6]:PORT or :PORT (host 127.0.0.1) into host (cap bytes) and port;
 * -1 when it is not of that form or the host does not fit. */
int cli_hostport(const char *arg, char *host, size_t cap, int *port);

/* Find share/gem/<rel>: $GEM_SHARE_DIR, then ../share/gem beside the executable (a build
 * tree), then the installed GEM_SHARE. Writes the path into out; -1 if none exists. */
int cli_share_path(const char *rel, char *out, size_t cap);

/* One BLIS thread per process: parallelism comes from processes (doc/design.md). */
void cli_blas_init(void);
/* For threads > 1, before the program has done anything: BLIS's OpenMP runtime (libgomp) reads
 * OMP_WAIT_POLICY when it is loaded, before main, and by default its idle threads spin, which
 * on a core another job holds starves the thread they wait for (doc/design.md). Unless the
 * environment sets it, set OMP_WAIT_POLICY=passive and execute the program again with the same
 * arguments (argv, NULL-terminated, as main got them, getopt's reordering included); returns
 * only when it did not (threads 1, the variable set, or the exec failed: -1). */
int cli_threads_passive(int threads, char **argv);

/* Seconds from a monotonic clock, and wall-clock seconds since the epoch. */
double cli_now(void);
double cli_wall(void);

/* Read a bearer token: the first line of FILE, without its newline; empty is an error. */
int cli_read_token(const char *file, char **token, char *err);

/* v as fmt (one double conversion) writes it into buf, or "n/a" when v is not finite (a loss
 * before the first step): no "-nan" in a message. Returns buf. */
const char *cli_num(char *buf, size_t cap, const char *fmt, double v);

/* Print "PROG VERSION" on stdout, as --version does. */
void cli_print_version(const char *prog);
#endif
