#include "nn/matmul.h"

#include "base/cpulevel.h"
#include "nn/pool.h"

#include <math.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define MM_X86 1
#define MM_AVX2 __attribute__((target("avx2,fma")))
#define MM_AVX512 __attribute__((target("avx2,fma,avx512f")))
#endif

/* Blocking: a panel of B of KC rows × NC columns (512 KB; packed, or B's own rows when B is
 * stored by rows) stays in the L2 cache while slivers of A (MR rows × KC, in L1) sweep it; each
 * tile of C is MR × NR. */
#define KC 256
#define NC 512
#define MR_MAX 12
#define NR_MAX 32
#define MM_MAX_THREADS 64
/* Products of fewer multiply-adds run on one thread: a chunk costs a wake-up and a packing of
 * its own. (Attention's per-head products run inside its parts, on their thread, at any size.) */
#define MM_THREAD_MIN (1 << 19)

static int forced = -1; /* tests: a level forced; -1 asks the CPU at every call */
static int nthreads = 1;

static int simd_available(void)
{
#ifdef MM_X86
	if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma"))
		return 0;
	return __builtin_cpu_supports("avx512f") ? 2 : 1;
#else
	return 0;
#endif
}

int matmul_simd(int level)
{
	return cpulevel_force(&forced, simd_available(), level);
}

void matmul_threads(int t)
{
	nthreads = t < 1 ? 1 : t > MM_MAX_THREADS ? MM_MAX_THREADS : t;
}

size_t matmul_scratch_size(void)
{
	return (size_t)KC * NC + 64;
}

/* A tile kernel: c (MR,NR), rows ldc apart, = C₀ + Σ_k A(i,k)·b[k·ldb + j], one fused
 * multiply-add per k in increasing order; C₀ is c itself (start NULL) or the row start[0..NR)
 * in every row. A(i,k) is a[k·MR + i] (a packed sliver) when lda is 0, a[i·lda + k] (MR rows
 * of a row-major A, read in place) when lda > 0, and a[i + k·(−lda)] (MR rows of an A stored
 * by columns, a weight gradient's dYᵀ, read in place) when lda < 0. */
typedef void (*kernel_fn)(int kc, const float *a, long lda, const float *b, long ldb, float *c,
			  long ldc, const float *start);

static void kernel_c(int kc, const float *a, long lda, const float *b, long ldb, float *c, long ldc,
		     const float *start)
{
	enum { MR = 4, NR = 8 };
	float acc[MR][NR];
	long ars = lda > 0 ? lda : 1, acs = lda > 0 ? 1 : lda < 0 ? -lda : MR;
	for (int i = 0; i < MR; i++)
		for (int j = 0; j < NR; j++)
			acc[i][j] = start ? start[j] : c[i * ldc + j];
	for (int k = 0; k < kc; k++)
		for (int i = 0; i < MR; i++)
			for (int j = 0; j < NR; j++)
				acc[i][j] = fmaf(a[i * ars + k * acs], b[k * ldb + j], acc[i][j]);
	for (int i = 0; i < MR; i++)
		for (int j = 0; j < NR; j++)
			c[i * ldc + j] = acc[i][j];
}

#ifdef MM_X86
#define MM_INLINE static inline __attribute__((always_inline))

/* The AVX2 tile, 6 × 16: 12 accumulators, two rows of B and a broadcast in 16 registers. A is
 * read at a[i·ars + k·acs], B at b[k·ldb + j]: each caller below makes ars or acs (or both) a
 * constant, so each gets its own loop. */
