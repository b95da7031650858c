/* t2010: NumPy files load: .npy of format 1.0, 2.0 and 3.0, float32, uint8, float64, big-endian
 * and boolean features, images (N, C, H, W) and (N, H, W), integer labels of every width, (N, 1)
 * labels, gzip; .npz stored and deflated (zip64 local headers as np.savez writes them, and
 * zip64 end records), under conventional array names or given ones, a test split or none. Every
 * damaged or unsupported file is refused, saying why: objects, strings, Fortran order, NaN,
 * labels out of range, float labels, truncation, trailing bytes, a header that lies about the
 * shape, bad magic, version or header length; a CRC mismatch, a cut zip, a member whose offset or
 * size lies (a "zip bomb"), unknown names. The stored .npz gem-export writes reads back. */
#include "nn/npy.h"
#include "nn/npz.h"
#include "data-test.h"

static void good_npy(const char *x, const char *y, int ndim, int c, int h, int w, int bytes)
{
	char err[GEM_ERRMAX] = "";
	struct samples s;
	int rc = npy_load(fx(x), fx(y), &s, err);
	ok(rc == 0 && s.n == N_SAMPLES && s.ndim == ndim && s.shape[0] == c && s.shape[1] == h &&
		   s.shape[2] == w && (bytes ? bytes_ok(&s) : floats_ok(&s)) && labels_ok(&s),
	   "%s + %s: (%d, %d, %d) %s as written (%s)", x, y, c, h, w, bytes ? "bytes" : "floats", err);
	samples_free(&s);
}

#define refused(xname, yname, ...)                                                            \
	do {                                                                                  \
		char err[GEM_ERRMAX] = "";                                                    \
		struct samples s;                                                             \
		int rc = npy_load(fx(xname), fx(yname), &s, err);                             \
		ok(bad(rc, err, __VA_ARGS__) && !s.x, "%s + %s refused: %s", xname, yname, err); \
	} while (0)

static void npy_files(void)
{
	char err[GEM_ERRMAX] = "";
	struct samples s;
	good_npy("x_f4.npy", "y_i8.npy", 3, 3, 4, 4, 0);
	good_npy("x_u1.npy", "y_u1.npy", 3, 3, 4, 4, 1);
	good_npy("x_hw.npy", "y_col.npy", 3, 1, 4, 4, 1);
	good_npy("x_v2.npy", "y_i8.npy", 1, 6, 0, 0, 0);
	good_npy("x_v3.npy", "y_i8.npy", 1, 6, 0, 0, 0);
	good_npy("x_f8.npy", "y_i8.npy", 1, 6, 0, 0, 0);
	good_npy("x_be.npy", "y_i8.npy", 1, 6, 0, 0, 0);
	good_npy("x_f4.npy.gz", "y_i8.npy", 3, 3, 4, 4, 0);
	ok(npy_load(fx("x_bool.npy"), fx("y_u2.npy"), &s, err) == 0 && s.type == SAMPLES_U8 &&
		   ((unsigned char *)s.x)[1] == 1 && s.y[11] == 55000 && s.classes == 55001,
	   "booleans are bytes 0/1; uint16 labels up to 55000: 55001 classes (%s)", err);
	samples_free(&s);

	refused("x_f4.npy", "y_neg.npy", "y_neg.npy: label 3 is out of range", "[0, 65535]");
	refused("x_f4.npy", "y_big.npy", "y_big.npy: label 5 is out of range");
	refused("x_f4.npy", "y_f4.npy", "labels of float32", "astype");
	refused("x_f4.npy", "y_short.npy", "12 samples, but", "11 labels");
	refused("x_f4.npy", "x_f4.npy", "labels of 4 dimensions");
	refused("x_fortran.npy", "y_i8.npy", "Fortran order", "ascontiguousarray");
	refused("x_obj.npy", "y_i8.npy", "Python objects");
	refused("x_str.npy", "y_i8.npy", "strings", "dtype '<U3'");
	refused("x_nan.npy", "y_i8.npy", "feature 0 of sample 7 is not a finite number");
	refused("x_trunc.npy", "y_i8.npy", "x_trunc.npy", "data bytes", "truncated?");
	refused("x_extra.npy", "y_i8.npy", "data after them");
	refused("x_lie.npy", "y_i8.npy", "shape larger than the file");
	refused("x_magic.npy", "y_i8.npy", "not a .npy file");
	refused("x_version.npy", "y_i8.npy", "format version 4.0");
	refused("x_hlen.npy", "y_i8.npy", "header claims 60000 bytes");
	refused("x_dict.npy", "y_i8.npy", "key 'shapf' unknown");
	refused("none.npy", "y_i8.npy", "No such file");
}

