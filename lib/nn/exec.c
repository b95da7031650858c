#define _GNU_SOURCE /* memfd_create, pipe2 */
#include "nn/exec.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/err.h"
#include "base/jget.h"

extern char **environ;

/* ---- what a child says, checked ---- */

/* A tensor's name: 1 to LAYOUT_NAME_MAX − 1 bytes of [A-Za-z0-9._-] (a safetensors key and a
 * word in messages). */
static int name_ok(const char *s)
{
	size_t n = strlen(s);
	if (n == 0 || n >= LAYOUT_NAME_MAX)
		return 0;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
		      c == '_' || c == '-'))
			return 0;
	}
	return 1;
}

/* "tensors": [[NAME, [D, ...]], ...] into lo, offsets in order. */
static int tensors_from_json(const json_t *a, struct layout *lo, char *err)
{
	size_t nt = json_is_array(a) ? json_array_size(a) : 0;
	memset(lo, 0, sizeof *lo);
	if (!a)
		return gem_errf(err, GEM_EUSAGE, "tensors: missing");
	if (nt < 1 || nt > LAYOUT_MAX_TENSORS)
		return gem_errf(err, GEM_EUSAGE, "tensors: must be an array of 1 to %d tensors", LAYOUT_MAX_TENSORS);
	for (size_t i = 0; i < nt; i++) {
		const json_t *t = json_array_get(a, i), *name = json_array_get(t, 0), *shape = json_array_get(t, 1);
		struct layout_tensor *lt = &lo->t[i];
		size_t nd = json_is_array(shape) ? json_array_size(shape) : 0;
		if (!json_is_array(t) || json_array_size(t) != 2 || !json_is_string(name) || nd < 1 || nd > 4)
			return gem_errf(err, GEM_EUSAGE, "tensors[%zu]: must be [NAME, [1 to 4 dimensions]]", i);
		if (!name_ok(json_string_value(name)) || strlen(json_string_value(name)) != json_string_length(name))
			return gem_errf(err, GEM_EUSAGE, "tensors[%zu]: a name of 1 to %d bytes of letters, digits "
					"and ._-", i, LAYOUT_NAME_MAX - 1);
		for (size_t k = 0; k < i; k++)
			if (!strcmp(lo->t[k].name, json_string_value(name)))
				return gem_errf(err, GEM_EUSAGE, "tensors[%zu]: the name %s twice", i, lo->t[k].name);
		snprintf(lt->name, sizeof lt->name, "%s", json_string_value(name));
		lt->ndim = (int)nd;
		lt->size = 1;
		for (size_t d = 0; d < nd; d++) {
			const json_t *v = json_array_get(shape, d);
			if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > INT32_MAX)
				return gem_errf(err, GEM_EUSAGE, "tensors[%zu] (%s): dimension %zu must be a positive "
						"integer", i, lt->name, d);
			lt->shape[d] = (int)json_integer_value(v);
			if (lt->size > ((size_t)1 << 31) / (size_t)lt->shape[d])
				return gem_errf(err, GEM_EUSAGE, "tensors[%zu] (%s): more than 2^31 floats", i, lt->name);
			lt->size *= (size_t)lt->shape[d];
		}
		lt->offset = lo->total;
		lo->total += lt->size;
		if (lo->total > (size_t)1 << 31)
			return gem_errf(err, GEM_EUSAGE, "tensors: more than 2^31 floats in all");
		lo->ntensors = (int)i + 1;
	}
	return 0;
}

