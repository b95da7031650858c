/* t3800: the progress arithmetic every program shows (role/progress): rates smoothed over time,
 * the ETA out of a known total, a smoothed loss that starts at the first loss, the line in
 * words, and the display modes of GEM_PROGRESS (refreshed in place, plain lines, off). */
#include "base/err.h"
#include "role/progress.h"
#include "tap.h"

#include <math.h>
#include <string.h>

int main(void)
{
	struct progress p;
	struct progress_now n;
	struct progress_show sh;
	char line[256], err[GEM_ERRMAX], buf[300], hms[32];

	/* 100 samples (2 updates) a second from version 10, 1000 samples, out of 5000 */
	progress_start(&p, 10, 1000, 5000, 100.0);
	progress_get(&p, 100.0, &n);
	ok(n.updates_per_s == 0 && n.eta < 0 && n.fraction == 0.2, "at the start: no rate, no ETA, 20%%");
	ok(isnan(n.loss), "no loss before the first");
	for (int i = 1; i <= 40; i++)
		progress_at(&p, 10 + 2 * (uint64_t)i, 1000 + 100 * (uint64_t)i, 100.0 + i);
	progress_get(&p, 140.0, &n);
	is_near(n.samples_per_s, 100, 1e-9, "a steady rate is measured exactly (samples/s)");
	is_near(n.updates_per_s, 2, 1e-9, "... and updates/s");
	is_near(n.eta, (5000.0 - 5000.0) / 100, 1e-9, "at 5000 of 5000 samples: ETA 0");
	ok(n.version == 90 && n.samples == 5000 && n.fraction == 1, "where it stands: version 90, 100%%");

	/* a rate that halves: the smoothed one moves toward it, neither jumps nor lags forever */
	progress_start(&p, 0, 0, 100000, 0.0);
	for (int i = 1; i <= 10; i++)
		progress_at(&p, (uint64_t)i, 100 * (uint64_t)i, i);
	for (int i = 1; i <= 2; i++)
		progress_at(&p, 10 + (uint64_t)i, 1000 + 50 * (uint64_t)i, 10.0 + i);
	progress_get(&p, 12.0, &n);
	ok(n.samples_per_s < 100 && n.samples_per_s > 50, "a halved rate: smoothed between (%g)",
	   n.samples_per_s);
	is_near(n.eta, (100000.0 - 1100) / n.samples_per_s, 1e-6, "ETA: samples left at that rate");
	for (int i = 3; i <= 60; i++)
		progress_at(&p, 10 + (uint64_t)i, 1000 + 50 * (uint64_t)i, 10.0 + i);
	progress_get(&p, 70.0, &n);
	is_near(n.samples_per_s, 50, 0.1, "... and reaches it after a while (%g)", n.samples_per_s);

	/* measures closer than PROGRESS_RATE_DT are taken together */
	progress_start(&p, 0, 0, 0, 0.0);
	progress_at(&p, 1, 10, 0.1);
	progress_get(&p, 0.2, &n);
	is_near(n.samples_per_s, 50, 1e-9, "before the first measure: the session's mean");
	ok(n.eta < 0 && n.fraction < 0, "an unknown total: no ETA, no fraction");

	/* a job that stalls slows down; a pause before its start (an idle server) does not count */
	progress_start(&p, 0, 0, 0, 0.0);
	for (int i = 1; i <= 10; i++)
		progress_at(&p, (uint64_t)i, 100 * (uint64_t)i, i);
	progress_get(&p, 15.0, &n);
	is_near(n.samples_per_s, 100 * exp(-5 / PROGRESS_RATE_TAU), 1e-9,
		"5 s without an update: the rate falls (%g)", n.samples_per_s);
	progress_start(&p, 0, 0, 0, 0.0);
	progress_resume(&p, 100.0);
	progress_get(&p, 100.4, &n);
	ok(n.samples_per_s == 0 && n.seconds < 0.5, "resumed: the session starts then");
	progress_at(&p, 1, 100, 101.0);
	progress_get(&p, 101.2, &n);
	is_near(n.samples_per_s, 100, 1e-9, "the 100 s idle before are not in the rate");

	/* the smoothed loss */
	progress_start(&p, 0, 0, 0, 0.0);
	progress_loss(&p, 2.0);
	progress_get(&p, 1.0, &n);
	is_near(n.loss, 2.0, 1e-12, "the first loss is the smoothed loss (no pull toward 0)");
	progress_loss(&p, NAN);
	progress_loss(&p, INFINITY);
	progress_get(&p, 1.0, &n);
	is_near(n.loss, 2.0, 1e-12, "non-finite losses are skipped");
	for (int i = 0; i < 200; i++)
		progress_loss(&p, 1.0);
	progress_get(&p, 1.0, &n);
	is_near(n.loss, 1.0, 1e-4, "a new level is reached after many updates");
	progress_loss(&p, 11.0);
	progress_get(&p, 1.0, &n);
	is_near(n.loss, 1.0 + 10 * PROGRESS_LOSS_ALPHA, 1e-3, "one outlier moves it by alpha only");

	/* in words */
	n = (struct progress_now){.version = 120, .samples = 3200, .total = 60000,
				  .fraction = 3200.0 / 60000, .updates_per_s = 41, .eta = 72,
				  .loss = 0.51234};
	progress_line(&n, line, sizeof line);
	ok(!strcmp(line, "version 120  3200/60000 samples (5.3%)  41.0 updates/s  ETA 1:12  loss 0.5123"),
	   "the line: %s", line);
	n.total = 0;
	n.loss = NAN;
	progress_line(&n, line, sizeof line);
	ok(!strcmp(line, "version 120  3200 samples  41.0 updates/s"), "unknown parts left out: %s",
	   line);
	ok(!strcmp(progress_hms(3723, hms, sizeof hms), "1:02:03") &&
	   !strcmp(progress_hms(59.6, hms, sizeof hms), "1:00") &&
	   !strcmp(progress_hms(90061, hms, sizeof hms), "1d 1:01:01") &&
	   !strcmp(progress_hms(-1, hms, sizeof hms), "?"), "durations");

	/* the display modes */
	ok(progress_show_init(&sh, NULL, 1, 0, err) == 0 && sh.mode == PROGRESS_TTY,
	   "a terminal: refreshed in place");
	ok(progress_show_init(&sh, NULL, 0, 0, err) == 0 && sh.mode == PROGRESS_OFF,
	   "not a terminal: nothing");
	ok(progress_show_init(&sh, "tty", 1, 1, err) == 0 && sh.mode == PROGRESS_OFF, "-q wins");
	ok(progress_show_init(&sh, "tty", 0, 0, err) == 0 && sh.mode == PROGRESS_TTY,
	   "GEM_PROGRESS=tty forces it");
	ok(progress_show_due(&sh, 10) && !progress_show_due(&sh, 10.1) && progress_show_due(&sh, 10.3),
	   "tty: at once, then 4 times a second");
	progress_show_text(&sh, "gem-x", "version 1", buf, sizeof buf);
	ok(!strcmp(buf, "\rgem-x: version 1\033[K"), "tty: the line over the last one");
	ok(!strcmp(progress_show_end(&sh), "\n") && !strcmp(progress_show_end(&sh), ""),
	   "tty: one newline at the end");
	ok(progress_show_init(&sh, "lines:2", 1, 0, err) == 0 && sh.mode == PROGRESS_LINES &&
	   sh.every == 2, "GEM_PROGRESS=lines:2");
	ok(!progress_show_due(&sh, 0) && !progress_show_due(&sh, 1) && progress_show_due(&sh, 2) &&
	   !progress_show_due(&sh, 3) && progress_show_due(&sh, 4.5), "lines: every 2 s, not at once");
	progress_show_text(&sh, "gem-x", "version 1", buf, sizeof buf);
	ok(!strcmp(buf, "gem-x: version 1\n") && !strcmp(progress_show_end(&sh), ""),
	   "lines: plain lines, nothing at the end");
	ok(progress_show_init(&sh, "lines", 0, 0, err) == 0 && sh.every == PROGRESS_LINES_EVERY,
	   "GEM_PROGRESS=lines: every %g s", PROGRESS_LINES_EVERY);
	ok(progress_show_init(&sh, "off", 1, 0, err) == 0 && !progress_show_due(&sh, 100), "off");
	ok(progress_show_init(&sh, "yes", 1, 0, err) == GEM_EUSAGE && strstr(err, "GEM_PROGRESS=yes"),
	   "a bad value is refused: %s", err);
	ok(progress_show_init(&sh, "lines:x", 1, 0, err) == GEM_EUSAGE &&
	   progress_show_init(&sh, "linesx", 1, 0, err) == GEM_EUSAGE &&
	   progress_show_init(&sh, "lines:-1", 1, 0, err) == GEM_EUSAGE, "bad intervals are refused");
	return done_testing();
}
