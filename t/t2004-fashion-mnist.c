/* t2004: the real Fashion-MNIST loads with the expected sizes, labels and statistics. */
#include "nn/batcher.h"
#include "nn/data.h"
#include "base/err.h"
#include "tap.h"

#include <string.h>
#include <unistd.h>

int main(void)
{
	char err[GEM_ERRMAX] = "", dir[512];
	struct dataset tr, te;
	struct batcher b;
	double mean, std;
	int labels_ok = 1, counts[10] = {0}, balanced = 1;
	static float x[64 * 784];
	uint16_t y[64];

	if (dataset_resolve("fashion-mnist", dir, sizeof dir, err) < 0)
		skip_all("Fashion-MNIST not installed");
	ok(dataset_load(dir, "train", &tr, err) == 0, "train split loads: %s", err);
	ok(tr.n == 60000 && tr.rows == 28 && tr.cols == 28 && tr.dim == 784 && tr.classes == 10,
	   "train: 60000 × 28×28, 10 classes");
	for (int i = 0; i < tr.n; i++) {
		if (tr.labels[i] >= 10)
			labels_ok = 0;
		else
			counts[tr.labels[i]]++;
	}
	for (int k = 0; k < 10; k++)
		if (counts[k] != 6000)
			balanced = 0;
	ok(labels_ok && balanced, "labels < 10, 6000 of each");
	dataset_stats(&tr, &mean, &std);
	is_near(mean, 0.2860, 0.0005, "train pixel mean 0.2860");
	is_near(std, 0.3530, 0.0005, "train pixel std 0.3530");
	ok(dataset_load(dir, "test", &te, err) == 0 && te.n == 10000 && te.dim == 784 &&
		   te.classes == 10,
	   "test: 10000 × 28×28: %s", err);

	/* Normalised batches over the real data have mean ≈ 0 and std ≈ 1. */
	batcher_init(&b, &tr, 64, 1, 0, 0, 2, (float)mean, (float)std, err);
	{
		double s = 0, s2 = 0;
		long cnt = 0;
		for (int it = 0; it < 100; it++) {
			int k = batcher_next(&b, x, y);
			for (int i = 0; i < k * 784; i++)
				s += x[i], s2 += (double)x[i] * x[i];
			cnt += k * 784;
		}
		s /= (double)cnt;
		is_near(s, 0, 0.05, "normalised batches have mean ~0");
		is_near(sqrt(s2 / (double)cnt - s * s), 1, 0.05, "and std ~1");
	}
	ok(b.count == 30000, "half the data in part 0 of 2");
	batcher_free(&b);
	dataset_free(&tr);
	dataset_free(&te);
	return done_testing();
}
