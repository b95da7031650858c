/* t2012: CIFAR binary batches (files made here in the exact format: no CIFAR copy exists
 * offline) load from the directory the archive unpacks to, CIFAR-10's batches in order and
 * CIFAR-100's fine labels; a batch cut short names the offset of its partial record; a gap in the
 * batches, an empty batch and a directory without batches are refused. */
#include "nn/cifar.h"
#include "data-test.h"

/* s holds records first .. first + n - 1 as gem-arrays.py writes them. */
static int records_ok(const struct samples *s, size_t first, int labels_mod)
{
	const unsigned char *x = s->x;
	for (size_t i = 0; i < s->n; i++) {
		size_t r = first + i;
		if (s->y[i] != r % (size_t)labels_mod)
			return 0;
		for (size_t j = 0; j < CIFAR_PIXELS; j++)
			if (x[i * CIFAR_PIXELS + j] != xb(r, j))
				return 0;
	}
	return s->ndim == 3 && s->shape[0] == 3 && s->shape[1] == 32 && s->shape[2] == 32 &&
	       s->type == SAMPLES_U8 && s->dim == CIFAR_PIXELS;
}

int main(void)
{
	char err[GEM_ERRMAX] = "";
	struct samples s;
	fixtures("cifar");
	ok(cifar_load(fx("c10"), "train", &s, err) == 0 && s.n == 12 && records_ok(&s, 0, N_CLASSES) &&
		   s.classes == N_CLASSES,
	   "CIFAR-10 in cifar-10-batches-bin/: data_batch_1..3, 4 records each, in order (%s)", err);
	samples_free(&s);
	ok(cifar_load(fx("c10"), "test", &s, err) == 0 && s.n == 3 && records_ok(&s, 100, N_CLASSES),
	   "CIFAR-10 test_batch.bin (%s)", err);
	samples_free(&s);
	ok(cifar_load(fx("c100"), "train", &s, err) == 0 && s.n == N_SAMPLES && records_ok(&s, 0, N_CLASSES),
	   "CIFAR-100 train.bin: the fine label, after the coarse one (%s)", err);
	samples_free(&s);
	ok(cifar_load(fx("c100"), "test", &s, err) == 1 && !s.x, "CIFAR-100 without test.bin: no test split");
	ok(bad(cifar_load(fx("cut"), "train", &s, err), err, "data_batch_1.bin: 6046 bytes",
	       "3073-byte CIFAR records", "offset 3073 is cut short") && !s.x,
	   "a batch cut short (%s)", err);
	ok(bad(cifar_load(fx("gap"), "train", &s, err), err, "data_batch_3.bin but no data_batch_2.bin"),
	   "a gap in the batches (%s)", err);
	ok(bad(cifar_load(fx("empty"), "train", &s, err), err, "data_batch_1.bin: empty file"),
	   "an empty batch (%s)", err);
	ok(bad(cifar_load(fx("."), "train", &s, err), err, "no CIFAR binary files", "test_batch.bin"),
	   "no batches at all (%s)", err);
	ok(bad(cifar_load(fx("c10"), "valid", &s, err), err, "unknown split 'valid'"),
	   "an unknown split (%s)", err);
	fixtures_remove();
	return done_testing();
}