MM_AVX2 MM_INLINE void tile_avx2(int kc, const float *a, long ars, long acs, const float *b, long ldb,
				 float *c, long ldc, const float *start)
{
	enum { MR = 6, NR = 16 };
	__m256 c0[MR], c1[MR];
#pragma GCC unroll 6
	for (int i = 0; i < MR; i++) {
		c0[i] = _mm256_loadu_ps(start ? start : c + i * ldc);
		c1[i] = _mm256_loadu_ps(start ? start + 8 : c + i * ldc + 8);
	}
	for (int k = 0; k < kc; k++, a += acs, b += ldb) {
		__m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
#pragma GCC unroll 6
		for (int i = 0; i < MR; i++) {
			__m256 ai = _mm256_broadcast_ss(a + i * ars);
			c0[i] = _mm256_fmadd_ps(ai, b0, c0[i]);
			c1[i] = _mm256_fmadd_ps(ai, b1, c1[i]);
		}
	}
#pragma GCC unroll 6
	for (int i = 0; i < MR; i++) {
		_mm256_storeu_ps(c + i * ldc, c0[i]);
		_mm256_storeu_ps(c + i * ldc + 8, c1[i]);
	}
}

MM_AVX2 static void kernel_avx2(int kc, const float *a, long lda, const float *b, long ldb, float *c,
				 long ldc, const float *start)
{
	if (lda > 0)
		tile_avx2(kc, a, lda, 1, b, ldb, c, ldc, start);
	else if (lda < 0)
		tile_avx2(kc, a, 1, -lda, b, ldb, c, ldc, start);
	else
		tile_avx2(kc, a, 1, 6, b, ldb, c, ldc, start);
}

/* The AVX-512 tile, 12 × 32: 24 accumulators of the 32 registers. */
MM_AVX512 MM_INLINE void tile_avx512(int kc, const float *a, long ars, long acs, const float *b, long ldb,
				     float *c, long ldc, const float *start)
{
	enum { MR = 12, NR = 32 };
	__m512 c0[MR], c1[MR];
#pragma GCC unroll 12
	for (int i = 0; i < MR; i++) {
		c0[i] = _mm512_loadu_ps(start ? start : c + i * ldc);
		c1[i] = _mm512_loadu_ps(start ? start + 16 : c + i * ldc + 16);
	}
	for (int k = 0; k < kc; k++, a += acs, b += ldb) {
		__m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16);
#pragma GCC unroll 12
		for (int i = 0; i < MR; i++) {
			__m512 ai = _mm512_set1_ps(a[i * ars]);
			c0[i] = _mm512_fmadd_ps(ai, b0, c0[i]);
			c1[i] = _mm512_fmadd_ps(ai, b1, c1[i]);
		}
	}
#pragma GCC unroll 12
	for (int i = 0; i < MR; i++) {
		_mm512_storeu_ps(c + i * ldc, c0[i]);
		_mm512_storeu_ps(c + i * ldc + 16, c1[i]);
	}
}

MM_AVX512 static void kernel_avx512(int kc, const float *a, long lda, const float *b, long ldb, float *c,
				    long ldc, const float *start)
{
	if (lda > 0)
		tile_avx512(kc, a, lda, 1, b, ldb, c, ldc, start);
	else if (lda < 0)
		tile_avx512(kc, a, 1, -lda, b, ldb, c, ldc, start);
	else
		tile_avx512(kc, a, 1, 12, b, ldb, c, ldc, start);
}
#endif

/* One level's kernel and tile. */
struct kern {
	kernel_fn fn;
	int mr, nr;
};

static struct kern kernel_of(int level)
{
#ifdef MM_X86
	if (level == 2)
		return (struct kern){kernel_avx512, 12, 32};
	if (level == 1)
		return (struct kern){kernel_avx2, 6, 16};
#endif
	(void)level;
	return (struct kern){kernel_c, 4, 8};
}

/* d[0..n) = s[0..n), in blocks of constant size (inlined moves, not a memcpy call each) */
static inline void copy_run(float *restrict d, const float *restrict s, int n)
{
	int i = 0;
	for (; i + 8 <= n; i += 8)
		memcpy(d + i, s + i, 8 * sizeof *d);
	for (; i + 4 <= n; i += 4)
		memcpy(d + i, s + i, 4 * sizeof *d);
	for (; i < n; i++)
		d[i] = s[i];
}