static void good_npz(const char *file, const char *split, const char *xn, const char *yn, size_t n,
		     int bytes)
{
	char err[GEM_ERRMAX] = "";
	struct samples s;
	int rc = npz_load(fx(file), split, xn, yn, &s, err);
	ok(rc == 0 && s.n == n && (bytes ? bytes_ok(&s) : floats_ok(&s)) && labels_ok(&s),
	   "%s %s (%s, %s): %zu samples as written (%s)", file, split, xn ? xn : "conventional",
	   yn ? yn : "names", n, err);
	samples_free(&s);
}

#define refused_npz(file, split, xn, yn, ...)                                                 \
	do {                                                                                  \
		char err[GEM_ERRMAX] = "";                                                    \
		struct samples s;                                                             \
		int rc = npz_load(fx(file), split, xn, yn, &s, err);                          \
		ok(bad(rc, err, fx(file), __VA_ARGS__) && !s.x, "%s refused: %s", file, err); \
	} while (0)

static void npz_files(void)
{
	char err[GEM_ERRMAX] = "";
	struct samples s;
	good_npz("xy.npz", "train", NULL, NULL, N_SAMPLES, 0);
	good_npz("deflated.npz", "train", NULL, NULL, N_SAMPLES, 1);
	good_npz("arr.npz", "train", NULL, NULL, N_SAMPLES, 0);
	good_npz("zip64.npz", "train", NULL, NULL, N_SAMPLES, 0);
	good_npz("keras.npz", "train", NULL, NULL, N_SAMPLES, 0);
	good_npz("keras.npz", "test", NULL, NULL, N_SAMPLES / 2, 0);
	good_npz("other.npz", "train", "a", "b", N_SAMPLES, 0);
	good_npz("keras.npz", "train", "x_test", "y_test", N_SAMPLES / 2, 0);
	ok(npz_load(fx("xy.npz"), "test", NULL, NULL, &s, err) == 1 && !s.x,
	   "an npz without test arrays has no test split (1)");
	refused_npz("other.npz", "train", NULL, NULL, "no features and labels", "it holds a, b");
	refused_npz("xy.npz", "train", "x", "labels", "no array 'labels'", "it holds x, y)");
	refused_npz("crc.npz", "train", NULL, NULL, "CRC mismatch");
	refused_npz("truncated.npz", "train", NULL, NULL, "no end of central directory");
	refused_npz("offset.npz", "train", NULL, NULL, "no local header at offset 7");
	refused_npz("bomb.npz", "train", NULL, NULL, "not a size gem believes");
	refused_npz("not.npz", "train", NULL, NULL, "not a zip", "a .npy file");
}

/* The stored .npz gem-export writes, read back through the reader: names, shapes, floats. */
static void npz_written(void)
{
	static const int d0[] = {2, 3}, d1[] = {4};
	static const float w[6] = {1, -2, 3.5f, 0, 1e-30f, 7}, b[4] = {0.25f, 9, 8, -1};
	const struct npz_array a[] = {{.name = "0.weight", .ndim = 2, .dims = d0, .data = w},
				      {.name = "0.bias", .ndim = 1, .dims = d1, .data = b}};
	char err[GEM_ERRMAX] = "";
	struct iovec *iov;
	void *mem;
	int niov, good = 1;
	size_t len = 0;
	uint8_t *zip;
	struct npz z;
	if (npz_write_stored(a, 2, &iov, &niov, &mem, err) < 0) {
		ok(0, "npz_write_stored (%s)", err);
		return;
	}
	for (int i = 0; i < niov; i++)
		len += iov[i].iov_len;
	zip = malloc(len);
	len = 0;
	for (int i = 0; i < niov; i++) {
		memcpy(zip + len, iov[i].iov_base, iov[i].iov_len);
		len += iov[i].iov_len;
	}
	good = npz_open(zip, len, "written", &z, err) == 0 && z.n == 2;
	for (int i = 0; good && i < 2; i++) {
		struct npy_array x;
		uint8_t *m;
		size_t ml;
		int k = npz_find(&z, a[i].name);
		good = k == i && npz_extract(&z, k, &m, &ml, err) == 0;
		if (!good)
			break;
		good = npy_parse(m, ml, a[i].name, &x, err) == 0 && x.ndim == a[i].ndim &&
		       x.dims[0] == (uint64_t)a[i].dims[0] && x.e.kind == 'f' && x.e.size == 4 &&
		       !memcmp(x.data, a[i].data, x.nbytes) && x.nbytes == (i ? 16u : 24u);
		free(m);
	}
	ok(good, "a stored .npz written by npz_write_stored reads back: names, shapes, floats (%s)", err);
	npz_close(&z);
	free(zip);
	free(iov);
	free(mem);
}

int main(void)
{
	npz_written();
	fixtures("npy");
	npy_files();
	fixtures_remove();
	fixtures("npz");
	npz_files();
	fixtures_remove();
	return done_testing();
}
