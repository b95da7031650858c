#include "role/feedback.h"

#include <stdlib.h>
#include <string.h>

#include "base/err.h"

int feedback_open(struct feedback *f, const char *codec, const struct rule_desc *d, size_t n,
		  char *err)
{
	memset(f, 0, sizeof *f);
	f->n = n;
	if (!(f->codec = strdup(codec ? codec : BLOB_RAW)))
		return gem_errf(err, GEM_ENOMEM, "out of memory");
	if (blob_codec_check(f->codec, err) < 0)
		return GEM_EUSAGE;
	/* a few of x's elements and zeros for the rest would pull the centre to 0 */
	if (d->sends == RULE_SENDS_X && blob_codec_sparse(f->codec))
		return gem_errf(err, GEM_EUSAGE,
				"codec %s: rule %s commits the worker's whole x, which topk would "
				"cut to its largest elements; use fp16, int8 or int4", f->codec,
				d->name);
	/* error feedback for increments (a step, a cycle's delta); easgd's x is sent whole each
	 * time, so its rounding does not add up */
	if (blob_codec_lossy(f->codec) && d->sends != RULE_SENDS_X &&
	    !(f->resid = calloc(n ? n : 1, sizeof *f->resid)))
		return gem_errf(err, GEM_ENOMEM, "out of memory for the worker's %zu floats", n);
	return 0;
}

void feedback_close(struct feedback *f)
{
	free(f->codec);
	free(f->resid);
	memset(f, 0, sizeof *f);
}

void feedback_restart(struct feedback *f, size_t off, size_t len)
{
	if (f->resid)
		memset(f->resid + off, 0, len * sizeof *f->resid);
}

int feedback_encode(struct feedback *f, struct blob_codec *c, const float *v, size_t off,
		    size_t len, const void **out, struct blob_meta *meta, char *err)
{
	return blob_encode_feedback(c, v + off, f->resid ? f->resid + off : NULL, len, f->codec, -1,
				    out, meta, err);
}