/* The model and data members common to a hello and run.json's record. */
static int info_members(const json_t *o, struct exec_info *info, char *err)
{
	long long classes, train, test, positions = 0;
	int rc;
	if ((rc = jget_int(o, "classes", 2, 65536, &classes)) != JGET_OK)
		return gem_errf(err, GEM_EUSAGE, "classes: %s (an integer in [2, 65536])", jget_why(rc));
	if ((rc = jget_int(o, "train", 1, (long long)EXEC_MAX_COUNT, &train)) != JGET_OK)
		return gem_errf(err, GEM_EUSAGE, "train: %s (the training samples: an integer in [1, 2^31))",
				jget_why(rc));
	if ((rc = jget_int(o, "test", 0, (long long)EXEC_MAX_COUNT, &test)) != JGET_OK)
		return gem_errf(err, GEM_EUSAGE, "test: %s (the test samples: an integer in [0, 2^31))", jget_why(rc));
	if ((rc = jget_int(o, "positions", 0, EXEC_MAX_POSITIONS, &positions)) < 0)
		return gem_errf(err, GEM_EUSAGE, "positions: %s (a window: an integer in [1, %d])", jget_why(rc),
				EXEC_MAX_POSITIONS);
	if (positions > 0 && train < positions + 2)
		return gem_errf(err, GEM_EUSAGE, "train: %lld tokens, too few for a window of %lld and the token "
				"after", train, positions);
	if ((rc = jget_strcpy(o, "name", info->name, sizeof info->name)) < 0)
		return gem_errf(err, GEM_EUSAGE, "name: %s (a string of at most %zu bytes)", jget_why(rc),
				sizeof info->name - 1);
	info->classes = (int)classes;
	info->train = (uint64_t)train;
	info->test = (uint64_t)test;
	info->positions = (int)positions;
	return tensors_from_json(json_object_get(o, "tensors"), &info->layout, err);
}

/* A hello's object into info's model members. */
static int hello_of(const json_t *o, struct exec_info *info, char *err)
{
	long long proto;
	int rc;
	info->name[0] = 0;
	if ((rc = jget_int(o, "protocol", 0, 1 << 30, &proto)) != JGET_OK)
		return gem_errf(err, GEM_EUSAGE, "protocol: %s", jget_why(rc));
	if (proto != EXEC_PROTOCOL)
		return gem_errf(err, GEM_EUSAGE, "protocol %lld: gem speaks %d", proto, EXEC_PROTOCOL);
	return info_members(o, info, err);
}

int exec_parse_hello(const char *line, size_t len, struct exec_info *info, char *err)
{
	json_t *o;
	int rc;
	if ((rc = exec_parse_reply(line, len, &o, err)) < 0)
		return rc;
	rc = hello_of(o, info, err);
	json_decref(o);
	return rc;
}

/* s's printable bytes (at most cap − 1), for a message. */
static void printable(char *out, size_t cap, const char *s, size_t n)
{
	size_t k = 0;
	for (size_t i = 0; i < n && k + 1 < cap; i++)
		out[k++] = (unsigned char)s[i] >= 0x20 && s[i] != 0x7f ? s[i] : '?';
	out[k] = 0;
}

int exec_parse_reply(const char *line, size_t len, json_t **out, char *err)
{
	json_error_t jerr;
	json_t *o, *e;
	char show[81];
	*out = NULL;
	o = json_loadb(line, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!json_is_object(o)) {
		printable(show, sizeof show, line, len);
		json_decref(o);
		/* what Python's json module writes for a float that is not finite: no JSON number */
		if (memmem(line, len, "NaN", 3) || memmem(line, len, "Infinity", 8))
			return gem_errf(err, GEM_EUSAGE, "a number in the reply is not finite: \"%s%s\"", show,
					len > sizeof show - 1 ? "..." : "");
		return gem_errf(err, GEM_EUSAGE, "the reply is not one JSON object: \"%s%s\"", show,
				len > sizeof show - 1 ? "..." : "");
	}
	if ((e = json_object_get(o, "error"))) {
		const char *m = json_is_string(e) ? json_string_value(e) : "(an error that is not a string)";
		char msg[240];
		printable(msg, sizeof msg, m, strlen(m));
		json_decref(o);
		return gem_errf(err, GEM_EFAIL, "it answered: %s", msg);
	}
	*out = o;
	return 0;
}

