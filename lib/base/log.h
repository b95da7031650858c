/* log: the one place libgem and the programs write diagnostics (stderr). Messages are
 * prefixed with the program name; GEM_LOG=debug|info|warn|error sets the threshold. */
#ifndef GEM_LOG_H
#define GEM_LOG_H

enum log_level { LOG_DEBUG, LOG_INFO, LOG_WARN, LOG_ERROR };

/* The program's name for the prefix, and the threshold from GEM_LOG (unset or empty: info);
 * GEM_EUSAGE with a message in err when GEM_LOG is set to no level. */
int log_init(const char *progname, char *err);
/* -q: no informational messages (warnings and errors still appear), whatever GEM_LOG says. */
void log_quiet(void);
void log_msg(enum log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A line is refreshed in place on stderr (a terminal's progress line): each message erases it
 * first, and the line is drawn again under the message at its next refresh. */
void log_over_line(int on);
#define log_debug(...) log_msg(LOG_DEBUG, __VA_ARGS__)
#define log_info(...) log_msg(LOG_INFO, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_WARN, __VA_ARGS__)
#define log_error(...) log_msg(LOG_ERROR, __VA_ARGS__)
#endif
