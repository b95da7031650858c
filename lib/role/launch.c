#define _GNU_SOURCE
#include "role/launch.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <wordexp.h>

#include "base/clock.h"
#include "base/err.h"
#include "base/fsutil.h"

int argv_push(struct argv *a, const char *s)
{
	if (a->n + 2 > a->cap) {
		int cap = a->cap ? 2 * a->cap : 16;
		char **v = realloc(a->v, (size_t)cap * sizeof *v);
		if (!v)
			return GEM_ENOMEM;
		a->v = v;
		a->cap = cap;
	}
	if (!(a->v[a->n] = strdup(s)))
		return GEM_ENOMEM;
	a->v[++a->n] = NULL;
	return 0;
}

int argv_pushf(struct argv *a, const char *fmt, ...)
{
	char *s;
	va_list ap;
	int rc;
	va_start(ap, fmt);
	rc = vasprintf(&s, fmt, ap);
	va_end(ap);
	if (rc < 0)
		return GEM_ENOMEM;
	rc = argv_push(a, s);
	free(s);
	return rc;
}

int argv_pushv(struct argv *a, char *const *v)
{
	for (; v && *v; v++)
		if (argv_push(a, *v) < 0)
			return GEM_ENOMEM;
	return 0;
}

void argv_free(struct argv *a)
{
	for (int i = 0; i < a->n; i++)
		free(a->v[i]);
	free(a->v);
	*a = (struct argv){0};
}

/* In the child: fd onto target (LAUNCH_NULL: /dev/null; LAUNCH_KEEP: left as it is). */
static int child_stream(int fd, int target, int flags)
{
	if (fd == LAUNCH_KEEP)
		return 0;
	if (fd == LAUNCH_NULL) {
		int nfd = open("/dev/null", flags);
		if (nfd < 0)
			return -1;
		if (nfd != target && (dup2(nfd, target) < 0 || close(nfd) < 0))
			return -1;
		return 0;
	}
	if (fd == target)
		return fcntl(fd, F_SETFD, 0); /* close-on-exec off */
	return dup2(fd, target) < 0 ? -1 : 0;
}

/* In the child, after fork: everything but the exec; -1 (errno set) on failure. */
static int child_setup(const struct launch_io *io, pid_t parent)
{
	sigset_t none;
	sigemptyset(&none);
	/* gem-run's own: it blocks the signals it reads and ignores SIGPIPE; a signal ignored
	 * when gem-run started (SIGINT in a background job) stays ignored, as a shell has it */
	signal(SIGPIPE, SIG_DFL);
	sigprocmask(SIG_SETMASK, &none, NULL);
	/* gem-run gone (even killed outright): its children go too; and if it went before
	 * this line, at once */
	if (prctl(PR_SET_PDEATHSIG, SIGTERM) < 0 || getppid() != parent)
		_exit(1);
	if (io->umask_set)
		umask(io->umask);
	/* stdout and stderr before stdin: a descriptor 0 passed for one of them is still the
	 * caller's when it is duplicated */
	if (child_stream(io->out, 1, O_WRONLY) < 0 || child_stream(io->err, 2, O_WRONLY) < 0 ||
	    child_stream(io->in, 0, O_RDONLY) < 0)
		return -1;
	return 0;
}

int launch_spawn(char *const argv[], const struct launch_io *io, pid_t *pid, char *err)
{
	int fds[2], e = 0;
	pid_t parent = getpid(), p;
	ssize_t got;
	if (pipe2(fds, O_CLOEXEC) < 0)
		return gem_errf(err, GEM_EFAIL, "pipe: %s", strerror(errno));
	if ((p = fork()) < 0) {
		e = errno;
		close(fds[0]);
		close(fds[1]);
		return gem_errf(err, GEM_EFAIL, "cannot start %s: %s", argv[0], strerror(e));
	}
	if (p == 0) {
		close(fds[0]);
		if (child_setup(io, parent) == 0)
			execvp(argv[0], argv);
		e = errno ? errno : EINVAL;
		if (write(fds[1], &e, sizeof e) < 0)
			_exit(127);
		_exit(127);
	}
	close(fds[1]);
	/* the exec closed the pipe (it worked), or the child wrote why it did not */
	do
		got = read(fds[0], &e, sizeof e);
	while (got < 0 && errno == EINTR);
	close(fds[0]);
	*pid = p;
	if (got == (ssize_t)sizeof e)
		return gem_errf(err, GEM_EFAIL, "cannot start %s: %s", argv[0], strerror(e));
	return 0;
}

