/* launch: how gem-run starts gem's programs, here or on another host: a growing argument
 * vector, fork/exec with the standard streams on given descriptors, a word quoted for a shell,
 * and the two small replaceable helpers of a remote start: the ssh command line (the user's ssh
 * words, then gem-run's options) and the watchdog a remote command runs under. It starts and
 * returns; its caller waits, reads the signals and prints. */
#ifndef GEM_LAUNCH_H
#define GEM_LAUNCH_H
#include <stdio.h>
#include <sys/types.h>

/* A NULL-terminated argument vector that grows; zero it to start. Its strings are its own. */
struct argv {
	char **v;
	int n, cap;
};
int argv_push(struct argv *a, const char *s);
int argv_pushf(struct argv *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Every string of the NULL-terminated v (NULL: none). */
int argv_pushv(struct argv *a, char *const *v);
void argv_free(struct argv *a);

/* The standard streams of a child: a descriptor each, or LAUNCH_NULL (/dev/null) or
 * LAUNCH_KEEP (gem-run's own). The child's umask, when umask_set. */
#define LAUNCH_NULL (-1)
#define LAUNCH_KEEP (-2)
struct launch_io {
	int in, out, err;
	int umask_set;
	mode_t umask;
};
/* Start argv[0] (found in PATH) with io. The child has no signal blocked and the default
 * action for SIGPIPE (the others as the caller had them), and is sent SIGTERM when gem-run dies, even by SIGKILL, which runs no
 * handler (PR_SET_PDEATHSIG): nothing it started outlives it. Descriptors gem-run opens are
 * close-on-exec (so the end of a pipe it holds never leaks into a child). 0 and *pid, or
 * GEM_EFAIL when the program cannot be started (err names it). */
int launch_spawn(char *const argv[], const struct launch_io *io, pid_t *pid, char *err);

/* s as one word of a POSIX shell's command line: as it is when it holds only characters
 * no shell treats specially, else in single quotes. */
void launch_quote(FILE *f, const char *s);

/* The command line a remote host's shell runs for argv (its words quoted), under the
 * watchdog: the command is stopped (SIGTERM) when its standard input closes, that is when its
 * ssh ends; with token, the first line of that input is handed on to the command's standard
 * input (a bearer token never on a command line). The watchdog first says "LAUNCH_REMOTE_START
 * on HOST" on stderr, which tells a connection sshd dropped before the command ran from a
 * command that failed. malloc'ed; NULL when out of memory. */
#define LAUNCH_REMOTE_START "gem-run: remote start"
char *launch_remote_cmd(int token, char *const argv[]);

/* The ssh command that runs cmd (a shell's command line) on host: ssh_words split as a shell
 * splits them ("ssh -J gw -p 2222"; no command substitution), then BatchMode, a connect
 * timeout of connect_timeout seconds and keep-alives (15 s, 4 missed: the host is gone), the
 * host and cmd. GEM_EUSAGE when ssh_words has no word or cannot be split. */
int launch_ssh_argv(const char *ssh_words, int connect_timeout, const char *host, const char *cmd,
		    struct argv *out, char *err);
#endif

/* ---- a set of children, looked after by one loop ---- */

/* A child: a program here, or one on another host under its ssh. */
struct launch_child {
	pid_t pid;          /* 0: not running (ended, or waiting to be tried again) */
	int status;         /* as a shell has it: the exit status, 128 + a signal; -1: not ended */
	const char *host;   /* NULL: here */
	char *cmd;          /* remote: the command line the host runs */
	int token;          /* remote: the set's token first on its standard input */
	int in;             /* remote: our end of its standard input; -1: closed */
	int out;            /* our end of its stdout when its first line is wanted; -1: none */
	char outfile[4096 + 64], errfile[4096 + 64]; /* where stdout goes ("": nowhere); remote: stderr */
	char line[1024];    /* its first line, once whole */
	size_t len;
	int got_line;
	off_t err_start;    /* remote: errfile's size when this try began */
	int tries;          /* remote: connections dropped before the command started */
	double retry_at;    /* remote: when to try again; 0: not waiting */
	double term_at;     /* remote: stdin closed; SIGTERM to its ssh then, if still there */
};

/* The children, and what the loop needs: the caller's signalfd (SIGCHLD and the signals that
 * stop the caller, blocked), the ssh command and its timeout, the bearer token. Zero it, then
 * set those. */
struct launch_set {
	struct launch_child **kids;
	int n, cap;
	int sigfd;
	const char *ssh;
	int ssh_timeout;
	const char *token;
	int stopping; /* the caller stops its children: none is tried again */
};

/* 1 while c has not ended (or waits to be tried again). */
int launch_running(const struct launch_child *c);
/* Start argv here with io; with outfile (NULL: io's stdout), stdout goes through a pipe the
 * loop reads: c->line gets its first line (a URL), outfile ("": nowhere) all of it. */
int launch_here(struct launch_set *s, char *const argv[], struct launch_io io, const char *outfile,
		struct launch_child **c, char *err);
/* Start argv on host under ssh and the watchdog (launch_remote_cmd), with the set's token first
 * on its standard input when token: stdout appended to outfile (NULL: errfile), stderr to
 * errfile; c->line its first line. A connection sshd drops before the command starts (ssh's
 * exit status 255, no LAUNCH_REMOTE_START, and ssh's words for it on this try) is tried again,
 * up to 6 times, backing off from 0.2 s. */
int launch_remote(struct launch_set *s, const char *host, int token, const char *outfile,
		  const char *errfile, char *const argv[], struct launch_child **c, char *err);
/* Look after the children until something happens (a child ends, a line comes, a signal) or
 * until (clock_mono's) passes: 0, the number of a signal other than SIGCHLD that came (the
 * caller's to act on), or < 0. */
int launch_pump(struct launch_set *s, double until, char *err);
/* Ask c to stop: SIGTERM here; over ssh its standard input closed, which stops the command on
 * its host (the watchdog), and SIGTERM to its ssh if it has not ended within 10 s. */
void launch_stop(struct launch_child *c);
