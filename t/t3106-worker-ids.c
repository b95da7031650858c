/* t3106: worker ids of an open server (role/ps): a new worker gets an id no worker has had while
 * there is one; once all PS_MAX_WORKERS have been had, the id of the worker gone longest ago,
 * its record started over (its join event says "new"), so that the server never runs out while
 * workers come and go. A joined worker's id, or one whose state the rule holds, is never
 * given. */
#include "base/err.h"
#include "role/ps.h"
#include "tap.h"
#include "tiny-run-test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A new worker joins (-1), commits once, and leaves done: its id, or -1 when refused. */
static int come_and_go(struct ps *s, const float *u, char *err)
{
	struct ps_joined j;
	struct ps_reply r;
	float out[260];
	if (ps_join(s, -1, NULL, NULL, &j, err) != PS_APPLIED || j.commits || j.seq)
		return -1;
	struct ps_commit c = {.worker = j.worker, .base = j.version, .seq = 1, .samples = 8,
			      .loss = 1, .idle = -1, .update = u};
	if (ps_commit(s, &c, out, &r, err) < 0 || ps_leave(s, j.worker, PS_LEFT_DONE, NAN, 0, &r, err) < 0)
		return -1;
	return j.worker;
}

/* Lines of the log in dir that contain both a and b. */
static int log_lines(const char *dir, const char *a, const char *b)
{
	char path[4200], line[1024];
	int n = 0;
	FILE *f;
	snprintf(path, sizeof path, "%s/log.jsonl", dir);
	if (!(f = fopen(path, "r")))
		return -1;
	while (fgets(line, sizeof line, f))
		n += strstr(line, a) && strstr(line, b);
	fclose(f);
	return n;
}

int main(void)
{
	char err[GEM_ERRMAX] = "", dir[4096], cmd[4200];
	const char *tmp = getenv("TMPDIR");
	struct ps_opts o = {.max_staleness = -1, .keep_running = 1};
	struct ps_joined j0;
	struct ps *s;
	float u[260] = {0};
	int id = 0, fresh = 1, kept = 1;

	snprintf(dir, sizeof dir, "%s/t3106.XXXXXX", tmp && *tmp ? tmp : "/tmp");
	/* A temporary directory the machine cannot give is a skip; a run or server core that
	 * cannot be made in it is the product failing. */
	if (!mkdtemp(dir))
		skip_all("no temporary directory");
	if (!ok(tiny_run_make(dir, err) == 0 && ps_open(dir, &o, &s, err) == 0,
		"a tiny run is made and its server core opens (%s)", err))
		return done_testing();
	ok(ps_join(s, -1, NULL, NULL, &j0, err) == PS_APPLIED && j0.worker == 0,
	   "the first worker is 0, and stays joined");
	for (int i = 1; i < PS_MAX_WORKERS && fresh; i++)
		fresh = (id = come_and_go(s, u, err)) == i;
	ok(fresh, "workers 1 to %d come, commit and go, each with a new id (%d: %s)",
	   PS_MAX_WORKERS - 1, id, err);
	id = come_and_go(s, u, err);
	ok(id == 1, "every id had: the next worker gets 1, gone longest ago, its record anew (%d: %s)",
	   id, err);
	fflush(ps_log(s)); /* the log is buffered: its last lines may not be in the file yet */
	ok(log_lines(dir, "\"event\":\"join\"", "\"new\":true") == 1,
	   "its join event says it is new");
	for (int i = 0; i < 2 * PS_MAX_WORKERS && kept; i++)
		kept = (id = come_and_go(s, u, err)) > 0;
	ok(kept, "%d more come and go; none gets 0, which is joined (%d: %s)", 2 * PS_MAX_WORKERS,
	   id, err);
	ok(ps_forget(s, 0, err) == PS_E_REFUSED, "a joined worker's record cannot start over (%s)",
	   err);
	ps_close(s);
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		diag("could not remove %s", dir);
	return done_testing();
}
