/* t3402: role/launch, how gem-run starts its children: a word quoted for sh comes back as it
 * was; the remote command line runs its program under the watchdog; the ssh command line; a
 * program that does not exist is an error; a child's first line and status through the loop;
 * a connection dropped before the command started is tried again; a child outlives no parent
 * killed outright (SIGKILL). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/err.h"
#include "role/launch.h"
#include "tap.h"

static struct launch_set S;

/* Run argv in the set, its standard input in, and wait for it: its status; its first line in
 * line. */
static int run_in(char *const argv[], int in, char *line, size_t cap)
{
	char err[GEM_ERRMAX];
	struct launch_child *c;
	double until = clock_mono() + 20;
	if (launch_here(&S, argv, (struct launch_io){.in = in, .err = LAUNCH_NULL}, "", &c, err) < 0)
		return -1000;
	while ((launch_running(c) || c->out >= 0) && clock_mono() < until)
		if (launch_pump(&S, until, err) != 0)
			return -1001;
	snprintf(line, cap, "%s", c->line);
	return c->status;
}

static int run(char *const argv[], char *line, size_t cap)
{
	return run_in(argv, LAUNCH_NULL, line, cap);
}

/* s quoted, given to sh -c "printf %s WORD": s again. */
static int quoted_back(const char *s)
{
	char *cmd = NULL, line[1024];
	size_t len = 0;
	FILE *f = open_memstream(&cmd, &len);
	int rc;
	fputs("printf '%s\\n' ", f);
	launch_quote(f, s);
	fclose(f);
	rc = run((char *[]){"sh", "-c", cmd, NULL}, line, sizeof line);
	free(cmd);
	return rc == 0 && !strcmp(line, s);
}

static void test_quote_and_remote(void)
{
	const char *words[] = {"plain", "with space", "it's", "$HOME `id` \\ \" ; | & * ?", "", "-n",
			       "a=b,c:d/e"};
	char line[1024], *cmd;
	int in[2];
	for (size_t i = 0; i < sizeof words / sizeof *words; i++)
		ok(quoted_back(words[i]), "quoted for sh and back: [%s]", words[i]);
	cmd = launch_remote_cmd(0, (char *[]){"printf", "%s|%s\\n", "a b", "c'd", NULL});
	ok(cmd && strstr(cmd, "exec sh -c '") == cmd && strstr(cmd, "' gem-remote printf "),
	   "the remote command: the watchdog, then the program");
	/* its input open while it runs, as ssh's is: at its end the watchdog stops the program,
	 * which /dev/null would do before it printed whenever the watchdog ran first */
	if (pipe2(in, O_CLOEXEC) < 0)
		in[0] = in[1] = -1;
	ok(in[0] >= 0 && run_in((char *[]){"sh", "-c", cmd, NULL}, in[0], line, sizeof line) == 0 &&
		   !strcmp(line, "a b|c'd"),
	   "the program runs under the watchdog with its words: [%s]", line);
	if (in[0] >= 0) {
		close(in[0]);
		close(in[1]);
	}
	free(cmd);
}

static void test_ssh_argv(void)
{
	char err[GEM_ERRMAX];
	struct argv a = {0};
	const char *want[] = {"ssh", "-J", "gw x", "-p", "2222", "-o", "BatchMode=yes", "-o",
			      "ConnectTimeout=7", "-o", "ServerAliveInterval=15", "-o",
			      "ServerAliveCountMax=4", "host", "cmd"};
	int same;
	int rc = launch_ssh_argv("ssh -J 'gw x' -p 2222", 7, "host", "cmd", &a, err);
	ok(rc == 0 && a.n == (int)(sizeof want / sizeof *want), "the ssh command line: %d words", a.n);
	same = a.n == (int)(sizeof want / sizeof *want);
	for (int i = 0; same && i < a.n; i++)
		same = !strcmp(a.v[i], want[i]);
	ok(same, "its words: the user's, split as sh would, then gem-run's, the host, the command");
	argv_free(&a);
	ok(launch_ssh_argv("  ", 7, "h", "c", &a, err) == GEM_EUSAGE, "no word: %s", err);
	argv_free(&a);
	ok(launch_ssh_argv("ssh $(touch x)", 7, "h", "c", &a, err) == GEM_EUSAGE,
	   "no command substitution: %s", err);
	argv_free(&a);
}

