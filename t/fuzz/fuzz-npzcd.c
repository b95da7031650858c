/* fuzz-npzcd: libFuzzer target for the fields of an .npz's central directory and its zip64
 * records, which a byte-level mutation of a whole file rarely reaches intact: a valid stored
 * member (x.npy, a small float32 array) is written with a central directory entry and end
 * records made from the input, then opened and extracted as gem-init and gem-eval do. Input:
 * flags (1 byte: 1, 2, 4 give usize, csize and the offset as 0xFFFFFFFF with their value in a
 * zip64 extra field; 8 adds a zip64 end record and locator; 16 ends the zip64 field 8 bytes
 * short), usize, csize and offset (8 bytes each, little-endian: the low 32 bits without the
 * flag), the zip64 end record's entry count, directory size and offset (8 bytes each, with 8),
 * then bytes appended to the entry's extra field. Whatever it is, nothing is read outside the
 * file and an extracted member is exactly its size. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "nn/npz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint8_t *put(uint8_t *p, uint64_t v, int bytes)
{
	for (int i = 0; i < bytes; i++)
		*p++ = (uint8_t)(v >> (8 * i));
	return p;
}

static uint64_t get64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* a .npy of 2 float32: its header padded to 64 bytes, as numpy writes it */
	static const char hdr[] = "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }";
	uint8_t npy[72], *buf, *p, *cd;
	uint64_t f[3], e64[3] = {1, 0, 0};
	size_t nx, hl = sizeof hdr - 1, local, body;
	int flags;
	char err[GEM_ERRMAX];
	struct npz z;
	if (size < 25 || size > 4096)
		return 0;
	flags = data[0];
	for (int k = 0; k < 3; k++)
		f[k] = get64(data + 1 + 8 * k);
	data += 25, size -= 25;
	if (flags & 8) {
		if (size < 24)
			return 0;
		for (int k = 0; k < 3; k++)
			e64[k] = get64(data + 8 * k);
		data += 24, size -= 24;
	}
	nx = size;
	memcpy(npy, "\x93NUMPY\x01\x00", 8);
	put(npy + 8, 56, 2);
	memset(npy + 10, ' ', 54);
	memcpy(npy + 10, hdr, hl);
	npy[63] = '\n';
	memset(npy + 64, 0, 8);
	if (!(buf = malloc(30 + 5 + sizeof npy + 46 + 5 + 28 + nx + 56 + 20 + 22)))
		return 0;
	/* the local header and the member, stored */
	p = put(buf, 0x04034b50u, 4);
	p = put(p, 20, 2), p = put(p, 0, 2), p = put(p, 0, 2), p = put(p, 0, 4);
	p = put(p, 0, 4); /* CRC: the member is refused by it if it is read at all */
	p = put(p, sizeof npy, 4), p = put(p, sizeof npy, 4);
	p = put(p, 5, 2), p = put(p, 0, 2);
	memcpy(p, "x.npy", 5), p += 5;
	memcpy(p, npy, sizeof npy), p += sizeof npy;
	local = (size_t)(p - buf);
	/* the central directory entry, its fields the input's */
	cd = p;
	{
		size_t z64 = 8 * (size_t)(!!(flags & 1) + !!(flags & 2) + !!(flags & 4));
		size_t xl = (z64 ? 4 + z64 : 0) + nx;
		uint16_t sz = (uint16_t)(z64 && (flags & 16) && z64 >= 8 ? z64 - 8 : z64);
		p = put(p, 0x02014b50u, 4);
		p = put(p, 45, 2), p = put(p, 45, 2), p = put(p, 0, 2), p = put(p, 0, 2), p = put(p, 0, 4);
		p = put(p, 0, 4);
		p = put(p, flags & 2 ? 0xFFFFFFFFu : (uint32_t)f[1], 4);
		p = put(p, flags & 1 ? 0xFFFFFFFFu : (uint32_t)f[0], 4);
		p = put(p, 5, 2), p = put(p, xl, 2), p = put(p, 0, 2), p = put(p, 0, 2), p = put(p, 0, 2);
		p = put(p, 0, 4);
		p = put(p, flags & 4 ? 0xFFFFFFFFu : (uint32_t)f[2], 4);
		memcpy(p, "x.npy", 5), p += 5;
		if (z64) {
			p = put(p, 1, 2), p = put(p, sz, 2);
			for (int k = 0; k < 3; k++)
				if (flags & (1 << k))
					p = put(p, f[k], 8);
		}
		memcpy(p, data, nx), p += nx;
	}
	body = (size_t)(p - cd);
	if (flags & 8) {
		/* the zip64 end record, then its locator */
		uint8_t *r = p;
		p = put(p, 0x06064b50u, 4), p = put(p, 44, 8), p = put(p, 45, 2), p = put(p, 45, 2);
		p = put(p, 0, 4), p = put(p, 0, 4), p = put(p, e64[0], 8), p = put(p, e64[0], 8);
		p = put(p, e64[1] ? e64[1] : body, 8), p = put(p, e64[2] ? e64[2] : local, 8);
		p = put(p, 0x07064b50u, 4), p = put(p, 0, 4), p = put(p, (uint64_t)(r - buf), 8);
		p = put(p, 1, 4);
	}
	p = put(p, 0x06054b50u, 4), p = put(p, 0, 2), p = put(p, 0, 2);
	p = put(p, flags & 8 ? 0xFFFF : 1, 2), p = put(p, flags & 8 ? 0xFFFF : 1, 2);
	p = put(p, flags & 8 ? 0xFFFFFFFFu : body, 4);
	p = put(p, flags & 8 ? 0xFFFFFFFFu : local, 4);
	p = put(p, 0, 2);
	if (npz_open(buf, (size_t)(p - buf), "fuzz", &z, err) == 0) {
		for (int i = 0; i < z.n; i++) {
			uint8_t *m;
			size_t len;
			/* a member taken lies inside the file: its bytes were read */
			if (npz_extract(&z, i, &m, &len, err) == 0) {
				if (len != z.m[i].usize || m[len] != 0 || z.m[i].offset >= (uint64_t)(p - buf))
					abort();
				free(m);
			}
		}
		npz_close(&z);
	}
	free(buf);
	return 0;
}
