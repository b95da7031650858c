#!/bin/sh
#SBATCH --job-name=gem
#SBATCH --ntasks=3
#SBATCH --cpus-per-task=1
#SBATCH --signal=TERM@60
# slurm.sh: a gem run as a Slurm job: of its SLURM_NTASKS tasks, task 0 runs gem-serve and
# task I (1, 2, ...) runs gem-work as worker I-1. RUNDIR must be on a filesystem every node
# shares: it holds the run, the bearer token and the server's URL, by which the workers find
# the server. The header asks for 3 tasks (a server and 2 workers), which starts on the
# smallest partition; ask for more on the command line (sbatch -n 9 for 8 workers).
#
#   sbatch share/gem/examples/slurm.sh RUNDIR [gem-init options]
#   sbatch -n 17 -t 30 share/gem/examples/slurm.sh /shared/runs/gem16 --model cnn --lr 0.1
#
# The batch step makes the run (gem-init --workers SLURM_NTASKS-1) unless RUNDIR holds one
# already: a resubmission of the same command continues the run from its last checkpoint
# (the gem-init options are then ignored; keep the task count). It makes a fresh token, starts
# the tasks with srun (copying this script into RUNDIR, since Slurm keeps the batch script only
# on the first node) and prints gem-eval's TSV when they are done. Each task writes its
# messages to RUNDIR/task-I.log; each worker task its exit status to RUNDIR/done-I, and task 0
# stops the server (which checkpoints) once they all have.
#
# A minute before the job's time runs out (sbatch -t; the header's --signal=TERM@60), Slurm
# sends SIGTERM to the tasks: the server checkpoints, the workers leave, and the batch step
# prints gem-eval's TSV of that checkpoint and says that the run was cut and how to continue
# it (resubmit the same command). To stop a job cleanly by hand, do the same:
# scancel --signal=TERM JOBID (a plain scancel kills the server before it checkpoints).
#
# Environment:
#   GEM_SERVER_HOST  the host name the workers reach task 0 by; default the first node of
#                    SLURM_JOB_NODELIST (scontrol show hostnames), where srun puts task 0
#   GEM_PORT         the server's port; default 0, a free one (read from RUNDIR/server.url)
#   GEM_SLURM_TASK   set to 1 by the batch step for the tasks; not to be set by hand
#
# Exit status: 0 when every task finished, 1 when one failed or the time ran out, 2 on bad
# usage.
set -eu

usage() {
	echo "usage: sbatch [--ntasks=N] slurm.sh RUNDIR [gem-init options]" >&2
	exit 2
}
[ $# -ge 1 ] || usage
[ -n "${SLURM_NTASKS:-}" ] && [ "$SLURM_NTASKS" -ge 2 ] 2>/dev/null || {
	echo "slurm.sh: run it with sbatch, with two tasks or more (SLURM_NTASKS)" >&2
	usage
}
run=$1
shift

if [ "${GEM_SLURM_TASK:-}" != 1 ]; then
	# The batch step.
	if [ -f "$run/run.json" ]; then
		echo "slurm.sh: $run holds a run: continuing it from its last checkpoint" >&2
	else
		gem-init -q --workers $((SLURM_NTASKS - 1)) "$@" "$run"
	fi
	(umask 077 && head -c 24 /dev/urandom | base64 >"$run/token")
	rm -f "$run/server.url" "$run"/done-* "$run/slurm-cut"
	cp "$0" "$run/slurm-task.sh"
	status=0 cut=0
	# the tasks signaled (the time limit's --signal, scancel --signal=TERM) write
	# RUNDIR/slurm-cut; a signal to this step itself (scancel) is waited out too
	trap 'cut=1' TERM INT
	GEM_SLURM_TASK=1 srun --export=ALL sh "$run/slurm-task.sh" "$run" &
	srun=$!
	while :; do
		rc=0
		wait $srun || rc=$?
		# a trapped signal interrupts wait (status > 128) while srun still runs
		kill -0 $srun 2>/dev/null || break
	done
	[ $rc = 0 ] || status=1
	[ ! -e "$run/slurm-cut" ] || cut=1
	if [ $cut = 1 ]; then
		gem-eval "$run" || :
		echo "slurm.sh: the job was stopped (time limit or scancel) at version" \
			"$(sed -n '1s/.*"version":\([0-9]*\).*/\1/p' "$run/params.gem");" \
			"resubmit the same command to continue the run" >&2
		exit 1
	fi
	# no TSV when a task failed: it would read as the run's result
	[ $status = 0 ] || { echo "slurm.sh: a task failed; see $run/task-*.log" >&2; exit 1; }
	gem-eval "$run"
	exit 0
fi

log="$run/task-$SLURM_PROCID.log"
if [ "$SLURM_PROCID" = 0 ]; then
	# The server. It runs until every worker task has written RUNDIR/done-I (with
	# --keep-running: by itself it would stop once the workers that have joined are done,
	# and on a cluster some may join late).
	gem-serve --keep-running --listen "0.0.0.0:${GEM_PORT:-0}" --public \
		--token-file "$run/token" "$run" >/dev/null 2>"$log" &
	server=$!
	trap ': >"$run/slurm-cut"; kill $server 2>/dev/null' INT TERM
	while kill -0 $server 2>/dev/null &&
		[ "$(find "$run" -maxdepth 1 -name 'done-*' | wc -l)" -lt $((SLURM_NTASKS - 1)) ]; do
		# the signal kills sleep too (the task's process group): that must not end this
		# shell (set -e) and with it, Slurm killing the rest, the server mid-checkpoint
		sleep 0.5 || :
	done
	kill $server 2>/dev/null || :
	# stopped by our TERM, it checkpoints and exits 143
	rc=0
	wait $server || rc=$?
	[ $rc = 143 ] && exit 0
	exit $rc
fi

# Worker SLURM_PROCID-1: wait for the server's URL, then train against task 0's host.
i=0
while [ ! -s "$run/server.url" ]; do
	[ $i -lt 1200 ] || { echo "slurm.sh: no $run/server.url after 120 s" >"$log"; exit 1; }
	i=$((i + 1))
	sleep 0.1 || :
done
port=$(sed 's/.*://' "$run/server.url")
host=${GEM_SERVER_HOST:-$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)}
status=0
gem-work -q --server "http://$host:$port" --worker-id $((SLURM_PROCID - 1)) \
	--token-file "$run/token" --retry-for 120 >"$log" 2>&1 &
worker=$!
trap ': >"$run/slurm-cut"; kill $worker 2>/dev/null' INT TERM
while :; do
	status=0
	wait $worker || status=$?
	kill -0 $worker 2>/dev/null || break
done
echo $status >"$run/done-$SLURM_PROCID"
exit $status
