/* t1006: the dense layer's products (nn/matmul) read nothing beyond their operands: each
 * operand ends just before a PROT_NONE guard page, and the forward and backward passes of the
 * shapes where libblis 0.9.0 over-read when the layer ran on it (the cnn's 300→200 layer at
 * batch 64, batches that are not a multiple of its micro-panel) run in a child that would die
 * of SIGSEGV. (The convolutions' im2col products still run on BLIS: their operands keep
 * layer_falloc's LAYER_GEMM_PAD.) */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "nn/layer_ops.h"
#include "nn/matmul.h"
#include "nn/seq.h"
#include "tap.h"

/* n floats ending pad bytes before a PROT_NONE page (never freed: the child exits) */
static float *guarded(size_t n, size_t pad)
{
	size_t pg = (size_t)sysconf(_SC_PAGESIZE), bytes = n * sizeof(float) + pad;
	size_t total = (bytes + pg - 1) / pg * pg + pg;
	char *p = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	float *f;
	if (p == MAP_FAILED || mprotect(p + total - pg, pg, PROT_NONE) < 0)
		exit(3);
	f = (float *)(p + total - pg - bytes);
	for (size_t i = 0; i < n; i++)
		f[i] = (float)(i % 7) * 0.125f - 0.375f;
	return f;
}

/* Forward and backward of a dense in→out layer at batch B, operands padded by pad bytes: the
 * child's exit status (0: done; a signal: 128 + it). The child runs on one thread. */
static int dense_child(int B, int in, int out, size_t pad)
{
	pid_t pid = fork();
	int st;
	if (pid == 0) {
		float *x = guarded((size_t)B * in, pad), *W = guarded((size_t)out * in, pad);
		float *b = guarded((size_t)out, pad), *y = guarded((size_t)B * out, pad);
		float *dy = guarded((size_t)B * out, pad), *dx = guarded((size_t)B * in, pad);
		float *dW = guarded((size_t)out * in, pad), *db = guarded((size_t)out, pad);
		float *s = guarded(matmul_scratch_size(), pad);
		dense_rows_forward(y, x, W, b, B, in, out, s);
		dense_rows_backward(dx, dW, db, dy, x, W, B, in, out, s);
		_exit(0);
	}
	if (pid < 0 || waitpid(pid, &st, 0) < 0)
		return -1;
	return WIFSIGNALED(st) ? 128 + WTERMSIG(st) : WEXITSTATUS(st);
}

int main(void)
{
	static const int shapes[][3] = {{64, 300, 200}, {7, 300, 200}, {1, 300, 200}, {33, 100, 50},
					{64, 784, 300}, {64, 200, 10}, {5, 1000, 64}, {64, 9216, 128}};
	for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
		int B = shapes[i][0], in = shapes[i][1], out = shapes[i][2];
		int rc = dense_child(B, in, out, 0);
		ok(rc == 0, "dense %d→%d at batch %d: nothing read beyond the operands (child: %s)", in, out, B,
		   rc == 0 ? "exit 0" : rc == 128 + SIGSEGV ? "SIGSEGV" : "failed");
	}
	return done_testing();
}
