#include "base/log.h"

#include "base/err.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *log_prog = "gem";
static enum log_level log_threshold = LOG_INFO;
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static int log_erase; /* a progress line is refreshed in place on stderr */

void log_over_line(int on)
{
	log_erase = on;
}

int log_init(const char *progname, char *err)
{
	static const char *const levels[] = {"debug", "info", "warn", "error"};
	const char *slash = strrchr(progname, '/');
	const char *lv = getenv("GEM_LOG");
	log_prog = slash ? slash + 1 : progname;
	if (!lv || !*lv)
		return 0;
	for (size_t i = 0; i < sizeof levels / sizeof *levels; i++)
		if (!strcmp(lv, levels[i])) {
			log_threshold = (enum log_level)i;
			return 0;
		}
	return gem_err_unknown(err, GEM_EUSAGE, "GEM_LOG level", lv, levels,
			       sizeof levels / sizeof *levels);
}

/* -q: warnings and errors only, unless GEM_LOG=debug asked for every message (a trace wins) */
void log_quiet(void)
{
	if (log_threshold == LOG_INFO)
		log_threshold = LOG_WARN;
}

void log_msg(enum log_level level, const char *fmt, ...)
{
	static const char *names[] = {"debug: ", "", "warning: ", "error: "};
	va_list ap;
	if (level < log_threshold)
		return;
	pthread_mutex_lock(&log_lock);
	if (log_erase)
		fputs("\r\033[K", stderr);
	fprintf(stderr, "%s: %s", log_prog, names[level]);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	pthread_mutex_unlock(&log_lock);
}
