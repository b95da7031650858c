#!/bin/bash
# t8101: share/gem/examples/slurm.sh under a real one-node Slurm (slurmctld, slurmd and munged
# started from the trash directory with their own config, in a network namespace): a job that
# trains and prints the TSV; a job cut by its time limit (sbatch -t 1, the tasks warned 30 s
# before by --signal), which prints the checkpoint's TSV and says to resubmit; the resubmission
# continues from that checkpoint, and stops cleanly on scancel --signal=TERM.
. "$(dirname "$0")/lib-hosts.sh"
hosts_need
for p in slurmctld slurmd munged sbatch; do
	command -v $p >/dev/null || test_skip_all "no $p (make deps-hosts)"
done

TINY="--model tiny.json --data data --batch 32 --lr 0.1 --seed 3"
SL=$TRASH/slurm
export SLURM_CONF=$SL/slurm.conf

# in_ns CMD...: CMD in host 1's network namespace. Slurm's daemons keep the machine's mounts
# (ip netns exec would mount a sysfs without /sys/fs/cgroup, which slurmd needs), so names
# are the addresses.
in_ns() { nsenter --net="/run/netns/$HOSTS_NS-1" "$@"; }

# job_version OUT: the version of the TSV line in a job's output (its column found by name:
# gem-eval's columns grow).
job_version() {
	awk -F"\t" '/^# elapsed\t/ { for (i = 1; i <= NF; i++) if ($i == "version") c = i; next }
		c && !/^#/ { print $c; exit }' "$1"
}

test_expect_success 'setup: a host, munged, slurmctld and slurmd; tiny data' '
	hosts_setup 1 &&
	make_tiny_data data &&
	mkdir -p "$SL/munge" "$SL/state" "$SL/spool" &&
	chmod 700 "$SL/munge" &&
	head -c 1024 /dev/urandom >"$SL/munge/key" && chmod 400 "$SL/munge/key" &&
	{ munged -F -f --key-file="$SL/munge/key" --socket="$SL/munge/sock" \
		--pid-file="$SL/munge/pid" --log-file="$SL/munge/log" --seed-file="$SL/munge/seed" \
		2>"$SL/munged.err" & test_bg $!; } &&
	wait_for_file "$SL/munge/pid" 10 &&
	cat >"$SLURM_CONF" <<-CONF &&
	ClusterName=gemtest
	SlurmctldHost=$(hostname -s)(10.77.0.11)
	SlurmUser=root
	SlurmdUser=root
	AuthType=auth/munge
	AuthInfo=socket=$SL/munge/sock
	CredType=cred/munge
	StateSaveLocation=$SL/state
	SlurmdSpoolDir=$SL/spool
	SlurmctldPidFile=$SL/slurmctld.pid
	SlurmdPidFile=$SL/slurmd.pid
	SlurmctldLogFile=$SL/slurmctld.log
	SlurmdLogFile=$SL/slurmd.log
	ProctrackType=proctrack/pgid
	TaskPlugin=task/none
	JobAcctGatherType=jobacct_gather/none
	AccountingStorageType=accounting_storage/none
	JobCompType=jobcomp/none
	SelectType=select/cons_tres
	SelectTypeParameters=CR_Core
	SlurmdParameters=config_overrides
	MpiDefault=none
	ReturnToService=2
	KillWait=15
	MinJobAge=600
	InactiveLimit=0
	NodeName=node1 NodeAddr=10.77.0.11 CPUs=8 State=UNKNOWN
	PartitionName=debug Nodes=node1 Default=YES MaxTime=INFINITE State=UP
	CONF
	{ in_ns slurmctld -D -f "$SLURM_CONF" 2>"$SL/slurmctld.err" & test_bg $!; } &&
	{ in_ns slurmd -D -N node1 -f "$SLURM_CONF" 2>"$SL/slurmd.err" & test_bg $!; } &&
	for i in $(seq 100); do
		in_ns sinfo -h -o %T 2>/dev/null | grep -q idle && break
		sleep 0.2
	done &&
	in_ns sinfo || { tail "$SL"/*.log "$SL"/*.err; false; }
'

test_expect_success 'sbatch slurm.sh (header: 3 tasks): a server and 2 workers train, the TSV' '
	GEM_SERVER_HOST=10.77.0.11 in_ns sbatch -W -o job1.out \
		"$GEM_SHARE_DIR/examples/slurm.sh" run1 $TINY --epochs 1 &&
	cat job1.out &&
	test "$(job_version job1.out)" = 126 &&
	grep -q "\"nworkers\": 2" run1/run.json &&
	grep "\"event\":\"join\"" run1/log.jsonl >joins &&
	grep -q "\"worker\":0" joins && grep -q "\"worker\":1" joins
'

test_expect_success 'a job cut by its time limit: the checkpoint TSV, and how to continue' '
	{ GEM_SERVER_HOST=10.77.0.11 in_ns sbatch -W -t 1 --signal=TERM@30 -o job2.out \
		"$GEM_SHARE_DIR/examples/slurm.sh" run2 $TINY --epochs 100000; true; } &&
	cat job2.out &&
	grep -q "stopped (time limit or scancel) at version [1-9]" job2.out &&
	grep -q "resubmit the same command" job2.out &&
	v=$(job_version job2.out) && test "$v" -gt 0 &&
	test "$(sed -n "1s/.*\"version\":\([0-9]*\).*/\1/p" run2/params.gem)" = "$v"
'

test_expect_success 'the resubmission continues from the checkpoint (scancel --signal=TERM)' '
	v0=$(job_version job2.out) &&
	job=$(GEM_SERVER_HOST=10.77.0.11 in_ns sbatch --parsable -o job3.out \
		"$GEM_SHARE_DIR/examples/slurm.sh" run2 $TINY --epochs 100000) &&
	test_when_finished "in_ns scancel $job 2>/dev/null; true" &&
	for i in $(seq 300); do
		test "$(grep -c "\"event\":\"join\"" run2/log.jsonl)" -ge 4 && break
		sleep 0.2
	done &&
	sleep 2 &&
	in_ns scancel --signal=TERM $job &&
	for i in $(seq 300); do
		grep -q "resubmit" job3.out 2>/dev/null && break
		sleep 0.2
	done &&
	cat job3.out &&
	grep -q "continuing it from its last checkpoint" job3.out &&
	v1=$(job_version job3.out) && test "$v1" -gt "$v0" &&
	test $(grep -c "\"event\":\"start\"" run2/log.jsonl) = 2 &&
	# the first update after the second start continues the version count
	awk -v v0=$v0 "/\"event\":\"start\"/ { s++; next } s == 2 && !/\"event\"/ { print; exit }" \
		run2/log.jsonl | grep -q "\"version\":$((v0 + 1))[,}]"
'
test_done
