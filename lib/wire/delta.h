/* delta: θ replies to a peer that commits in int8, int4 or topk, as deltas from the copy of θ
 * the peer holds. Sender and receiver each keep that copy x̂, as the receiver decoded it; the
 * sender encodes C(θ − x̂) in the peer's codec and both add the decoded message to x̂, so the two
 * copies stay equal bit for bit and what the codec left out of one reply goes with the next:
 * error feedback by construction, and nothing drifts however lossy the codec. The first reply,
 * and the first after delta_restart, is θ whole in fp16 (blob_codec_for_theta), and both copies
 * start over from it. gem-serve keeps one per such worker, gem-work one per server, gem-sim's
 * virtual workers one per slice: the same functions on both sides. Each side goes over θ, the
 * copy and the message in one pass (blob_encode_diff, blob_take_diff), the copy's CRC-32 taken
 * in it. */
#ifndef GEM_DELTA_H
#define GEM_DELTA_H
#include <stddef.h>
#include <stdint.h>

#include "wire/blob.h"

#define DELTA_BLOB "delta"     /* a reply blob added to the copy; "params" (θ) replaces it */
/* θ or a copy as large as this in magnitude goes whole: below it θ − x̂ and every codec's
 * scale are finite. */
#define DELTA_BOUND 0x1p125f

struct delta {
	float *copy; /* x̂, n floats; NULL: the peer's codec takes θ whole, no copy is kept */
	size_t n;
	char codec[BLOB_CODEC_MAX]; /* the peer's commits' (a sender's name, "topk:0.01") */
	int whole;   /* the next reply is θ whole */
	uint32_t crc; /* the CRC-32 of the copy, when crc_known (after a delta sent or taken) */
	int crc_known;
};

/* 1 if replies to a peer committing in codec go as deltas (int8, int4, topk:F). */
int delta_wanted(const char *codec);
/* For a peer committing in codec (NULL: raw), n floats: a copy when delta_wanted(codec).
 * GEM_EUSAGE: not a sender's codec; GEM_ENOMEM. delta_close frees d even then. */
int delta_open(struct delta *d, const char *codec, size_t n, char *err);
void delta_close(struct delta *d);
/* The next reply is θ whole (a join, a resent commit whose first reply may be lost). */
void delta_restart(struct delta *d);
/* Sender: the blob of the reply θ (n floats, not written) in c, with *name its blob name
 * (MSG_PARAMS or DELTA_BLOB); x̂ updated (a delta: in the encoder's passes, blob_encode_diff).
 * Without a copy, θ whole in blob_codec_for_theta. *out and meta as blob_encode's. */
int delta_encode(struct delta *d, struct blob_codec *c, const float *theta, const void **out,
		 struct blob_meta *meta, const char **name, char *err);
/* Receiver: the decoded blob got (n floats) of a reply, a delta (is_delta) or θ, into the copy,
 * and the copy into v (n floats; may be got). GEM_EFAIL: a delta with no copy to add it to. */
int delta_take(struct delta *d, int is_delta, const float *got, float *v, char *err);
/* The CRC-32 of the copy (crc32_f32's; 0 without one), as a reply's copy_crc32 carries it
 * (proto_crc_add). */
uint32_t delta_crc(const struct delta *d);
#endif
