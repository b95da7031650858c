/* cifar: the binary version of CIFAR-10 and CIFAR-100, as their authors distribute it. A
 * record is the label byte(s), then 3,072 pixel bytes: the 32×32 red plane, then green, then
 * blue, rows top to bottom (an image (3, 32, 32) in C order). CIFAR-10 has one label byte and
 * the files data_batch_1.bin ... data_batch_5.bin (train) and test_batch.bin; CIFAR-100 has two
 * (the coarse label, then the fine one, which gem uses) and train.bin and test.bin. */
#ifndef GEM_CIFAR_H
#define GEM_CIFAR_H
#include <stddef.h>
#include <stdint.h>

#include "nn/samples.h"

#define CIFAR_PIXELS 3072 /* 3 × 32 × 32 */
#define CIFAR_BATCHES 5   /* data_batch_1.bin ... data_batch_5.bin */

/* Count the records of the len bytes at buf (label_bytes 1 or 2 per record) into s->n after
 * the ones already there, copying their pixels and labels into s->x and s->y, which have room
 * for cap records; what names the file in an error (a size that is not a whole number of
 * records: the offset of the partial one). */
int cifar_parse(const uint8_t *buf, size_t len, int label_bytes, const char *what,
		struct samples *s, size_t cap, char *err);
/* Split "train" or "test" of the CIFAR-10 or CIFAR-100 binary files in dir (or in its
 * subdirectory cifar-10-batches-bin or cifar-100-binary, as the archives unpack). The train
 * split is data_batch_1.bin and the batches that follow it without a gap. Returns 1 (s empty)
 * when split is "test" and there is no test file: the data set has no test split. */
int cifar_load(const char *dir, const char *split, struct samples *s, char *err);
#endif