/* d (4 rows, ld apart) = the 4×4 block of s whose columns are cs apart, transposed */
static inline void transpose4(float *d, long ld, const float *s, long cs)
{
#ifdef MM_X86
	__m128 r0 = _mm_loadu_ps(s), r1 = _mm_loadu_ps(s + cs), r2 = _mm_loadu_ps(s + 2 * cs);
	__m128 r3 = _mm_loadu_ps(s + 3 * cs);
	_MM_TRANSPOSE4_PS(r0, r1, r2, r3);
	_mm_storeu_ps(d, r0);
	_mm_storeu_ps(d + ld, r1);
	_mm_storeu_ps(d + 2 * ld, r2);
	_mm_storeu_ps(d + 3 * ld, r3);
#else
	for (int j = 0; j < 4; j++)
		for (int k = 0; k < 4; k++)
			d[k * ld + j] = s[j * cs + k];
#endif
}

/* dst (kc × nr per micro-panel, k-major, columns past nc zero) = B[pc.., jc..] */
static void pack_b(float *dst, struct mat b, int pc, int kc, int jc, int nc, int nr)
{
	for (int j0 = 0; j0 < nc; j0 += nr, dst += (size_t)kc * nr) {
		int w = nc - j0 < nr ? nc - j0 : nr, k = 0, j;
		const float *s = b.p + (long)pc * b.rs + (long)(jc + j0) * b.cs;
		if (b.cs == 1) { /* rows of B */
			for (; k < kc; k++) {
				copy_run(dst + (size_t)k * nr, s + k * b.rs, w);
				for (j = w; j < nr; j++)
					dst[(size_t)k * nr + j] = 0.0f;
			}
			continue;
		}
		if (b.rs == 1 && w == nr) /* columns of B: 4×4 blocks transposed */
			for (; k + 4 <= kc; k += 4)
				for (j = 0; j < nr; j += 4)
					transpose4(dst + (size_t)k * nr + j, nr, s + k + j * b.cs, b.cs);
		for (j = 0; j < nr; j++) /* the rest one float at a time */
			for (int kk = k; kk < kc; kk++)
				dst[(size_t)kk * nr + j] = j < w ? s[kk * b.rs + j * b.cs] : 0.0f;
	}
}

/* dst (kc × mr, k-major, rows past m zero) = A[i0.., kl..kl+kc) */
static void pack_a(float *dst, struct mat a, int i0, int m, int kl, int kc, int mr)
{
	const float *s = a.p + (long)i0 * a.rs + (long)kl * a.cs;
	if (a.rs == 1 && m == mr) { /* A stored by columns: mr floats at a time */
		for (int k = 0; k < kc; k++)
			copy_run(dst + (size_t)k * mr, s + k * a.cs, mr);
		return;
	}
	for (int i = 0; i < mr; i++)
		for (int k = 0; k < kc; k++)
			dst[(size_t)k * mr + i] = i < m ? s[i * a.rs + k * a.cs] : 0.0f;
}

/* One product's arguments, and the rows [lo, hi) of C one thread computes. */
struct job {
	float *c;
	long ldc;
	struct mat a, b;
	const float *bias;
	int M, N, K, init, tri, level, lo, hi, jlo, jhi; /* C's rows [lo, hi), columns [jlo, jhi) */
	float *panel;
};

/* The terms k of row block [i0, i1) that are not zero: [*kl, *kh). */
static void k_range(const struct job *j, int i0, int i1, int *kl, int *kh)
{
	*kl = j->tri == MATMUL_A_UPPER ? i0 : 0;
	*kh = j->tri == MATMUL_A_LOWER && i1 < j->K ? i1 : j->K;
}

/* The tiles of row block [i0, i0+m) against the panel of columns [jc, jc+nc), terms [kl, kh)
 * of the panel's [pc, pc+kc); first: these are the row block's first terms, so the tiles start
 * from C₀ (the init's) rather than from C. The panel's whole tiles are B's rows read in place
 * when B is stored by rows (b_rows), else packed, as its last tile always is when narrower. */