json_t *exec_info_to_json(const struct exec_info *info)
{
	json_t *t = json_array(), *o;
	for (int i = 0; t && i < info->layout.ntensors; i++) {
		const struct layout_tensor *lt = &info->layout.t[i];
		json_t *shape = json_array();
		for (int d = 0; shape && d < lt->ndim; d++)
			json_array_append_new(shape, json_integer(lt->shape[d]));
		json_array_append_new(t, json_pack("[s,o]", lt->name, shape));
	}
	o = json_pack("{s:s, s:f, s:s, s:i, s:o, s:I, s:I}", "exec", info->cmd, "timeout", info->timeout,
		      "name", info->name, "classes", info->classes, "tensors", t, "train",
		      (json_int_t)info->train, "test", (json_int_t)info->test);
	if (o && info->positions && json_object_set_new(o, "positions", json_integer(info->positions)) < 0) {
		json_decref(o);
		return NULL;
	}
	return o;
}

int exec_info_from_json(const json_t *spec, struct exec_info *info, char *err)
{
	static const char *const keys[] = {"exec", "timeout", "name", "classes", "tensors", "train", "test",
					   "positions"};
	int rc;
	memset(info, 0, sizeof *info);
	if ((rc = jget_only(spec, keys, sizeof keys / sizeof *keys, "field of an external model", err)) < 0)
		return rc;
	if ((rc = jget_strcpy(spec, "exec", info->cmd, sizeof info->cmd)) != JGET_OK || !info->cmd[0])
		return gem_errf(err, GEM_EUSAGE, "exec: %s (the command: a string of 1 to %d bytes)",
				rc ? jget_why(rc) : "empty", EXEC_CMD_MAX - 1);
	info->timeout = EXEC_TIMEOUT_DEFAULT;
	if ((rc = jget_num(spec, "timeout", 0.001, EXEC_TIMEOUT_MAX, &info->timeout)) < 0)
		return gem_errf(err, GEM_EUSAGE, "timeout: %s (seconds in [0.001, %g])", jget_why(rc),
				EXEC_TIMEOUT_MAX);
	return info_members(spec, info, err);
}

int exec_info_same(const struct exec_info *a, const struct exec_info *b, char *err)
{
	const struct layout *x = &a->layout, *y = &b->layout;
	if (x->ntensors != y->ntensors)
		return gem_errf(err, GEM_EUSAGE, "it has %d tensors, the run's model %d", y->ntensors, x->ntensors);
	for (int i = 0; i < x->ntensors; i++) {
		const struct layout_tensor *s = &x->t[i], *t = &y->t[i];
		int same = !strcmp(s->name, t->name) && s->ndim == t->ndim;
		for (int d = 0; same && d < s->ndim; d++)
			same = s->shape[d] == t->shape[d];
		if (!same)
			return gem_errf(err, GEM_EUSAGE, "its tensor %d is %s of %zu floats, the run's %s of %zu",
					i, t->name, t->size, s->name, s->size);
	}
	if (a->classes != b->classes || a->train != b->train || a->test != b->test ||
	    a->positions != b->positions)
		return gem_errf(err, GEM_EUSAGE, "it has %d classes, %llu training and %llu test %s (window "
				"%d), the run's model %d, %llu and %llu (window %d)",
				b->classes, (unsigned long long)b->train, (unsigned long long)b->test,
				b->positions ? "tokens" : "samples", b->positions, a->classes,
				(unsigned long long)a->train, (unsigned long long)a->test, a->positions);
	return 0;
}

/* ---- the shared memory ---- */

static size_t align_up(size_t x, size_t a)
{
	return (x + a - 1) / a * a;
}

int exec_shm_create(struct exec_shm *s, char *err)
{
	memset(s, 0, sizeof *s);
	if ((s->fd = memfd_create("gem-exec", MFD_CLOEXEC)) < 0)
		return gem_errf(err, GEM_EFAIL, "shared memory: %s", strerror(errno));
	return 0;
}