static void test_spawn(void)
{
	char err[GEM_ERRMAX], line[64];
	pid_t pid;
	ok(launch_spawn((char *[]){"gem-no-such-program", NULL}, &(struct launch_io){LAUNCH_NULL, LAUNCH_NULL,
		LAUNCH_NULL, 0, 0}, &pid, err) == GEM_EFAIL && strstr(err, "gem-no-such-program"),
	   "a program that is not there: %s", err);
	ok(run((char *[]){"sh", "-c", "echo http://x:1; echo more; exit 3", NULL}, line, sizeof line) == 3 &&
		   !strcmp(line, "http://x:1"), "the first line and the status through the loop: %s", line);
}

/* An ssh that drops the first connection as sshd does past MaxStartups, then runs the command
 * here: the child is tried again and ends as its command does. */
static void test_retry(const char *dir)
{
	char err[GEM_ERRMAX], ssh[512], log[512], words[600];
	struct launch_child *c;
	double until = clock_mono() + 30;
	FILE *f;
	snprintf(ssh, sizeof ssh, "%s/ssh", dir);
	snprintf(log, sizeof log, "%s/err", dir);
	f = fopen(ssh, "w");
	fprintf(f, "#!/bin/sh\nif [ ! -e %s/tried ]; then : >%s/tried\n"
		   "echo 'kex_exchange_identification: Connection closed by remote host' >&2; exit 255; fi\n"
		   "for a; do last=$a; done\nexec sh -c \"$last\"\n", dir, dir);
	fclose(f);
	chmod(ssh, 0755);
	snprintf(words, sizeof words, "%s", ssh);
	S.ssh = words;
	S.ssh_timeout = 5;
	S.token = "secret";
	ok(launch_remote(&S, "h", 1, NULL, log, (char *[]){"sh", "-c", "read t; echo token $t", NULL}, &c,
			 err) == 0, "a remote start");
	while ((launch_running(c) || c->out >= 0) && clock_mono() < until)
		launch_pump(&S, until, err);
	ok(c->status == 0 && c->tries == 1 && !strcmp(c->line, "token secret"),
	   "dropped once, tried again: status %d, tries %d, [%s]", c->status, c->tries, c->line);
}

/* A parent that starts a child and is killed outright: the child gets SIGTERM. */
static void test_pdeathsig(void)
{
	int p[2];
	pid_t parent, child = 0;
	int st = 0;
	if (pipe(p) < 0 || prctl(PR_SET_CHILD_SUBREAPER, 1) < 0)
		return;
	if ((parent = fork()) == 0) {
		char err[GEM_ERRMAX];
		pid_t c;
		if (launch_spawn((char *[]){"sleep", "60", NULL}, &(struct launch_io){LAUNCH_NULL, LAUNCH_NULL,
				 LAUNCH_NULL, 0, 0}, &c, err) < 0 || write(p[1], &c, sizeof c) != sizeof c)
			_exit(1);
		pause();
		_exit(0);
	}
	close(p[1]);
	if (read(p[0], &child, sizeof child) != sizeof child)
		child = 0;
	ok(child > 0, "a child started: %d", (int)child);
	kill(parent, SIGKILL);
	waitpid(parent, NULL, 0);
	/* orphaned, it is ours to wait for (a subreaper): its end and what ended it */
	ok(child > 0 && waitpid(child, &st, 0) == child && WIFSIGNALED(st) && WTERMSIG(st) == SIGTERM,
	   "its parent killed outright, it got SIGTERM");
}

int main(void)
{
	char dir[] = "/tmp/t3402.XXXXXX", cmd[64];
	sigset_t s;
	sigemptyset(&s);
	sigaddset(&s, SIGCHLD);
	sigprocmask(SIG_BLOCK, &s, NULL);
	S.sigfd = signalfd(-1, &s, SFD_CLOEXEC | SFD_NONBLOCK);
	/* as gem-run does: test_retry's first ssh exits before it reads the token, and writing the
	 * token to its closed stdin must fail with EPIPE, not kill this program (1 run in 5 did) */
	signal(SIGPIPE, SIG_IGN);
	if (S.sigfd < 0 || !mkdtemp(dir))
		return 1;
	test_quote_and_remote();
	test_ssh_argv();
	test_spawn();
	test_retry(dir);
	test_pdeathsig();
	snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
	if (system(cmd) != 0)
		diag("could not remove %s", dir);
	return done_testing();
}
