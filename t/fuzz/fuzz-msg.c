/* fuzz-msg: libFuzzer target for msg_parse, the framing of every message gem receives (a
 * commit's body, params.gem, a checkpoint), and msg_parse_file, the same with a file's header
 * checksum checked first: any input is parsed or refused, never read past, and a file accepted
 * as sealed parses as a message too. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "wire/msg.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Every blob a parse hands out lies inside the buffer. */
static void check_blobs(const struct msg *m, const uint8_t *buf, size_t size)
{
	for (int i = 0; i < m->nblobs; i++) {
		const uint8_t *p = m->blob[i].data;
		if (m->blob[i].meta.nbytes && (p < buf || p + m->blob[i].meta.nbytes > buf + size))
			abort();
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char err[GEM_ERRMAX];
	struct msg m;
	/* a copy of exactly size bytes: ASan sees any read past the end */
	uint8_t *buf = malloc(size ? size : 1);
	if (!buf)
		return 0;
	memcpy(buf, data, size);
	int parsed = msg_parse(buf, size, &m, err) == 0, unsealed;
	if (parsed) {
		check_blobs(&m, buf, size);
		msg_free(&m);
	}
	if (msg_parse_file(buf, size, &m, &unsealed, err) == 0) {
		check_blobs(&m, buf, size);
		/* the checksum member is taken out; what remains is what msg_parse read */
		if (!parsed || json_object_get(m.header, MSG_HEAD_CRC))
			abort();
		msg_free(&m);
	}
	free(buf);
	return 0;
}