int exec_shm_size(struct exec_shm *s, size_t n, char *err)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	void *p;
	s->n = n;
	s->grad_off = align_up(n * sizeof(float), 64);
	s->index_off = align_up(s->grad_off + n * sizeof(float), page);
	s->size = s->index_off;
	if (ftruncate(s->fd, (off_t)s->size) < 0)
		return gem_errf(err, GEM_EFAIL, "shared memory for %zu parameters: %s", n, strerror(errno));
	p = mmap(NULL, s->index_off, PROT_READ | PROT_WRITE, MAP_SHARED, s->fd, 0);
	if (p == MAP_FAILED)
		return gem_errf(err, errno == ENOMEM ? GEM_ENOMEM : GEM_EFAIL, "shared memory for %zu parameters: %s",
				n, strerror(errno));
	s->theta = p;
	s->grad = (float *)((char *)p + s->grad_off);
	return 0;
}

int exec_shm_reserve(struct exec_shm *s, int cap, char *err)
{
	size_t size;
	void *p;
	if (cap <= s->cap)
		return 0;
	size = s->index_off + align_up((size_t)cap * sizeof(uint64_t), 64);
	if (ftruncate(s->fd, (off_t)size) < 0)
		return gem_errf(err, GEM_EFAIL, "shared memory for %d indices: %s", cap, strerror(errno));
	p = mmap(NULL, size - s->index_off, PROT_READ | PROT_WRITE, MAP_SHARED, s->fd, (off_t)s->index_off);
	if (p == MAP_FAILED)
		return gem_errf(err, GEM_ENOMEM, "shared memory for %d indices: %s", cap, strerror(errno));
	if (s->index)
		munmap(s->index, s->size - s->index_off);
	s->index = p;
	s->size = size;
	s->cap = cap;
	return 0;
}

void exec_shm_close(struct exec_shm *s)
{
	if (s->theta)
		munmap(s->theta, s->index_off);
	if (s->index)
		munmap(s->index, s->size - s->index_off);
	if (s->fd >= 0)
		close(s->fd);
	memset(s, 0, sizeof *s);
	s->fd = -1;
}

/* ---- the child ---- */

struct exec_child {
	pid_t pid;
	int in, out, errfd;    /* our ends: its stdin, stdout, stderr */
	pthread_t relay;
	int relaying;
	char label[224];       /* "exec model 'CMD…' (pid N)" for messages */
	char prefix[48];       /* "NAME[pid]: " before each line of its stderr */
	double timeout;
	char buf[EXEC_LINE_MAX];
	size_t have;           /* bytes in buf read past the last line */
};

/* The name of a child in its stderr's prefix: its command's first word whose base name has a
 * dot (the script: "cnn.py" of "python3 /x/cnn.py"), else its first word's base name. */
static void child_name(const char *cmd, char *out, size_t cap)
{
	const char *first = NULL, *p = cmd;
	size_t firstn = 0;
	while (*p) {
		while (*p == ' ' || *p == '\t')
			p++;
		const char *w = p;
		while (*p && *p != ' ' && *p != '\t')
			p++;
		if (p == w)
			break;
		const char *b = w;
		for (const char *q = w; q < p; q++)
			if (*q == '/')
				b = q + 1;
		if (!first) {
			first = b;
			firstn = (size_t)(p - b);
		}
		if (memchr(b, '.', (size_t)(p - b)) && *w != '-') {
			first = b;
			firstn = (size_t)(p - b);
			break;
		}
	}
	snprintf(out, cap, "%.*s", (int)(firstn > 24 ? 24 : firstn), first ? first : "exec");
}

