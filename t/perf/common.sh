# common.sh: what the benchmark scripts beside it that run real gem processes share; sourced,
# not run. The programs from $GEM_BIN (default bin), the tree from $GEM_SRC (default .); exits 0
# with a "# skipped" line when Fashion-MNIST or GNU time is missing (make bench reports figures,
# not failures); a temporary directory $tmp, removed at exit.
bin=${GEM_BIN:-bin}
src=${GEM_SRC:-.}
[ -f "${GEM_DATA_PATH:-/usr/share/datasets}/fashion-mnist/train-labels-idx1-ubyte.gz" ] || {
	echo "# skipped: fashion-mnist not installed"; exit 0; }
[ -x /usr/bin/time ] || { echo "# skipped: /usr/bin/time (GNU time) not installed"; exit 0; }
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
export GEM_SHARE_DIR="$src/share/gem" GEM_LOG=warn