static void row_block(const struct job *j, struct kern kn, const float *ap, long lda, int i0, int m, int jc,
		      int nc, int pc, int kc, int kl, int kh, int first, int b_rows)
{
	static const float zeros[NR_MAX];
	float tile[MR_MAX * NR_MAX], edge[NR_MAX];
	const float *packed = j->panel + (size_t)(kl - pc) * kn.nr;
	int from_c = !first || j->init == MATMUL_ACC;
	for (int j0 = 0; j0 < nc; j0 += kn.nr, packed += (size_t)kc * kn.nr) {
		int w = nc - j0 < kn.nr ? nc - j0 : kn.nr;
		float *c = j->c + (long)i0 * j->ldc + jc + j0;
		const float *start = from_c ? NULL : j->init == MATMUL_BIAS ? j->bias + jc + j0 : zeros;
		const float *bp = packed;
		long ldb = kn.nr;
		if (j->tri == MATMUL_C_LOWER && jc + j0 > i0 + m - 1)
			break; /* this tile and those right of it are above the diagonal */
		if (b_rows && w == kn.nr) {
			bp = j->b.p + (long)kl * j->b.rs + jc + j0;
			ldb = j->b.rs;
		}
		if (m == kn.mr && w == kn.nr) {
			kn.fn(kh - kl, ap, lda, bp, ldb, c, j->ldc, start);
			continue;
		}
		if (start && j->init == MATMUL_BIAS) { /* an edge: the bias's columns, then zeros */
			memcpy(edge, start, sizeof *edge * w);
			memset(edge + w, 0, sizeof *edge * (kn.nr - w));
			start = edge;
		}
		for (int i = 0; i < m && !start; i++) /* through a whole tile */
			memcpy(tile + i * kn.nr, c + i * j->ldc, sizeof *tile * w);
		kn.fn(kh - kl, ap, lda, bp, ldb, tile, kn.nr, start);
		for (int i = 0; i < m; i++)
			memcpy(c + i * j->ldc, tile + i * kn.nr, sizeof *tile * w);
	}
}

static void run_job(struct job *j)
{
	struct kern kn = kernel_of(j->level);
	int b_rows = j->b.cs == 1;
	_Alignas(64) float sliver[MR_MAX * KC];
	for (int jc = j->jlo; jc < j->jhi; jc += NC) {
		int nc = j->jhi - jc < NC ? j->jhi - jc : NC;
		for (int pc = 0; pc < j->K; pc += KC) {
			int kc = j->K - pc < KC ? j->K - pc : KC;
			/* B stored by rows is read in place, but for a last tile narrower than NR (packed,
			 * zeros to NR): a copy of a weight gradient's B (K = B·T rows) was a load per
			 * float that missed the cache, and each chunk of rows made its own */
			int whole = b_rows ? nc / kn.nr * kn.nr : 0;
			if (whole < nc)
				pack_b(j->panel + (size_t)whole * kc, j->b, pc, kc, jc + whole, nc - whole, kn.nr);
			for (int i0 = j->lo; i0 < j->hi; i0 += kn.mr) {
				int m = j->hi - i0 < kn.mr ? j->hi - i0 : kn.mr, kl, kh;
				k_range(j, i0, i0 + m, &kl, &kh);
				int first = kl >= pc; /* this block holds the row block's first term */
				if (kl < pc)
					kl = pc;
				if (kh > pc + kc)
					kh = pc + kc;
				if (kl >= kh)
					continue;
				if (j->a.cs == 1 && m == kn.mr) { /* rows of A read in place */
					row_block(j, kn, j->a.p + i0 * j->a.rs + kl, j->a.rs, i0, m, jc, nc, pc, kc, kl, kh,
						  first, b_rows);
					continue;
				}
				if (j->a.rs == 1 && j->a.cs > 1 && m == kn.mr) { /* columns of A, in place */
					row_block(j, kn, j->a.p + i0 + (long)kl * j->a.cs, -j->a.cs, i0, m, jc, nc, pc,
						  kc, kl, kh, first, b_rows);
					continue;
				}
				pack_a(sliver, j->a, i0, m, kl, kh - kl, kn.mr);
				row_block(j, kn, sliver, 0, i0, m, jc, nc, pc, kc, kl, kh, first, b_rows);
			}
		}
	}
}

