/* crc: the CRC-32 of blobs (zlib's: polynomial 0x04C11DB7, reflected, inverted in and out),
 * at memory speed. Debian's libdeflate (1.14) runs at 12.6 GB/s here; where the CPU has
 * VPCLMULQDQ and AVX-512, this folds 256 bytes a step in four 512-bit registers (doc/design.md,
 * "Where a commit's CPU went next"), and libdeflate does the rest. */
#ifndef GEM_CRC_H
#define GEM_CRC_H
#include <stddef.h>
#include <stdint.h>

/* The CRC-32 of p[0..n) continuing crc (0 to start), as zlib's crc32(crc, p, n). */
uint32_t crc32_update(uint32_t crc, const void *p, size_t n);

/* The CRC-32 of the count little-endian float32s at v (any alignment; from 0), and in the same
 * pass whether they are all finite: *finite 1 if they are, 0 if not or where the folding does
 * not run (not known). */
uint32_t crc32_f32(const void *v, size_t count, int *finite);

/* The folding to use: 1 VPCLMULQDQ where the CPU has it, 0 libdeflate alone; a level the CPU
 * lacks becomes the highest it has (tests force each). level = -1 only asks. Returns the level
 * in use before. */
int crc32_simd(int level);
#endif
