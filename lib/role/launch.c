#define _GNU_SOURCE
#include "role/launch.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <wordexp.h>

#include "base/err.h"

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
	for (int s = 1; s < NSIG; s++)
		if (s != SIGKILL && s != SIGSTOP)
			signal(s, SIG_DFL);
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
