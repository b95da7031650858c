/* progress: how far a long job is, how fast it goes, when it will end and what its loss looks
 * like, computed one way for every program that shows it (gem-serve's status line and its
 * GET /v1/stats "progress", which gem-run shows; gem-sim; gem-work --local). Also how a
 * program shows it: on a terminal a line refreshed in place, elsewhere plain lines now and then
 * or nothing (GEM_PROGRESS, gem(7)). Nothing here prints: the caller writes the text it gets. */
#ifndef GEM_PROGRESS_H
#define GEM_PROGRESS_H
#include <stddef.h>
#include <stdint.h>

#define PROGRESS_LOSS_ALPHA 0.05  /* the smoothed loss: an average of about the last 20 updates */
#define PROGRESS_RATE_TAU 5.0     /* the rates: an average over about the last 5 s */
#define PROGRESS_RATE_DT 0.5      /* ... measured over intervals of at least this many seconds */

/* A job's meter. Zero it, then progress_start. */
struct progress {
	uint64_t total;               /* samples of the whole job; 0: unknown */
	uint64_t version, samples;    /* where it stands */
	uint64_t version0, samples0;  /* ... at the session's start */
	double t0;                    /* the session's start */
	double last_t;                /* the last rate measure: time, version, samples */
	uint64_t last_version, last_samples;
	double ups, sps;              /* smoothed updates and samples per second; < 0: not yet */
	double loss_acc, loss_w;      /* the smoothed loss, before and its bias correction */
};

/* Where a job stands, for a line or GET /v1/stats. */
struct progress_now {
	uint64_t version, samples, total; /* total 0: unknown */
	double fraction;       /* samples / total in [0, 1]; < 0: total unknown */
	double updates_per_s;  /* smoothed (the session's mean until a rate is measured) */
	double samples_per_s;
	double eta;            /* seconds left at samples_per_s; < 0: unknown */
	double loss;           /* smoothed; NaN: no loss seen */
	double seconds;        /* since the session's start */
};

/* Start a session at version and samples, out of total samples (0: unknown), at time now. */
void progress_start(struct progress *p, uint64_t version, uint64_t samples, uint64_t total,
		    double now);
/* The job's total changed (a worker more, a budget learnt). */
void progress_set_total(struct progress *p, uint64_t total);
/* The job goes on at now after a pause (a server's first worker joins): the time before is
 * not in its rates. */
void progress_resume(struct progress *p, double now);
/* The job stands at version and samples at time now (call after every update; cheap). */
void progress_at(struct progress *p, uint64_t version, uint64_t samples, double now);
/* One update's loss (non-finite ones are skipped). */
void progress_loss(struct progress *p, double loss);
/* Where the job stands at time now (its rates count the time since the last update). */
void progress_get(const struct progress *p, double now, struct progress_now *out);
/* n in words for a line: "version 120  3200/60000 samples (5.3%)  41.0 updates/s  ETA 1:12
 * loss 0.5123" (the parts that are unknown left out). Returns line. */
char *progress_line(const struct progress_now *n, char *line, size_t cap);
/* Seconds as "1:05", "1:02:03", "3d 4:05:06"; "?" below 0. Returns out. */
char *progress_hms(double seconds, char *out, size_t cap);

/* How a program shows its progress on stderr. */
enum progress_mode {
	PROGRESS_OFF,   /* nothing */
	PROGRESS_TTY,   /* one line refreshed in place (\r), 4 times a second */
	PROGRESS_LINES, /* a plain line every `every` seconds */
};
struct progress_show {
	int mode;
	double every; /* seconds between two lines */
	double last;  /* when the last one was shown; < 0: never */
	int shown;    /* a TTY line is on the screen: end it with a newline */
};
#define PROGRESS_LINES_EVERY 30.0

/* The mode: off with quiet; else GEM_PROGRESS's value env (NULL or "": "tty" on a terminal,
 * else "off"), "tty", "lines", "lines:SECONDS" or "off". GEM_EUSAGE (err says why) on another
 * value. */
int progress_show_init(struct progress_show *sh, const char *env, int tty, int quiet, char *err);
/* 1 when a line is due at now (and counts it as shown), else 0. */
int progress_show_due(struct progress_show *sh, double now);
/* The bytes to write for line of program prog: "\rprog: line\033[K" on a terminal, "prog:
 * line\n" otherwise. Returns out. */
char *progress_show_text(struct progress_show *sh, const char *prog, const char *line, char *out,
			 size_t cap);
/* What to write when the display ends: "\n" after a line refreshed in place, else "". */
const char *progress_show_end(struct progress_show *sh);
#endif