void launch_quote(FILE *f, const char *s)
{
	const char *safe = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_@%+=:,./-";
	if (*s && strspn(s, safe) == strlen(s)) {
		fputs(s, f);
		return;
	}
	fputc('\'', f);
	for (; *s; s++)
		if (*s == '\'')
			fputs("'\\''", f);
		else
			fputc(*s, f);
	fputc('\'', f);
}

/* The watchdog (sh): with --token, the first line of its standard input goes to the command's;
 * then it waits for the command, and stops it when that input closes. No single quote in it:
 * it travels in single quotes. */
static const char watchdog[] =
	"t=\n"
	"if [ \"$1\" = --token ]; then shift; IFS= read -r t || exit 1; fi\n"
	"echo \"" LAUNCH_REMOTE_START " on $(uname -n)\" >&2\n"
	"exec 3<&0\n"
	"if [ -n \"$t\" ]; then printf \"%s\\n\" \"$t\" | \"$@\" 3<&- & else \"$@\" </dev/null 3<&- & fi\n"
	"p=$!\n"
	"{ cat <&3 >/dev/null 2>&1; kill -TERM $p 2>/dev/null; } &\n"
	"w=$!\n"
	"exec 3<&-\n"
	"wait $p\n"
	"s=$?\n"
	"kill $w 2>/dev/null\n"
	"exit $s";

char *launch_remote_cmd(int token, char *const argv[])
{
	char *s = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&s, &len);
	if (!f)
		return NULL;
	fprintf(f, "exec sh -c '%s' gem-remote", watchdog);
	if (token)
		fputs(" --token", f);
	for (; *argv; argv++) {
		fputc(' ', f);
		launch_quote(f, *argv);
	}
	if (fclose(f) != 0) {
		free(s);
		return NULL;
	}
	return s;
}

int launch_ssh_argv(const char *ssh_words, int connect_timeout, const char *host, const char *cmd,
		    struct argv *out, char *err)
{
	wordexp_t w;
	int rc = wordexp(ssh_words, &w, WRDE_NOCMD);
	if (rc != 0) {
		if (rc == WRDE_NOSPACE)
			wordfree(&w);
		return gem_errf(err, GEM_EUSAGE, "--ssh (or GEM_SSH): cannot split \"%s\" into words",
				ssh_words);
	}
	if (w.we_wordc == 0) {
		wordfree(&w);
		return gem_errf(err, GEM_EUSAGE, "--ssh (or GEM_SSH): no command given");
	}
	rc = argv_pushv(out, w.we_wordv);
	wordfree(&w);
	if (rc < 0 || argv_push(out, "-o") < 0 || argv_push(out, "BatchMode=yes") < 0 ||
	    argv_push(out, "-o") < 0 || argv_pushf(out, "ConnectTimeout=%d", connect_timeout) < 0 ||
	    argv_push(out, "-o") < 0 || argv_push(out, "ServerAliveInterval=15") < 0 ||
	    argv_push(out, "-o") < 0 || argv_push(out, "ServerAliveCountMax=4") < 0 ||
	    argv_push(out, host) < 0 || argv_push(out, cmd) < 0)
		return gem_errf(err, GEM_ENOMEM, "out of memory");
	return 0;
}

/* ---- a set of children ---- */

static struct launch_child *child_new(struct launch_set *s)
{
	struct launch_child *c = calloc(1, sizeof *c);
	if (!c)
		return NULL;
	if (s->n == s->cap) {
		int cap = s->cap ? 2 * s->cap : 32;
		struct launch_child **k = realloc(s->kids, (size_t)cap * sizeof *k);
		if (!k) {
			free(c);
			return NULL;
		}
		s->kids = k;
		s->cap = cap;
	}
	*c = (struct launch_child){.status = -1, .in = -1, .out = -1};
	s->kids[s->n++] = c;
	return c;
}

int launch_running(const struct launch_child *c)
{
	return c->status < 0;
}

