/* t3011: the names of 0.1.0, still read. A server of 0.1.0 named a server's slice of θ
 * "theta_shard" and a worker's part of the data "shard"; a sliced run of 0.1.0 keeps its servers'
 * files in shard-I-of-K/. The readers take both spellings, the writers write the new one alone
 * ("theta_slice", "part", slice-I-of-K/). */
#include "base/err.h"
#include "run/run.h"
#include "tap.h"
#include "wire/proto.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static json_t *parse(const char *text)
{
	json_t *j = json_loads(text, 0, NULL);
	if (!j)
		diag("not JSON: %s", text);
	return j;
}

static void join_replies(void)
{
	char err[GEM_ERRMAX] = "";
	struct proto_join_reply r;
	json_t *old = parse("{\"worker\":1,\"version\":4,\"shard\":[1,3]}");
	json_t *now = parse("{\"worker\":1,\"version\":4,\"part\":[2,3]}");
	json_t *both = parse("{\"worker\":1,\"part\":[0,2],\"shard\":[1,3]}");
	json_t *out;
	int rc;

	rc = proto_join_reply_from_json(old, 8, &r, err);
	ok(rc == 0 && r.part_i == 1 && r.part_n == 3,
	   "a join reply of 0.1.0: its \"shard\" is the worker's part 1/3 (%d/%d) %s", r.part_i,
	   r.part_n, err);
	rc = proto_join_reply_from_json(now, 8, &r, err);
	ok(rc == 0 && r.part_i == 2 && r.part_n == 3,
	   "a join reply's \"part\": part 2/3 (%d/%d)", r.part_i, r.part_n);
	rc = proto_join_reply_from_json(both, 8, &r, err);
	ok(rc == 0 && r.part_i == 0 && r.part_n == 2,
	   "both: \"part\" wins (%d/%d)", r.part_i, r.part_n);
	r = (struct proto_join_reply){.worker = 1, .part_i = 1, .part_n = 3};
	out = proto_join_reply_to_json(&r);
	ok(out && json_object_get(out, "part") && !json_object_get(out, "shard"),
	   "the reply written says \"part\" alone");
	json_decref(out);
	json_decref(old);
	json_decref(now);
	json_decref(both);
}

static void slices(void)
{
	char err[GEM_ERRMAX] = "";
	struct proto_health h;
	struct proto_slice s = {.i = 1, .k = 2, .off = 554, .len = 554};
	json_t *old = parse("{\"version\":3,\"workers\":2,\"stopping\":false,"
			    "\"theta_shard\":[1,2,554,554]}");
	json_t *bad = parse("{\"version\":3,\"theta_shard\":[2,2,0,1]}");
	json_t *head = json_object();
	int rc = proto_health_from_json(old, 64, &h, err);

	ok(rc == 0 && h.slice.i == 1 && h.slice.k == 2 && h.slice.off == 554 && h.slice.len == 554,
	   "a health of 0.1.0: its \"theta_shard\" is slice 1/2 at 554 (%d/%d at %llu) %s", h.slice.i,
	   h.slice.k, (unsigned long long)h.slice.off, err);
	ok(proto_health_from_json(bad, 64, &h, err) == GEM_EFAIL,
	   "an older \"theta_shard\" that is no slice is refused as a new one would be: %s", err);
	ok(proto_slice_add(head, &s) == 0 && json_object_get(head, "theta_slice") &&
		   !json_object_get(head, "theta_shard"),
	   "a header written says \"theta_slice\" alone");
	json_decref(old);
	json_decref(bad);
	json_decref(head);
}

static void dirs(void)
{
	char tmp[] = "/tmp/t3011.XXXXXX", sub[PATH_MAX], name[64];
	int i = -1, k = -1;

	ok(run_slice_dir_parse("slice-1-of-3", &i, &k) == 0 && i == 1 && k == 3, "slice-1-of-3");
	i = k = -1;
	ok(run_slice_dir_parse("shard-2-of-3", &i, &k) == 0 && i == 2 && k == 3,
	   "shard-2-of-3, a directory of 0.1.0, is slice 2/3 too");
	ok(run_slice_dir_parse("shard-3-of-3", &i, &k) < 0 &&
		   run_slice_dir_parse("shard-0-of-2x", &i, &k) < 0 &&
		   run_slice_dir_parse("shards-0-of-2", &i, &k) < 0,
	   "shard-3-of-3, shard-0-of-2x, shards-0-of-2: none");
	if (!mkdtemp(tmp))
		return (void)ok(0, "mkdtemp");
	run_slice_dir(tmp, 0, 2, name, sizeof name);
	ok(!strcmp(name, "slice-0-of-2"), "a new run's slice 0/2: slice-0-of-2 (%s)", name);
	snprintf(sub, sizeof sub, "%s/shard-0-of-2", tmp);
	mkdir(sub, 0777);
	run_slice_dir(tmp, 0, 2, name, sizeof name);
	ok(!strcmp(name, "shard-0-of-2"), "a run of 0.1.0's slice 0/2: shard-0-of-2 (%s)", name);
	ok(run_slices(tmp, name) == 2, "run_slices finds K = 2 in a run of 0.1.0");
	snprintf(sub, sizeof sub, "%s/slice-0-of-2", tmp);
	mkdir(sub, 0777);
	run_slice_dir(tmp, 0, 2, name, sizeof name);
	ok(!strcmp(name, "slice-0-of-2"), "both there: slice-0-of-2 (%s)", name);
	rmdir(sub);
	snprintf(sub, sizeof sub, "%s/shard-0-of-2", tmp);
	rmdir(sub);
	rmdir(tmp);
}

int main(void)
{
	join_replies();
	slices();
	dirs();
	return done_testing();
}
