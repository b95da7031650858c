/* t2013: θ written as safetensors and read back into θ bit for bit (a cnn's 4-D and 2-D
 * tensors), the header aligned to 8 bytes, the metadata kept; F64, F16 and BF16 tensors
 * converted; a file for another model refused with every mismatch named (shape, missing,
 * unexpected, dtype); and every breach of the format's rules refused: header length past the
 * file or its bound, not an object, duplicate names, gaps, overlaps, uncovered or missing data,
 * sizes that disagree with the shape or overflow, unknown dtypes, metadata that is not strings,
 * non-finite weights. */
#include "base/err.h"
#include "layout-test.h"
#include "nn/model.h"
#include "nn/safetensors.h"
#include "tap.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* A file of header JSON and data bytes: the 8-byte length, the JSON, the data. */
static uint8_t *file_of(const char *json, const void *data, size_t dlen, size_t *len)
{
	size_t h = strlen(json);
	uint8_t *b = malloc(8 + h + dlen + 1);
	for (int i = 0; i < 8; i++)
		b[i] = (uint8_t)((uint64_t)h >> (8 * i));
	memcpy(b + 8, json, h);
	memcpy(b + 8 + h, data, dlen);
	*len = 8 + h + dlen;
	return b;
}

/* The model's θ (seeded) written and read back through a second model of the same spec. */
static void round_trip(void)
{
	static const char spec[] =
		"{\"input\":[3,8,8],\"classes\":4,\"layers\":[{\"type\":\"conv2d\",\"out\":5,\"kernel\":3},"
		"{\"type\":\"relu\"},{\"type\":\"flatten\"},{\"type\":\"dense\",\"out\":4},{\"type\":\"logsoftmax\"}]}";
	static const struct safetensors_meta meta[] = {{.key = "format", .value = "pt"},
						       {.key = "gem.model", .value = spec}};
	char err[GEM_ERRMAX] = "";
	json_t *js = json_loads(spec, 0, NULL), *got_meta = NULL;
	struct model *m = NULL;
	uint8_t *hdr = NULL, *file;
	size_t hlen = 0, n;
	float *back;
	const struct layout *l;
	if (model_from_json(js, &m, err) < 0) {
		ok(0, "the test's model builds (%s)", err);
		return;
	}
	model_init_params(m, 42);
	l = model_layout(m);
	n = model_nparams(m);
	ok(safetensors_header(l, meta, 2, &hdr, &hlen, err) == 0 && hlen % 8 == 0 && hdr[8] == '{',
	   "a header, the data aligned to 8 bytes (%s)", err);
	{
		size_t end = hlen;
		while (end > 8 && hdr[end - 1] == ' ')
			end--;
		ok(hdr[end - 1] == '}' && hlen - end < 8, "the JSON is padded with fewer than 8 spaces");
	}
	file = malloc(hlen + 4 * n);
	memcpy(file, hdr, hlen);
	memcpy(file + hlen, model_params(m), 4 * n);
	back = calloc(n, sizeof *back);
	ok(safetensors_parse(file, hlen + 4 * n, "mem", l, back, &got_meta, err) == 0 &&
		   !memcmp(back, model_params(m), 4 * n),
	   "read back into θ: the same %zu floats, bit for bit (%s)", n, err);
	ok(got_meta && !strcmp(json_string_value(json_object_get(got_meta, "gem.model")), spec) &&
		   !strcmp(json_string_value(json_object_get(got_meta, "format")), "pt"),
	   "the metadata comes back");
	ok(strstr((char *)hdr + 8, "\"0.weight\":{\"dtype\":\"F32\",\"shape\":[5,3,3,3],\"data_offsets\":[0,540]}") != NULL,
	   "0.weight is F32 [5, 3, 3, 3] at [0, 540)");
	{
		size_t sizes[2] = {135, 4};
		struct layout other = layout_of(sizes, 2);
		other.t[0].shape[0] = 5, other.t[0].shape[1] = 27, other.t[0].ndim = 2;
		strcpy(other.t[1].name, "9.bias");
		ok(safetensors_parse(file, hlen + 4 * n, "mem", &other, back, NULL, err) == GEM_EUSAGE &&
			   strstr(err, "mem: does not fit the model: ") &&
			   strstr(err, "0.weight: shape [5, 3, 3, 3] in the file, [5, 27] in the model") &&
			   strstr(err, "no tensor '9.bias'") && strstr(err, "unexpected tensor '0.bias'") &&
			   strstr(err, "unexpected tensor '3.weight'") && strstr(err, "unexpected tensor '3.bias'"),
		   "a layout of other tensors: each mismatch named (%s)", err);
	}
	json_decref(got_meta);
	json_decref(js);
	free(file);
	free(hdr);
	free(back);
	model_free(m);
}

/* Two tensors "0.weight" and "1.weight" of 2 floats each, as F32 data d[4]. */
static int parse_json(const char *json, const float *d, size_t dlen, float *theta, char *err)
{
	size_t sizes[2] = {2, 2}, len;
	struct layout l = layout_of(sizes, 2);
	uint8_t *b = file_of(json, d, dlen, &len);
	int rc = safetensors_parse(b, len, "mem", &l, theta, NULL, err);
	free(b);
	return rc;
}

