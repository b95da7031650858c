# linkruns.sh: served runs on the tbf-limited hosts of nshosts.sh, timed to target training
# losses: what codec.sh and lowcomm.sh share for their PARTS=tbf. Sourced, not run, as root.
#
# A run: gem-run on host h0 with its gem-serve there (plain HTTP), one gem-work on each of h1
# .. h4 through ns_shim's "ssh", every host's link at the run's rate (nshosts.sh), under
# nice -n 5. While it trains its log is read every 2 s, and it is stopped (SIGTERM to gem-run,
# which stops the server and the workers) once its training seconds pass LR_LIMIT, or, if
# asked, once the training loss has reached every target; gem-eval then evaluates the θ the
# server holds. Times are the log's "elapsed": the server's training seconds, from the first
# join. The training loss at an update is the mean of the minibatch losses ("loss") of the
# updates within the last LR_WINDOW samples (with every update of 64 samples, LR_WINDOW 6400
# is the last 100 updates), taken once that many samples are in.
#
# The caller calls lr_init SCRIPTNAME once, then lr_run for each run; LR_TARGETS, LR_WINDOW,
# LR_LIMIT as above (defaults "0.6 0.5 0.45", 6400, 900). The hosts' names: NS_P (default
# gemt$$) and NS_NET (default 10.91.0).

# lr_init NAME: the hosts' shim and the teardown at exit, or exit 2 when not root
lr_init() {
	[ "$(id -u)" = 0 ] || { echo "$1: PARTS=tbf needs root (network namespaces, tc)" >&2; exit 2; }
	. "$(dirname "$0")/nshosts.sh"
	# shellcheck disable=SC2034 # NS_N is nshosts.sh's
	NS_P=${NS_P:-gemt$$} NS_N=4 NS_NET=${NS_NET:-10.91.0}
	LR_TARGETS=${LR_TARGETS:-0.6 0.5 0.45} LR_WINDOW=${LR_WINDOW:-6400} LR_LIMIT=${LR_LIMIT:-900}
	lr_shim=$(mktemp -d "${TMPDIR:-/tmp}/linkruns.XXXXXX") || exit 1
	ns_shim "$lr_shim" || exit 1
	printf 'h1\nh2\nh3\nh4\n' >"$lr_shim/hosts"
	trap 'ns_teardown; rm -rf "$lr_shim"' EXIT
	trap 'exit 130' INT TERM
}

# lr_times LOG: the training seconds of LOG's last update, then for each of LR_TARGETS the
# first at which the training loss was at or below it ("-": never), then the last training
# loss ("-": fewer than LR_WINDOW samples), separated by tabs
lr_times() {
	awk -v targets="$LR_TARGETS" -v w="$LR_WINDOW" '
		function val(k) {
			if (!match($0, "\"" k "\":[-0-9.eE+]+")) return -1
			return substr($0, RSTART + length(k) + 3, RLENGTH - length(k) - 3) + 0 }
		BEGIN { nt = split(targets, tg, " ") }
		/"event"/ || !/"loss"/ { next }
		{ e = val("elapsed"); s = val("samples"); ls[++hi] = val("loss"); ss[hi] = s; sum += ls[hi]; end = e
		  while (ss[lo + 1] <= s - w) { sum -= ls[++lo]; delete ls[lo]; delete ss[lo] }
		  if (s < w) next
		  last = sum / (hi - lo)
		  for (i = 1; i <= nt; i++) if (!(i in at) && last <= tg[i]) at[i] = e }
		END { printf "%.1f", end
		      for (i = 1; i <= nt; i++) printf "\t%s", i in at ? sprintf("%.1f", at[i]) : "-"
		      printf "\t%s\n", last == "" ? "-" : sprintf("%.4f", last) }' "$1"
}

# lr_bytes LOG: the bytes on the wire of LOG's update lines and stop event
lr_bytes() {
	sed -n 's/.*"bytes_in":\([0-9]*\),"bytes_out":\([0-9]*\).*/\1 \2/p' "$1" |
		awk '{ s += $1 + $2 } END { printf "%.0f", s }'
}

# lr_run RUN RATE STOP [gem-run options]: one run in RUN on hosts at RATE Mbit/s, stopped at
# the targets if STOP is 1; on stdout, tab-separated: how it ended (ok, targets: stopped at
# the targets, cut: at LR_LIMIT, failed), the test loss and accuracy, the bytes, lr_times's
# fields, gem-run's wall seconds
lr_run() {
	local run=$1 rate=$2 stop=$3 pid t0 tm how=ok ev
	shift 3
	ns_hosts "$rate" || { echo "linkruns: $run: cannot make the hosts" >&2; return 1; }
	rm -rf "$run"
	t0=$(date +%s.%N)
	nice -n 5 ip netns exec "$NS_P-h0" env PATH="$lr_shim:$PATH" GEM_HOST=h0 gem-run -q \
		--hosts "$lr_shim/hosts" --no-tls --listen 0.0.0.0:0 "$@" "$run" >"$run.tsv" 2>"$run.err" &
	pid=$!
	while kill -0 $pid 2>/dev/null; do
		sleep 2
		[ -s "$run/log.jsonl" ] || continue
		tm=$(lr_times "$run/log.jsonl")
		if awk -F'\t' -v l="$LR_LIMIT" '{ exit !($1 >= l) }' <<<"$tm"; then
			how="cut"
		elif [ "$stop" = 1 ] && ! cut -f2- <<<"$tm" | grep -q -- '-'; then
			how="targets"
		else
			continue
		fi
		kill -TERM $pid 2>/dev/null
		break
	done
	wait $pid || [ $how != ok ] || { how=failed; tail -3 "$run.err" >&2; }
	tm=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.0f", b - a }')
	ns_teardown
	ev=$(awk -F'\t' '!/^#/ && NF >= 5 { print $4 "\t" $5 }' "$run.tsv")
	[ -n "$ev" ] || ev=$(gem-eval "$run" 2>>"$run.err" | awk -F'\t' '!/^#/ { print $4 "\t" $5 }')
	printf '%s\t%s\t%s\t%s\t%s\n' "$how" "${ev:--	-}" "$(lr_bytes "$run/log.jsonl")" \
		"$(lr_times "$run/log.jsonl")" "$tm"
}
