/* fuzz-msg: libFuzzer target for msg_parse, the framing of every message gem receives (a
 * commit's body, params.gem, a checkpoint): any input is parsed or refused, never read past. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "wire/msg.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char err[GEM_ERRMAX];
	struct msg m;
	/* a copy of exactly size bytes: ASan sees any read past the end */
	uint8_t *buf = malloc(size ? size : 1);
	if (!buf)
		return 0;
	memcpy(buf, data, size);
	if (msg_parse(buf, size, &m, err) == 0) {
		/* every blob it hands out lies inside the buffer */
		for (int i = 0; i < m.nblobs; i++) {
			const uint8_t *p = m.blob[i].data;
			if (m.blob[i].meta.nbytes &&
			    (p < buf || p + m.blob[i].meta.nbytes > buf + size))
				abort();
		}
		msg_free(&m);
	}
	free(buf);
	return 0;
}