#define T(a, b, c) "{\"0.weight\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[" a "]},"  \
		   "\"1.weight\":{\"dtype\":\"" b "\",\"shape\":[" c "],\"data_offsets\":[8,16]}}"

static void refused(const char *json, size_t dlen, const char *want, const char *title)
{
	static const float d[6] = {1, 2, 3, 4, 5, 6};
	char err[GEM_ERRMAX] = "";
	float theta[4];
	int rc = parse_json(json, d, dlen, theta, err);
	ok(rc < 0 && strstr(err, want), "%s: %s", title, err);
}

static void rules(void)
{
	static const float d[4] = {1, 2, 3, 4};
	char err[GEM_ERRMAX] = "";
	float theta[4] = {0};
	uint8_t raw[16];
	ok(parse_json(T("0,8", "F32", "2"), d, 16, theta, err) == 0 && theta[3] == 4,
	   "a hand-made file reads (%s)", err);
	refused(T("0,8", "F32", "2"), 20, "cover 16 bytes of data, the file has 20", "bytes after the data");
	refused(T("0,8", "F32", "2"), 12, "cover 16 bytes of data, the file has 12", "data cut short");
	refused(T("0,4", "F32", "2"), 16, "data_offsets [0, 4] for 8 bytes", "a range shorter than the shape");
	refused("{\"0.weight\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]},"
		"\"1.weight\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}",
		16, "starts at byte 4 of the data, not 0: a gap", "a gap");
	refused("{\"0.weight\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
		"\"1.weight\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
		12, "not 8: an overlap", "an overlap");
	refused(T("0,8", "F32", "4611686018427387904,4"), 16, "its shape overflows", "a shape that overflows");
	refused(T("0,8", "F32", "-2"), 16, "shape[0] is not a non-negative integer", "a negative size");
	refused(T("0,8", "F33", "2"), 16, "unknown dtype 'F33'", "an unknown dtype");
	refused(T("0,8", "I32", "2"), 16, "1.weight: dtype I32", "an integer tensor");
	refused("{\"0.weight\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
		"\"0.weight\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}",
		16, "duplicate object key", "a name twice");
	refused("[1]", 16, "not a safetensors file", "a header that is not an object");
	refused("{\"__metadata__\":{\"a\":1}}", 0, "__metadata__.a is not a string", "metadata of a number");
	refused("{\"0.weight\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"x\":1}}", 8,
		"want exactly dtype, shape and data_offsets", "an entry with a fourth key");
	refused("{}", 0, "no tensor '0.weight'; no tensor '1.weight'", "no tensor at all");
	ok(parse_json(T("0,8", "F32", "2"), (const float[]){1, NAN, 3, 4}, 16, theta, err) < 0 &&
		   strstr(err, "0.weight: element 1 is not a finite number"),
	   "a NaN weight is refused (%s)", err);

	/* F16 {1, -2}, BF16 {0.5, 3}, as 16 bits each; F64 */
	memcpy(raw, (const uint16_t[]){0x3c00, 0xc000, 0x3f00, 0x4040}, 8);
	ok(parse_json("{\"0.weight\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[0,4]},"
		      "\"1.weight\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[4,8]}}",
		      (const float *)raw, 8, theta, err) == 0 &&
		   theta[0] == 1 && theta[1] == -2 && theta[2] == 0.5f && theta[3] == 3,
	   "F16 and BF16 tensors are converted (%s)", err);
	ok(parse_json("{\"0.weight\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[0,16]},"
		      "\"1.weight\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[16,32]}}",
		      (const float *)(const double[]){0.25, -1e10, 7, 1.0 / 3}, 32, theta, err) == 0 &&
		   theta[0] == 0.25f && theta[1] == -1e10f && theta[3] == (float)(1.0 / 3),
	   "F64 tensors are rounded to float32 (%s)", err);
}

/* Files whose first 8 bytes lie. */
static void lengths(void)
{
	char err[GEM_ERRMAX] = "";
	size_t sizes[1] = {2};
	struct layout l = layout_of(sizes, 1);
	float theta[2];
	uint8_t b[40] = {0};
	memcpy(b + 8, "{}", 2);
	b[0] = 2;
	ok(safetensors_parse(b, 10, "mem", &l, theta, NULL, err) < 0 && strstr(err, "no tensor '0.weight'"),
	   "an empty header is a file of no tensor (%s)", err);
	b[0] = 200;
	ok(safetensors_parse(b, 40, "mem", &l, theta, NULL, err) < 0 && strstr(err, "header of 200 bytes"),
	   "a header length past the file (%s)", err);
	memset(b, 0xff, 8);
	ok(safetensors_parse(b, 40, "mem", &l, theta, NULL, err) < 0 && strstr(err, "not a safetensors file"),
	   "a header length of 2^64 - 1 (%s)", err);
	ok(safetensors_parse(b, 5, "mem", &l, theta, NULL, err) < 0 && strstr(err, "(5 bytes)"),
	   "a file shorter than the length (%s)", err);
}

int main(void)
{
	round_trip();
	rules();
	lengths();
	return done_testing();
}