/* Start c here: argv with its streams io; want_line: stdout into a pipe the loop reads. */
static int start_here(struct launch_child *c, char *const argv[], struct launch_io io, int want_line,
		      char *err)
{
	int p[2] = {-1, -1};
	if (want_line) {
		if (pipe2(p, O_CLOEXEC) < 0)
			return gem_errf(err, GEM_EFAIL, "pipe: %s", strerror(errno));
		io.out = p[1];
	}
	if (launch_spawn(argv, &io, &c->pid, err) < 0) {
		if (want_line) {
			close(p[0]);
			close(p[1]);
		}
		return GEM_EFAIL;
	}
	if (want_line) {
		close(p[1]);
		c->out = p[0];
		fcntl(c->out, F_SETFL, O_NONBLOCK);
	}
	return 0;
}

/* (Re)start remote c: its ssh, with a pipe on its standard input (the token first). */
static int start_remote(struct launch_set *s, struct launch_child *c, char *err)
{
	struct argv a = {0};
	struct stat st;
	int in[2], efd, rc;
	if ((rc = launch_ssh_argv(s->ssh, s->ssh_timeout, c->host, c->cmd, &a, err)) < 0)
		return rc;
	c->err_start = stat(c->errfile, &st) == 0 ? st.st_size : 0;
	if ((efd = open(c->errfile, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644)) < 0) {
		argv_free(&a);
		return gem_errf(err, GEM_EFAIL, "%s: %s", c->errfile, strerror(errno));
	}
	if (pipe2(in, O_CLOEXEC) < 0) {
		close(efd);
		argv_free(&a);
		return gem_errf(err, GEM_EFAIL, "pipe: %s", strerror(errno));
	}
	c->len = 0;
	c->got_line = 0;
	rc = start_here(c, a.v, (struct launch_io){.in = in[0], .err = efd}, 1, err);
	close(in[0]);
	close(efd);
	argv_free(&a);
	if (rc < 0) {
		close(in[1]);
		return rc;
	}
	c->in = in[1];
	if (c->token && s->token) {
		size_t len = strlen(s->token);
		/* a line in an empty pipe: it does not block. EPIPE: the ssh has already ended (a
		 * connection dropped at once); its end says what happened, and a dropped one is
		 * tried again (the caller ignores SIGPIPE, as gem-run does) */
		if ((write(c->in, s->token, len) != (ssize_t)len || write(c->in, "\n", 1) != 1) && errno != EPIPE)
			return gem_errf(err, GEM_EFAIL, "cannot hand the token to %s: %s", c->host, strerror(errno));
	}
	return 0;
}

int launch_here(struct launch_set *s, char *const argv[], struct launch_io io, const char *outfile,
		struct launch_child **out, char *err)
{
	struct launch_child *c = child_new(s);
	if (!c)
		return gem_errf(err, GEM_ENOMEM, "out of memory");
	if (outfile)
		snprintf(c->outfile, sizeof c->outfile, "%s", outfile);
	*out = c;
	if (start_here(c, argv, io, outfile != NULL, err) < 0) {
		c->status = 127;
		return GEM_EFAIL;
	}
	return 0;
}

int launch_remote(struct launch_set *s, const char *host, int token, const char *outfile,
		  const char *errfile, char *const argv[], struct launch_child **out, char *err)
{
	struct launch_child *c = child_new(s);
	if (!c || !(c->cmd = launch_remote_cmd(token, argv)))
		return gem_errf(err, GEM_ENOMEM, "out of memory");
	c->host = host;
	c->token = token;
	snprintf(c->outfile, sizeof c->outfile, "%s", outfile ? outfile : errfile);
	snprintf(c->errfile, sizeof c->errfile, "%s", errfile);
	*out = c;
	if (start_remote(s, c, err) < 0) {
		c->status = 255;
		return GEM_EFAIL;
	}
	return 0;
}

/* Read what c's stdout holds now: its first line kept, all of it appended to its outfile;
 * closed at its end. */
static void read_out(struct launch_child *c)
{
	char buf[4096];
	ssize_t got;
	while ((got = read(c->out, buf, sizeof buf)) > 0) {
		int fd;
		/* best effort: the line is what the caller waits for */
		if (c->outfile[0] && (fd = open(c->outfile, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644)) >= 0) {
			if (write(fd, buf, (size_t)got) != got)
				c->outfile[0] = 0;
			close(fd);
		}
		for (ssize_t i = 0; i < got && !c->got_line; i++) {
			if (buf[i] == '\n')
				c->got_line = 1;
			else if (c->len + 1 < sizeof c->line)
				c->line[c->len++] = buf[i];
			c->line[c->len] = 0;
		}
	}
	if (got == 0 || (got < 0 && errno != EAGAIN && errno != EINTR)) {
		close(c->out);
		c->out = -1;
	}
}