/* Relay the child's stderr to ours a line at a time, each after c->prefix. */
static void *relay_stderr(void *arg)
{
	struct exec_child *c = arg;
	char in[4096], line[4096 + 64];
	size_t n = 0, pre = strlen(c->prefix);
	ssize_t got;
	memcpy(line, c->prefix, pre);
	for (;;) {
		got = read(c->errfd, in, sizeof in);
		if (got < 0 && errno == EINTR)
			continue;
		for (ssize_t i = 0; i < got; i++) {
			line[pre + n++] = in[i];
			if (in[i] == '\n' || pre + n == sizeof line - 1) {
				if (in[i] != '\n')
					line[pre + n++] = '\n';
				if (write(STDERR_FILENO, line, pre + n) < 0) {
					/* nowhere to say it */
				}
				n = 0;
			}
		}
		if (got <= 0)
			break;
	}
	if (n) {
		line[pre + n++] = '\n';
		if (write(STDERR_FILENO, line, pre + n) < 0) {
			/* nowhere to say it */
		}
	}
	return NULL;
}

static int spawn(struct exec_child *c, const char *cmd, int shm_fd, char *err)
{
	int pin[2] = {-1, -1}, pout[2] = {-1, -1}, perr[2] = {-1, -1}, rc = GEM_EFAIL, e = 0;
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t at;
	sigset_t none, all;
	char *argv[] = {"sh", "-c", NULL, NULL}, *line;
	size_t nenv = 0;
	char **envp;

	/* a simple command replaces the shell (its pid the program's, its signal its own); a
	 * pipeline or a list stays the shell's */
	if (!(line = malloc(strlen(cmd) + 6)))
		return gem_errf(err, GEM_ENOMEM, "out of memory");
	size_t first = strcspn(cmd, " \t");
	int simple = !strpbrk(cmd, ";&|()<>`$\n") && !memchr(cmd, '=', first); /* no VAR=x first */
	sprintf(line, "%s%s", simple ? "exec " : "", cmd);
	argv[2] = line;

	while (environ[nenv])
		nenv++;
	if (!(envp = calloc(nenv + 2, sizeof *envp))) {
		free(line);
		return gem_errf(err, GEM_ENOMEM, "out of memory");
	}
	memcpy(envp, environ, nenv * sizeof *envp);
	envp[nenv] = "GEM_EXEC_PROTOCOL=1";
	if (pipe2(pin, O_CLOEXEC) < 0 || pipe2(pout, O_CLOEXEC) < 0 || pipe2(perr, O_CLOEXEC) < 0) {
		e = errno;
		goto out;
	}
	posix_spawn_file_actions_init(&fa);
	posix_spawnattr_init(&at);
	sigemptyset(&none);
	sigfillset(&all);
	/* the child starts with default signals and none blocked, whatever its parent waits for */
	posix_spawnattr_setsigmask(&at, &none);
	posix_spawnattr_setsigdefault(&at, &all);
	posix_spawnattr_setpgroup(&at, 0);
	posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP);
	posix_spawn_file_actions_adddup2(&fa, pin[0], 0);
	posix_spawn_file_actions_adddup2(&fa, pout[1], 1);
	posix_spawn_file_actions_adddup2(&fa, perr[1], 2);
	posix_spawn_file_actions_adddup2(&fa, shm_fd, 3);
	e = posix_spawn(&c->pid, "/bin/sh", &fa, &at, argv, envp);
	posix_spawn_file_actions_destroy(&fa);
	posix_spawnattr_destroy(&at);
	if (e)
		goto out;
	c->in = pin[1];
	c->out = pout[0];
	c->errfd = perr[0];
	pin[1] = pout[0] = perr[0] = -1;
	rc = 0;
out:
	for (int i = 0; i < 2; i++) {
		if (pin[i] >= 0)
			close(pin[i]);
		if (pout[i] >= 0)
			close(pout[i]);
		if (perr[i] >= 0)
			close(perr[i]);
	}
	free(envp);
	free(line);
	return rc ? gem_errf(err, GEM_EFAIL, "cannot start /bin/sh -c '%.200s': %s", cmd, strerror(e)) : 0;
}

