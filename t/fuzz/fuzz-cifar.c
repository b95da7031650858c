/* fuzz-cifar: libFuzzer target for cifar_parse, a CIFAR binary batch of --data cifar:DIR: the
 * first byte chooses CIFAR-10 (one label byte) or CIFAR-100 (two), the rest is the batch; a
 * batch taken holds whole records, no more than the room given. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "base/err.h"
#include "nn/cifar.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char err[GEM_ERRMAX];
	struct samples s = {0};
	size_t cap;
	int label_bytes;
	if (size < 1)
		return 0;
	label_bytes = 1 + (data[0] & 1);
	/* room for the whole records of the rest, and one record short of it on odd second bytes */
	cap = (size - 1) / (size_t)(label_bytes + CIFAR_PIXELS);
	if (size > 1 && data[1] & 1 && cap)
		cap--;
	s.x = malloc(cap * CIFAR_PIXELS + 1);
	s.y = malloc(cap * sizeof *s.y + 1);
	if (s.x && s.y && cifar_parse(data + 1, size - 1, label_bytes, "fuzz", &s, cap, err) == 0 &&
	    (s.n > cap || s.n * (size_t)(label_bytes + CIFAR_PIXELS) != size - 1))
		abort();
	samples_free(&s);
	return 0;
}
