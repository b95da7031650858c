/* t2011: IDX beyond Fashion-MNIST: colour images (N, C, H, W) in idx4 files, float32 images
 * (type 0x0D, big-endian) with int32 labels past 255, the dotted names (train-images.idx3-ubyte,
 * test-...), gzip under either name; a data set without test files has no test split; a header
 * that lies about its sizes, images and labels of different counts, and damaged headers are
 * refused before anything is allocated for them. */
#include "nn/idx.h"
#include "data-test.h"

#include <zlib.h>

static void loads(const char *dir, const char *split, int c, int bytes)
{
	char err[GEM_ERRMAX] = "";
	struct samples s;
	int rc = idx_dir_load(fx(dir), split, &s, err);
	ok(rc == 0 && s.n == N_SAMPLES && s.ndim == 3 && s.shape[0] == c && s.shape[1] == 4 &&
		   s.shape[2] == 4 && (bytes ? bytes_ok(&s) && labels_ok(&s) : floats_ok(&s)),
	   "%s %s: (%d, 4, 4) %s (%s)", dir, split, c, bytes ? "bytes" : "floats", err);
	samples_free(&s);
}

/* idx_parse of the bytes b[0..n) fails saying want. */
static void parse_refused(const unsigned char *b, size_t n, const char *want, const char *title)
{
	char err[GEM_ERRMAX] = "";
	struct idx_array a;
	ok(bad(idx_parse(b, n, "mem", &a, err), err, "mem: ", want), "%s: %s", title, err);
}

int main(void)
{
	char err[GEM_ERRMAX] = "";
	struct samples s;
	static const unsigned char hdr4[] = {0, 0, 8, 4, 0, 0, 0, 1, 0, 0, 0, 3, 0, 0, 0, 2, 0, 0, 0, 2};
	unsigned char buf[64];

	fixtures("idx");
	loads("colour", "train", 3, 1);
	loads("colour", "test", 3, 1);
	loads("dotted", "train", 1, 1);
	loads("dotted", "test", 1, 1);
	loads("gz", "train", 1, 1);
	loads("float", "train", 1, 0);
	ok(idx_dir_load(fx("float"), "train", &s, err) == 0 && s.y[11] == 55000 && s.classes == 55001,
	   "int32 IDX labels up to 55000 (%s)", err);
	samples_free(&s);
	ok(idx_dir_load(fx("notest"), "test", &s, err) == 1 && !s.x, "no test files: no test split (1)");
	ok(bad(idx_dir_load(fx("lie"), "train", &s, err), err, "train-images-idx3-ubyte",
	       "more elements than the file's 64 data bytes hold"),
	   "sizes of 2^32 - 1 in a header of 64 data bytes: refused (%s)", err);
	ok(bad(idx_dir_load(fx("mismatch"), "train", &s, err), err, "13 samples, but", "12 labels"),
	   "13 images, 12 labels: refused (%s)", err);
	ok(bad(idx_dir_load(fx("."), "train", &s, err), err, "no train images",
	       "train-images.idx3-ubyte"),
	   "a directory of no IDX files: the names looked for (%s)", err);

	memcpy(buf, hdr4, sizeof hdr4);
	memset(buf + sizeof hdr4, 7, 12);
	parse_refused(buf, sizeof hdr4 + 11, "11 data bytes", "one byte short");
	parse_refused(buf, sizeof hdr4 + 13, "data after them", "one byte long");
	parse_refused(buf, 10, "truncated IDX header", "a cut header");
	parse_refused(buf, 0, "empty file", "nothing");
	buf[0] = 1;
	parse_refused(buf, sizeof hdr4 + 12, "not an IDX file", "bad magic");
	buf[0] = 0, buf[2] = 0x0A;
	parse_refused(buf, sizeof hdr4 + 12, "unknown IDX element type 0x0a", "an unknown type");
	buf[2] = 8, buf[3] = 5;
	parse_refused(buf, sizeof hdr4 + 12, "5 dimensions", "5 dimensions");
	buf[3] = 4, buf[7] = 0;
	parse_refused(buf, sizeof hdr4 + 12, "dimension 0 is 0", "a zero size");
	buf[3] = 4, buf[7] = 1, buf[2] = 0x0D;
	parse_refused(buf, sizeof hdr4 + 12, "elements of float32", "float32 needs 4 bytes each");
	fixtures_remove();
	return done_testing();
}