/* What became of a child that is gone (reaped here): "exited with status 3". */
static void child_gone(struct exec_child *c, char *out, size_t cap)
{
	int st = 0;
	pid_t r;
	double end = clock_mono() + 1;
	/* its stdout closed: it is exiting, if not yet reapable */
	while ((r = waitpid(c->pid, &st, WNOHANG)) == 0 && clock_mono() < end)
		nanosleep(&(struct timespec){0, 5000000}, NULL);
	if (r == c->pid) {
		c->pid = 0;
		if (WIFEXITED(st))
			snprintf(out, cap, "exited with status %d", WEXITSTATUS(st));
		else if (WIFSIGNALED(st))
			snprintf(out, cap, "was killed by signal %d (%s)", WTERMSIG(st), strsignal(WTERMSIG(st)));
		else
			snprintf(out, cap, "stopped");
	} else {
		snprintf(out, cap, "closed its standard output");
	}
}

/* Write all of buf to the child's stdin; a child gone (EPIPE) fails without SIGPIPE. */
static int send_line(struct exec_child *c, const char *buf, size_t n)
{
	sigset_t pipe, old;
	int rc = 0;
	sigemptyset(&pipe);
	sigaddset(&pipe, SIGPIPE);
	pthread_sigmask(SIG_BLOCK, &pipe, &old);
	while (n) {
		ssize_t w = write(c->in, buf, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			rc = -1;
			break;
		}
		buf += w;
		n -= (size_t)w;
	}
	if (rc < 0 && errno == EPIPE) {
		/* the SIGPIPE this thread was sent: taken, so that it never arrives */
		struct timespec zero = {0, 0};
		sigtimedwait(&pipe, NULL, &zero);
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return rc;
}

static void kill_child(struct exec_child *c)
{
	if (c->pid > 0) {
		kill(-c->pid, SIGKILL);
		waitpid(c->pid, NULL, 0);
		c->pid = 0;
	}
}

/* Read one line from the child into *line (in c->buf, its newline replaced by a NUL) within the
 * timeout. */
static int read_line(struct exec_child *c, const char *what, char **line, size_t *len, char *err)
{
	double end = clock_mono() + c->timeout;
	for (;;) {
		char *nl = memchr(c->buf, '\n', c->have);
		if (nl) {
			*nl = 0;
			*line = c->buf;
			*len = (size_t)(nl - c->buf);
			return 0;
		}
		if (c->have == sizeof c->buf)
			return gem_errf(err, GEM_EFAIL, "%s: request %s: a reply longer than %d bytes", c->label, what,
					EXEC_LINE_MAX);
		double left = end - clock_mono();
		struct pollfd p = {.fd = c->out, .events = POLLIN};
		int r = left > 0 ? poll(&p, 1, (int)(left * 1000) + 1) : 0;
		if (r < 0 && errno == EINTR)
			continue;
		if (r == 0) {
			kill_child(c);
			return gem_errf(err, GEM_EFAIL, "%s: request %s: no answer within %g s (--exec-timeout); "
					"killed", c->label, what, c->timeout);
		}
		ssize_t got = read(c->out, c->buf + c->have, sizeof c->buf - c->have);
		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0) {
			char how[96];
			child_gone(c, how, sizeof how);
			kill_child(c);
			return gem_errf(err, GEM_EFAIL, "%s: request %s: the child %s", c->label, what, how);
		}
		c->have += (size_t)got;
	}
}

/* Send a request and take its reply (*out, new reference). The line of the last reply is
 * consumed from c->buf. */
static int request(struct exec_child *c, json_t *req, const char *what, json_t **out, char *err)
{
	char *text, *line = NULL;
	size_t len = 0;
	int rc;
	*out = NULL;
	if (!req || !(text = json_dumps(req, JSON_COMPACT))) {
		json_decref(req);
		return gem_errf(err, GEM_ENOMEM, "out of memory");
	}
	json_decref(req);
	size_t n = strlen(text);
	text[n] = '\n'; /* json_dumps's NUL: a newline, sent without the NUL */
	rc = c->pid > 0 ? send_line(c, text, n + 1) : -1;
	free(text);
	if (rc < 0) {
		char how[96] = "is not running";
		if (c->pid > 0)
			child_gone(c, how, sizeof how);
		kill_child(c);
		return gem_errf(err, GEM_EFAIL, "%s: request %s: the child %s", c->label, what, how);
	}
	if ((rc = read_line(c, what, &line, &len, err)) < 0)
		return rc;
	rc = exec_parse_reply(line, len, out, err);
	memmove(c->buf, line + len + 1, c->have - len - 1);
	c->have -= len + 1;
	if (rc < 0)
		gem_errprefix(err, "%s: request %s: ", c->label, what);
	return rc;
}

