/* fuzz-proto: libFuzzer target for wire/proto, the one reader of gem-protocol(7)'s headers and
 * bodies (join, its reply, commit, leave, health, stats, hello, push, bye). The first byte
 * picks the message, the rest is its JSON. A message taken has its members in their ranges, and
 * what its to-JSON writes is taken back the same (a reader and its writer agree). */
#include <jansson.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "wire/proto.h"

#define FUZZ_WORKERS 4096
#define FUZZ_EPOCHS 220
#define FUZZ_SLICES 64

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int ok)
{
	if (!ok)
		abort();
}

static void join(const json_t *j)
{
	char err[GEM_ERRMAX];
	struct proto_join a, b;
	json_t *o;
	if (proto_join_from_json(j, FUZZ_WORKERS, FUZZ_EPOCHS, &a, err) < 0)
		return;
	check(a.worker >= -1 && a.worker < FUZZ_WORKERS && !(a.steps && a.epochs));
	check(a.steps <= PROTO_JOIN_STEPS_MAX && a.epochs <= FUZZ_EPOCHS);
	o = proto_join_to_json(&a);
	check(o && proto_join_from_json(o, FUZZ_WORKERS, FUZZ_EPOCHS, &b, err) == 0);
	check(a.worker == b.worker && a.steps == b.steps && a.epochs == b.epochs &&
	      !a.codec == !b.codec && (!a.codec || !strcmp(a.codec, b.codec)));
	json_decref(o);
}

static void commit(const json_t *j)
{
	char err[GEM_ERRMAX];
	struct proto_commit a, b;
	json_t *o;
	if (proto_commit_from_json(j, FUZZ_WORKERS, 4, &a, err) < 0)
		return;
	check(a.worker >= 0 && a.worker < FUZZ_WORKERS && a.fragment >= 0 && a.fragment < 4);
	check(a.samples <= PROTO_SAMPLES_MAX && (isnan(a.loss) || isfinite(a.loss)));
	check(a.idle == -1 || (a.idle >= 0 && a.idle < 1e9));
	o = proto_commit_to_json(&a);
	check(o && proto_commit_from_json(o, FUZZ_WORKERS, 4, &b, err) == 0);
	check(a.worker == b.worker && a.base == b.base && a.seq == b.seq && a.samples == b.samples &&
	      (a.loss == b.loss || (isnan(a.loss) && isnan(b.loss))) && a.idle == b.idle &&
	      a.fragment == b.fragment);
	json_decref(o);
}

static void leave(const json_t *j)
{
	char err[GEM_ERRMAX];
	struct proto_leave a, b;
	json_t *o;
	if (proto_leave_from_json(j, FUZZ_WORKERS, &a, err) < 0)
		return;
	check(a.worker >= 0 && a.worker < FUZZ_WORKERS && a.how >= 0 && a.how <= 2);
	o = proto_leave_to_json(&a);
	check(o && proto_leave_from_json(o, FUZZ_WORKERS, &b, err) == 0);
	check(a.worker == b.worker && a.how == b.how);
	json_decref(o);
}

static void replies(const json_t *j)
{
	char err[GEM_ERRMAX];
	struct proto_join_reply r;
	struct proto_vec v;
	struct proto_health h;
	struct proto_stats s;
	if (proto_join_reply_from_json(j, FUZZ_WORKERS, &r, err) == 0)
		check(r.worker >= 0 && r.worker < FUZZ_WORKERS && r.part_n >= 0 &&
		      (r.part_n == 0 || (r.part_i >= 0 && r.part_i < r.part_n)) && r.window >= 0);
	if (proto_vec_from_json(j, &v, err) == 0)
		check(v.slice.k >= 0 && (v.slice.k == 0 || v.slice.i < v.slice.k) && v.window >= 0);
	if (proto_health_from_json(j, FUZZ_SLICES, &h, err) == 0) {
		json_t *o = proto_health_to_json(&h);
		struct proto_health b;
		check(h.slice.k <= FUZZ_SLICES && (h.slice.k == 0 || h.slice.i < h.slice.k));
		check(o && proto_health_from_json(o, FUZZ_SLICES, &b, err) == 0);
		check(b.version == h.version && b.stopping == h.stopping && b.slice.i == h.slice.i &&
		      b.slice.k == h.slice.k && b.slice.off == h.slice.off && b.slice.len == h.slice.len);
		json_decref(o);
	}
	if (proto_stats_from_json(j, &s, err) == 0)
		check(s.progress.slowest >= -1);
}

static void sgp(const json_t *j)
{
	char err[GEM_ERRMAX];
	struct proto_hello h, h2;
	struct proto_push p;
	long long node;
	json_t *o;
	if (proto_hello_from_json(j, 8, 3, &h, err, sizeof err) == 0) {
		check(h.node >= 0 && h.node < 8 && h.node != 3 && strlen(h.hash) == 16 && h.topology);
		/* what a node writes of a hello of its range is taken back the same */
		if (h.nodes >= 0 && h.nodes < 1 << 30 && h.peers_per_iter >= 0 &&
		    h.peers_per_iter < 1 << 30 && h.iters >= 0) {
			o = proto_hello_to_json(&h);
			check(o && proto_hello_from_json(o, 8, 3, &h2, err, sizeof err) == 0);
			check(h2.node == h.node && h2.nodes == h.nodes && h2.iters == h.iters &&
			      !strcmp(h2.hash, h.hash) && !strcmp(h2.topology, h.topology));
			json_decref(o);
		}
	}
	if (proto_push_from_json(j, 8, 3, &p) == 0)
		check(p.node >= 0 && p.node < 8 && p.node != 3 && p.w > 0 && p.w <= 8);
	if (proto_bye_from_json(j, &node) == 0)
		check(json_is_integer(json_object_get(j, "node")));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	json_t *j;
	if (size < 1)
		return 0;
	if (!(j = json_loadb((const char *)data + 1, size - 1, 0, NULL)))
		return 0;
	switch (data[0] % 5) {
	case 0: join(j); break;
	case 1: commit(j); break;
	case 2: leave(j); break;
	case 3: replies(j); break;
	default: sgp(j); break;
	}
	json_decref(j);
	return 0;
}
