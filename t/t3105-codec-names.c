/* t3105: a worker's codec names are its own copies (role/feedback, role/vworker): a replay reads
 * each from a join line into a buffer that is gone once the line is replayed, and its virtual
 * worker must go on committing in that codec, and receiving θ in its reply codec, after that. */
#include "base/err.h"
#include "layout-test.h"
#include "role/feedback.h"
#include "role/vworker.h"
#include "tap.h"

#include <string.h>

int main(void)
{
	char err[GEM_ERRMAX], name[BLOB_CODEC_MAX], reply[BLOB_CODEC_MAX];
	float v[300];
	struct run run;
	struct feedback f;
	struct vworker w;
	struct blob_codec c;
	struct blob_meta m;
	struct layout lo = layout_n(300);
	const void *enc;

	for (int i = 0; i < 300; i++)
		v[i] = (float)i / 300 - 0.4f;
	memset(&run, 0, sizeof run);
	run.spec.train.lr = 0.1f;
	ok(rule_config_default("gem", &run.spec.rule, err) == 0, "gem's defaults");

	snprintf(name, sizeof name, "int8");
	ok(feedback_open(&f, name, rule_describe("gem"), 300, err) == 0, "feedback in int8");
	memset(name, 0, sizeof name);
	ok(!strcmp(f.codec, "int8"), "the caller's buffer cleared: still int8 (\"%s\")", f.codec);
	blob_codec_init(&c);
	ok(feedback_encode(&f, &c, v, 0, 300, &enc, &m, err) == 0 && !strcmp(m.codec, "int8"),
	   "its commit is encoded in int8 (%s)", m.codec);
	blob_codec_free(&c);
	feedback_close(&f);

	ok(vworker_open(&w, 0, &run, &lo, err) == 0, "a virtual worker");
	snprintf(name, sizeof name, "topk:0.1");
	snprintf(reply, sizeof reply, "fp16");
	ok(vworker_codec(&w, &run, name, reply, NULL, 0, err) == 0, "its codecs: topk:0.1, θ in fp16");
	snprintf(name, sizeof name, "raw");
	snprintf(reply, sizeof reply, "raw");
	ok(!strcmp(w.fb.codec, "topk:0.1") && !strcmp(w.reply_codec, "fp16"),
	   "the caller's buffers reused: its commits in %s, θ in %s", w.fb.codec, w.reply_codec);
	ok(vworker_codec(&w, &run, name, NULL, NULL, 0, err) == 0 && !strcmp(w.fb.codec, "raw") &&
	   !strcmp(w.reply_codec, "raw"), "a join in raw: raw both ways");
	vworker_close(&w);
	return done_testing();
}