static int map_child(struct exec_child *c, const struct exec_shm *s, char *err)
{
	json_t *r;
	int rc = request(c, json_pack("{s:s, s:I, s:I, s:I, s:I, s:i}", "op", "map", "size", (json_int_t)s->size,
				      "theta", (json_int_t)0, "grad", (json_int_t)s->grad_off, "index",
				      (json_int_t)s->index_off, "batch", s->cap),
			 "map", &r, err);
	json_decref(r);
	return rc;
}

int exec_start(struct exec_info *info, struct exec_shm *s, struct exec_child **out, char *err)
{
	struct exec_child *c = calloc(1, sizeof *c);
	struct exec_info said;
	char name[32];
	json_t *hello = NULL;
	int rc;
	*out = NULL;
	if (!c)
		return gem_errf(err, GEM_ENOMEM, "out of memory");
	c->in = c->out = c->errfd = -1;
	c->timeout = info->timeout > 0 ? info->timeout : EXEC_TIMEOUT_DEFAULT;
	if ((rc = spawn(c, info->cmd, s->fd, err)) < 0) {
		free(c);
		return rc;
	}
	child_name(info->cmd, name, sizeof name);
	snprintf(c->prefix, sizeof c->prefix, "%s[%d]: ", name, (int)c->pid);
	snprintf(c->label, sizeof c->label, "exec model '%.160s%s' (pid %d)", info->cmd,
		 strlen(info->cmd) > 160 ? "..." : "", (int)c->pid);
	c->relaying = pthread_create(&c->relay, NULL, relay_stderr, c) == 0;
	memset(&said, 0, sizeof said);
	/* a program starting (an interpreter, a framework's import, a GPU's set-up) may take longer
	 * than a request */
	if (c->timeout < EXEC_START_TIMEOUT)
		c->timeout = EXEC_START_TIMEOUT;
	if ((rc = request(c, json_pack("{s:s, s:i}", "op", "hello", "protocol", EXEC_PROTOCOL), "hello", &hello,
			  err)) == 0 &&
	    (rc = hello_of(hello, &said, err)) < 0)
		gem_errprefix(err, "%s: its hello: ", c->label);
	json_decref(hello);
	if (rc == 0 && info->layout.ntensors == 0) {
		/* a new run: the child's word is the model */
		snprintf(said.cmd, sizeof said.cmd, "%s", info->cmd);
		said.timeout = info->timeout;
		if (!said.name[0])
			snprintf(said.name, sizeof said.name, "%s", name);
		*info = said;
	} else if (rc == 0 && (rc = exec_info_same(info, &said, err)) < 0) {
		gem_errprefix(err, "%s is not the run's model: ", c->label);
	}
	if (rc == 0 && !s->theta)
		rc = exec_shm_size(s, info->layout.total, err);
	if (rc == 0)
		rc = exec_shm_reserve(s, s->cap > 0 ? s->cap : 1, err);
	if (rc == 0 && s->n != info->layout.total)
		rc = gem_errf(err, GEM_EUSAGE, "%s: %zu parameters, the shared memory's %zu", c->label,
			      info->layout.total, s->n);
	c->timeout = info->timeout > 0 ? info->timeout : EXEC_TIMEOUT_DEFAULT;
	if (rc == 0)
		rc = map_child(c, s, err);
	if (rc < 0) {
		exec_stop(c);
		return rc;
	}
	*out = c;
	return 0;
}

const char *exec_label(const struct exec_child *c)
{
	return c->label;
}