/* A product's chunks: whole row blocks of C, or whole columns in units of NR_MAX (the widest
 * tile), whichever of M and N is larger; one a thread, and more (for the threads to balance)
 * while a chunk keeps MM_CHUNK_ROWS rows or MM_CHUNK_COLS columns. Each chunk packs its own
 * panels of B (rows) or slivers of A (columns): a weight gradient's B is K = B·T rows deep
 * (2 MB for the gpt's), and a chunk of 192 rows or more does some 50 multiply-adds per float
 * it packs. */
#define MM_CHUNK_ROWS 192
#define MM_CHUNK_COLS 64
struct chunked {
	struct job base;
	int rows, unit, units, chunks;
};

/* Chunk c: on a worker of the pool with its own panel on the worker's stack (it has room for
 * it); on the caller (part 0, or every chunk when the pool runs them one after another) in the
 * caller's scratch. */
static void run_chunk(void *arg, int c, int part)
{
	const struct chunked *ch = arg;
	struct job j = ch->base;
	long lo, hi;
	pool_chunk_bounds(ch->rows ? j.M : j.N, ch->unit, ch->chunks, c, &lo, &hi);
	if (ch->rows)
		j.lo = (int)lo, j.hi = (int)hi;
	else
		j.jlo = (int)lo, j.jhi = (int)hi;
	if (part == 0 || pool_worker() != part) {
		run_job(&j);
		return;
	}
	_Alignas(64) float panel[KC * NC];
	j.panel = panel;
	run_job(&j);
}

/* C₀ into the rows of C no term reaches (K = 0, or k_range empty). */
static void init_c(float *c, long ldc, int M, int N, enum matmul_init init, const float *bias)
{
	for (int i = 0; i < M; i++) {
		if (init == MATMUL_BIAS)
			memcpy(c + i * ldc, bias, sizeof *c * N);
		else if (init == MATMUL_ZERO)
			memset(c + i * ldc, 0, sizeof *c * N);
	}
}

void matmul(float *c, long ldc, struct mat a, struct mat b, int M, int N, int K, enum matmul_init init,
	    const float *bias, enum matmul_tri tri, float *scratch)
{
	int level = matmul_simd(-1), mr = kernel_of(level).mr;
	if (M <= 0 || N <= 0)
		return;
	if (K <= 0) {
		init_c(c, ldc, M, N, init, bias);
		return;
	}
	if (tri == MATMUL_A_UPPER && M > K)
		init_c(c + (long)K * ldc, ldc, M - K, N, init, bias); /* rows no term reaches */
	struct chunked ch = {{c, ldc, a, b, bias, M, N, K, init, tri, level, 0, M, 0, N, NULL}, M >= N, 0, 0, 1};
	ch.base.panel = (float *)(((size_t)scratch + 63) & ~(size_t)63);
	ch.unit = ch.rows ? mr : NR_MAX;
	ch.units = ch.rows ? (M + mr - 1) / mr : (N + NR_MAX - 1) / NR_MAX;
	/* a chunk's rows are whole row blocks, its columns whole tiles: the tiles of one thread */
	if (nthreads > 1 && (double)M * N * K >= MM_THREAD_MIN) {
		int more = ch.rows ? M / MM_CHUNK_ROWS : N / MM_CHUNK_COLS;
		int each = ch.units < nthreads ? ch.units : nthreads;
		ch.chunks = pool_chunk_count(more > each ? more : each);
	}
	if (ch.chunks <= 1) {
		run_job(&ch.base);
		return;
	}
	pool_chunks(ch.chunks, 0, run_chunk, &ch);
}
