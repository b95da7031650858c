/* t3804: log.jsonl's writer and reader agree: each kind of update line (a server's commit, a
 * round a leave closed, a local step, an SGP node's iteration) and an event are read back as
 * written, and a malformed line is refused with a reason that names the field. */
#include "base/err.h"
#include "run/runlog.h"
#include "tap.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The line written to f, into buf (cap bytes) without its newline; its length, 0 when it was
 * not one whole line. */
static size_t written(FILE *f, char *buf, size_t cap)
{
	size_t n;
	fflush(f);
	rewind(f);
	n = fread(buf, 1, cap - 1, f);
	buf[n] = 0;
	rewind(f);
	if (ftruncate(fileno(f), 0) < 0 || n == 0 || buf[n - 1] != '\n' || strchr(buf, '\n') != buf + n - 1)
		return 0;
	buf[--n] = 0;
	return n;
}

static int parse(const char *text, struct run_log_line *l, char *why)
{
	return run_log_parse(text, strlen(text), l, why, 128);
}

int main(void)
{
	FILE *f = tmpfile();
	char buf[1024], why[128];
	struct run_log_line l;
	struct run_log_gossip g = {.w = 0.5, .msgs = 2, .wait = 0.001, .peer = 3, .dist = 0.25};
	size_t n;

	ok(f != NULL, "a temporary file");
	run_log_update(f, &(struct run_log_update){.time = 1000.5, .elapsed = 2, .vtime = -1,
			.version = 7, .worker = 3, .tau = 2, .loss = 0.25, .samples = 448, .has_n = 1, .n = 64});
	n = written(f, buf, sizeof buf);
	ok(!strcmp(buf, "{\"time\":1000.500,\"elapsed\":2.000,\"version\":7,\"worker\":3,\"tau\":2,"
			"\"loss\":0.25,\"samples\":448,\"n\":64}") && n,
	   "a commit's line: %s", buf);
	ok(run_log_parse(buf, n, &l, why, sizeof why) == 0 && !l.event && l.u.version == 7 &&
		   l.u.worker == 3 && l.u.tau == 2 && l.u.loss == 0.25 && l.u.samples == 448 &&
		   l.u.has_n && l.u.n == 64 && !l.u.by_leave && l.u.time == 1000.5 && l.u.elapsed == 2 && l.u.vtime < 0,
	   "read back as written");
	run_log_line_free(&l);

	run_log_update(f, &(struct run_log_update){.time = 1, .elapsed = 2, .vtime = 3.5, .version = 8,
			.worker = 1, .loss = NAN, .samples = 448, .by_leave = 1});
	n = written(f, buf, sizeof buf);
	ok(strstr(buf, "\"vtime\":3.500000,") && strstr(buf, "\"loss\":null,") &&
		   strstr(buf, ",\"by\":\"leave\"}"), "a round a leave closed: %s", buf);
	ok(run_log_parse(buf, n, &l, why, sizeof why) == 0 && l.u.by_leave && !l.u.has_n &&
		   isnan(l.u.loss) && l.u.vtime == 3.5, "read back: null loss, by leave, vtime");
	run_log_line_free(&l);

	run_log_update(f, &(struct run_log_update){.time = 1, .elapsed = 2, .vtime = -1, .version = 5,
			.worker = 0, .tau = 1, .loss = 2.5, .samples = 80, .gossip = &g});
	n = written(f, buf, sizeof buf);
	ok(strstr(buf, "\"samples\":80,\"w\":0.5,\"msgs\":2,\"wait\":0.0010,\"peer\":3,\"dist\":0.25}"),
	   "an SGP node's iteration: %s", buf);
	g.peer = -1;
	run_log_update(f, &(struct run_log_update){.vtime = -1, .gossip = &g});
	n = written(f, buf, sizeof buf);
	ok(strstr(buf, "\"wait\":0.0010}") && !strstr(buf, "peer"), "no peer heard: none named");

	run_log_event(f, "join", -1, 4, 9, "\"rejoin\":false");
	n = written(f, buf, sizeof buf);
	ok(run_log_parse(buf, n, &l, why, sizeof why) == 0 && l.event && !strcmp(l.event, "join") &&
		   l.u.worker == 4 && l.has_version && l.u.version == 9 && l.u.time > 0,
	   "an event: %s", buf);
	run_log_line_free(&l);

	ok(parse("{\"event\":3}", &l, why) == 0 && !strcmp(l.event, ""),
	   "an event named by a number: one of a kind no reader knows");
	run_log_line_free(&l);
	ok(parse("{\"event\":\"stop\"}", &l, why) == 0 && !l.has_version && l.u.worker == -1 &&
		   isnan(l.u.time), "an event's fields are optional");
	run_log_line_free(&l);

	static const struct {
		const char *line, *why;
	} bad[] = {
		{"not json", "not JSON"},
		{"[1,2]", "not a JSON object"},
		{"{\"version\":2}", "missing \"worker\""},
		{"{\"elapsed\":1,\"version\":2,\"worker\":0,\"tau\":\"x\",\"loss\":1,\"samples\":8}",
		 "\"tau\" is not an integer"},
		{"{\"elapsed\":1,\"version\":2,\"worker\":0,\"tau\":5,\"loss\":1,\"samples\":8}",
		 "\"tau\" greater than \"version\""},
		{"{\"elapsed\":1,\"version\":-2,\"worker\":0,\"tau\":0,\"loss\":1,\"samples\":8}",
		 "negative version"},
		{"{\"version\":2,\"worker\":0,\"tau\":0,\"loss\":1,\"samples\":8}", "missing \"elapsed\""},
		{"{\"elapsed\":1,\"version\":2,\"worker\":0,\"tau\":0,\"loss\":\"a\",\"samples\":8}",
		 "\"loss\" is neither a number nor null"},
		{"{\"elapsed\":1,\"version\":2,\"worker\":0,\"tau\":0,\"loss\":1,\"samples\":8,\"n\":-1}",
		 "\"n\" is not a count of samples"},
		{"{\"event\":\"join\",\"worker\":-1}", "\"worker\" is not a worker's number"},
	};
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		why[0] = 0;
		ok(parse(bad[i].line, &l, why) == GEM_EUSAGE && !strcmp(why, bad[i].why), "%s: %s",
		   bad[i].line, why);
		run_log_line_free(&l);
	}
	ok(parse("{\"elapsed\":1.0,\"version\":2.0,\"worker\":0,\"tau\":0,\"loss\":1,\"samples\":8}",
		 &l, why) == 0 && l.u.version == 2,
	   "a count written as an integral real is read");
	run_log_line_free(&l);
	fclose(f);
	return done_testing();
}