int exec_remap(struct exec_child *c, const struct exec_shm *s, char *err)
{
	return map_child(c, s, err);
}

/* A reply that is {} (any members ignored). */
static int ack(struct exec_child *c, json_t *req, const char *what, char *err)
{
	json_t *r;
	int rc = request(c, req, what, &r, err);
	json_decref(r);
	return rc;
}

int exec_init(struct exec_child *c, uint64_t seed, char *err)
{
	return ack(c, json_pack("{s:s, s:I}", "op", "init", "seed", (json_int_t)seed), "init", err);
}

/* A float reply member that must be finite. */
static int finite_member(struct exec_child *c, const json_t *r, const char *key, const char *what, double *out,
			 char *err)
{
	const json_t *v = json_object_get(r, key);
	if (!json_is_number(v))
		return gem_errf(err, GEM_EUSAGE, "%s: request %s: the reply has no number \"%s\"", c->label, what, key);
	*out = json_number_value(v);
	if (!isfinite(*out) || !isfinite((float)*out))
		return gem_errf(err, GEM_EUSAGE, "%s: request %s: %s %g is not finite", c->label, what, key, *out);
	return 0;
}

int exec_grad(struct exec_child *c, const struct exec_batch *b, float *loss, char *err)
{
	char what[128];
	json_t *r;
	double l;
	int rc;
	snprintf(what, sizeof what, "grad (worker %d, position %llu)", b->worker, (unsigned long long)b->position);
	rc = request(c, json_pack("{s:s, s:i, s:i, s:[i,i], s:I, s:I}", "op", "grad", "n", b->n, "worker", b->worker,
				  "part", b->part_i, b->part_n, "position", (json_int_t)b->position, "seed",
				  (json_int_t)b->seed),
		     what, &r, err);
	if (rc == 0)
		rc = finite_member(c, r, "loss", what, &l, err);
	json_decref(r);
	if (rc == 0)
		*loss = (float)l;
	return rc;
}

int exec_eval(struct exec_child *c, double *loss, uint64_t *count, long long *correct, char *err)
{
	json_t *r;
	long long n = 0;
	int rc = request(c, json_pack("{s:s}", "op", "eval"), "eval", &r, err), g;
	if (rc == 0)
		rc = finite_member(c, r, "loss", "eval", loss, err);
	if (rc == 0 && (g = jget_int(r, "count", 1, (long long)1 << 50, &n)) != JGET_OK)
		rc = gem_errf(err, GEM_EUSAGE, "%s: request eval: count: %s (a positive integer)", c->label,
			      jget_why(g));
	*correct = -1;
	if (rc == 0 && (g = jget_int(r, "correct", 0, n, correct)) < 0)
		rc = gem_errf(err, GEM_EUSAGE, "%s: request eval: correct: %s (an integer in [0, count])", c->label,
			      jget_why(g));
	json_decref(r);
	*count = (uint64_t)n;
	return rc;
}

int exec_predict(struct exec_child *c, int n, char *err)
{
	return ack(c, json_pack("{s:s, s:i}", "op", "predict", "n", n), "predict", err);
}

void exec_stop(struct exec_child *c)
{
	if (!c)
		return;
	if (c->in >= 0)
		close(c->in);
	if (c->pid > 0) {
		siginfo_t si;
		double end = clock_mono() + 2;
		/* reapable (a zombie keeps its pid and so its group's id) before the group is killed */
		for (;;) {
			memset(&si, 0, sizeof si);
			if (waitid(P_PID, (id_t)c->pid, &si, WEXITED | WNOHANG | WNOWAIT) < 0 || si.si_pid == c->pid ||
			    clock_mono() >= end)
				break;
			nanosleep(&(struct timespec){0, 2000000}, NULL);
		}
		kill_child(c);
	}
	if (c->relaying)
		pthread_join(c->relay, NULL);
	if (c->out >= 0)
		close(c->out);
	if (c->errfd >= 0)
		close(c->errfd);
	free(c);
}
