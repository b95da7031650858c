# common.sh: what the experiment scripts beside it share; sourced, not run.
#
# The gem programs: $GEM_BIN first, else the PATH, else the source tree's bin/ (this script's
# directory is share/gem/experiments/).
_here=$(cd "$(dirname "$0")" && pwd)
if [ -n "${GEM_BIN:-}" ]; then PATH=$GEM_BIN:$PATH
elif ! command -v gem-work >/dev/null 2>&1; then PATH=$_here/../../../bin:$PATH; fi

# tail_loss RUN: the mean minibatch loss of the last 100 central updates in RUN's log ("nan":
# none); tail_loss_of LOG: the same of a log file (an SGP node's)
tail_loss_of() {
	sed -n '/"event"/d; s/.*"loss":\([-0-9.eE+naif]*\),.*/\1/p' "$1" | tail -100 |
		awk '{ s += $1; n++ } END { if (n) printf "%.4f", s / n; else printf "nan" }'
}
tail_loss() { tail_loss_of "$1/log.jsonl"; }