/* 1 when remote c's ssh failed before the command started on its host (sshd dropped the
 * connection: too many at once), from what ssh said on this try. */
static int dropped(const struct launch_child *c)
{
	char *text = NULL;
	size_t len;
	int rc = 0;
	if (fs_read_all(c->errfile, (void **)&text, &len, (size_t)64 << 20, NULL) < 0)
		return 0;
	if ((size_t)c->err_start <= len) {
		const char *t = text + c->err_start;
		rc = !strstr(t, LAUNCH_REMOTE_START) &&
		     (strstr(t, "kex_exchange_identification") || strstr(t, "Connection reset by") ||
		      strstr(t, "Connection closed by"));
	}
	free(text);
	return rc;
}

/* Every child that ended: its status; a remote one dropped before it started waits to be tried
 * again. */
static void reap(struct launch_set *s)
{
	for (int i = 0; i < s->n; i++) {
		struct launch_child *c = s->kids[i];
		int st;
		if (c->pid <= 0 || waitpid(c->pid, &st, WNOHANG) != c->pid)
			continue;
		c->pid = 0;
		c->status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
		if (c->out >= 0)
			read_out(c);
		if (c->in >= 0)
			close(c->in);
		c->in = -1;
		c->term_at = 0;
		if (c->host && c->status == 255 && c->tries < 6 && !s->stopping && dropped(c)) {
			c->retry_at = clock_mono() + ((200 << c->tries) + rand() % 300) / 1000.0;
			c->tries++;
			c->status = -1;
		}
	}
}

/* What is due at now: a try again, a SIGTERM to an ssh that did not end; the next deadline
 * after now (or until). */
static double due(struct launch_set *s, double now, double until)
{
	for (int i = 0; i < s->n; i++) {
		struct launch_child *c = s->kids[i];
		if (c->retry_at > 0 && now >= c->retry_at) {
			c->retry_at = 0;
			if (s->stopping || start_remote(s, c, NULL) < 0)
				c->status = s->stopping ? 143 : 255;
		}
		if (c->term_at > 0 && now >= c->term_at) {
			c->term_at = 0;
			if (c->pid > 0)
				kill(c->pid, SIGTERM);
		}
		if (c->retry_at > 0 && c->retry_at < until)
			until = c->retry_at;
		if (c->term_at > 0 && c->term_at < until)
			until = c->term_at;
	}
	return until;
}

int launch_pump(struct launch_set *s, double until, char *err)
{
	struct pollfd *fds = calloc((size_t)s->n + 1, sizeof *fds);
	struct launch_child **who = calloc((size_t)s->n + 1, sizeof *who);
	double now = clock_mono(), next = due(s, now, until);
	int n = 1, ms, sig = 0;
	if (!fds || !who) {
		free(fds);
		free(who);
		return gem_errf(err, GEM_ENOMEM, "out of memory");
	}
	fds[0] = (struct pollfd){.fd = s->sigfd, .events = POLLIN};
	for (int i = 0; i < s->n; i++)
		if (s->kids[i]->out >= 0) {
			who[n] = s->kids[i];
			fds[n++] = (struct pollfd){.fd = s->kids[i]->out, .events = POLLIN};
		}
	ms = next <= now ? 0 : next - now > 3600 ? 3600000 : (int)((next - now) * 1000) + 1;
	if (poll(fds, (nfds_t)n, ms) > 0) {
		for (int i = 1; i < n; i++)
			if (fds[i].revents)
				read_out(who[i]);
		if (fds[0].revents) {
			struct signalfd_siginfo si;
			while (read(s->sigfd, &si, sizeof si) == (ssize_t)sizeof si)
				if (si.ssi_signo != SIGCHLD && !sig)
					sig = (int)si.ssi_signo;
			reap(s);
		}
	}
	free(fds);
	free(who);
	due(s, clock_mono(), until);
	return sig;
}

void launch_stop(struct launch_child *c)
{
	if (c->retry_at > 0) {
		c->retry_at = 0;
		c->status = 143;
	}
	if (c->pid <= 0)
		return;
	if (!c->host) {
		kill(c->pid, SIGTERM);
	} else if (c->in >= 0) {
		close(c->in);
		c->in = -1;
		c->term_at = clock_mono() + 10;
	}
}
