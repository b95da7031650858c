# peer-rows.awk (bench-peer.sh): with -v t=THREADS, the rows of PyTorch's runs (the first
# file) and gem's (the second), what, shape, rate, unit, several runs each: a row per what and
# shape, in gem's order, with both medians, their ratio (gem ÷ PyTorch) and each side's
# lowest–highest.
function add(side, k, v) { n[side, k]++; x[side, k, n[side, k]] = v + 0 }
# the median of side's rates for k; lo and hi (globals) their lowest and highest
function median(side, k,   i, j, c, tmp) {
	c = n[side, k]
	for (i = 1; i <= c; i++)
		s[i] = x[side, k, i]
	for (i = 2; i <= c; i++)
		for (j = i; j > 1 && s[j - 1] > s[j]; j--) {
			tmp = s[j]; s[j] = s[j - 1]; s[j - 1] = tmp
		}
	lo = s[1]; hi = s[c]
	return c % 2 ? s[(c + 1) / 2] : (s[c / 2] + s[c / 2 + 1]) / 2
}
FNR == NR { add("torch", $1 FS $2, $3); next }
{
	k = $1 FS $2
	if (!((k) in unit)) { order[++rows] = k; unit[k] = $4 }
	add("gem", k, $3)
}
END {
	for (r = 1; r <= rows; r++) {
		k = order[r]
		if (!(("torch" SUBSEP k) in n))
			continue
		g = median("gem", k)
		glo = lo
		ghi = hi
		p = median("torch", k)
		split(k, w, FS)
		printf "%s\t%s\t%s\t%.0f\t%.0f\t%s\t%.2f\t%.0f–%.0f\t%.0f–%.0f\n", w[1], w[2], t, g, p, unit[k],
		       (p > 0 ? g / p : 0), glo, ghi, lo, hi
	}
}
