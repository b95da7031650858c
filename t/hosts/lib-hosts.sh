# lib-hosts.sh: hosts made of network namespaces for the tests of make check-hosts. Sourced by
# t/hosts/tNNNN-*.sh after t/test-lib.sh. hosts_setup N makes N "hosts" node1..nodeN: each a
# network namespace (named gemh<pid>-I) with the address 10.77.0.1I on a bridge of its own (in
# the namespace gemh<pid>-br; nothing is added to the machine's own network), an /etc/hosts
# (iproute2's /etc/netns/NAME/hosts, which `ip netns exec` mounts over /etc/hosts) and an sshd
# with its own host key and config in the trash directory, letting root in with a key made for
# the test. hostbin/ssh and hostbin/scp use the test's ssh config (its key, its known_hosts).
# Everything is stopped and removed by pid and by name when the script exits.

: "${GEM_SRC:=$(cd "$(dirname "$0")/../.." && pwd)}"
: "${GEM_BIN:=$GEM_SRC/bin}"
export GEM_SRC GEM_BIN
. "$GEM_SRC/t/test-lib.sh"

HOSTS_NS=gemh$$
HOSTS_N=0
HOSTS_SSHD=()

# hosts_need: skip the whole script unless this is root with network namespaces, sshd and ssh.
hosts_need() {
	[ "$(id -u)" = 0 ] || test_skip_all "not root (network namespaces need it)"
	command -v ip >/dev/null || test_skip_all "no ip (iproute2)"
	[ -x /usr/sbin/sshd ] && [ -x /usr/bin/ssh ] && command -v ssh-keygen >/dev/null ||
		test_skip_all "no sshd or ssh (make deps-hosts)"
	ip netns add "$HOSTS_NS-probe" 2>/dev/null && ip netns del "$HOSTS_NS-probe" ||
		test_skip_all "network namespaces unavailable (ip netns add failed)"
}

# on_host I CMD...: run CMD on host I (in its namespace, with its /etc/hosts).
on_host() {
	_h=$1
	shift
	ip netns exec "$HOSTS_NS-$_h" "$@"
}

# hosts_setup N [EXTRA-HOSTS-LINE-FOR-NODE1]: the N hosts and their sshds.
hosts_setup() {
	HOSTS_N=$1
	_br=$HOSTS_NS-br
	mkdir -p "$TRASH/hostcfg" "$TRASH/hostbin" &&
	ip netns add "$_br" &&
	ip -n "$_br" link add br0 type bridge &&
	ip -n "$_br" link set br0 up || return 1
	: >"$TRASH/hostcfg/hosts"
	for _i in $(seq "$HOSTS_N"); do
		echo "10.77.0.1$_i node$_i" >>"$TRASH/hostcfg/hosts"
	done
	ssh-keygen -q -t ed25519 -N "" -f "$TRASH/hostcfg/id" &&
	cp "$TRASH/hostcfg/id.pub" "$TRASH/hostcfg/authorized_keys" &&
	: >"$TRASH/hostcfg/known_hosts" || return 1
	for _i in $(seq "$HOSTS_N"); do
		_ns=$HOSTS_NS-$_i _d=$TRASH/hostcfg/node$_i
		mkdir -p "$_d" "/etc/netns/$_ns" &&
		{ echo "127.0.0.1 localhost"; cat "$TRASH/hostcfg/hosts"; } >"/etc/netns/$_ns/hosts" &&
		ip netns add "$_ns" &&
		ip -n "$_br" link add "v$_i" type veth peer name eth0 netns "$_ns" &&
		ip -n "$_br" link set "v$_i" master br0 up &&
		ip -n "$_ns" addr add "10.77.0.1$_i/24" dev eth0 &&
		ip -n "$_ns" link set eth0 up &&
		ip -n "$_ns" link set lo up &&
		ssh-keygen -q -t ed25519 -N "" -f "$_d/host_key" &&
		echo "node$_i,10.77.0.1$_i $(cut -d" " -f1-2 "$_d/host_key.pub")" >>"$TRASH/hostcfg/known_hosts" &&
		cat >"$_d/sshd_config" <<-EOF || return 1
		ListenAddress 10.77.0.1$_i
		HostKey $_d/host_key
		PidFile $_d/sshd.pid
		AuthorizedKeysFile $TRASH/hostcfg/authorized_keys
		PermitRootLogin prohibit-password
		PasswordAuthentication no
		KbdInteractiveAuthentication no
		UsePAM no
		StrictModes no
		SetEnv PATH=$GEM_BIN:/usr/local/bin:/usr/bin:/bin
		Subsystem sftp internal-sftp
		LogLevel ERROR
		EOF
	done
	cat >"$TRASH/hostcfg/ssh_config" <<-EOF &&
	Host *
	  User root
	  IdentityFile $TRASH/hostcfg/id
	  IdentitiesOnly yes
	  UserKnownHostsFile $TRASH/hostcfg/known_hosts
	  GlobalKnownHostsFile /dev/null
	  StrictHostKeyChecking yes
	  LogLevel ERROR
	EOF
	printf '#!/bin/sh\nexec /usr/bin/ssh -F %s "$@"\n' "$TRASH/hostcfg/ssh_config" >"$TRASH/hostbin/ssh" &&
	printf '#!/bin/sh\nexec /usr/bin/scp -F %s "$@"\n' "$TRASH/hostcfg/ssh_config" >"$TRASH/hostbin/scp" &&
	chmod +x "$TRASH/hostbin/ssh" "$TRASH/hostbin/scp" &&
	mkdir -p /run/sshd || return 1
	for _i in $(seq "$HOSTS_N"); do
		hosts_start_sshd "$_i" || return 1
	done
	# every sshd answers
	for _i in $(seq "$HOSTS_N"); do
		_t=0
		until on_host 1 "$TRASH/hostbin/ssh" -o BatchMode=yes -o ConnectTimeout=5 "node$_i" true \
			</dev/null 2>"$TRASH/hostcfg/probe.err"; do
			_t=$((_t + 1))
			[ $_t -lt 50 ] || { cat "$TRASH/hostcfg/probe.err" "$TRASH/hostcfg/sshd-$_i.log"; return 1; }
			sleep 0.1
		done
	done
	PATH="$TRASH/hostbin:$PATH"
	export PATH
}

# hosts_start_sshd I: (re)start host I's sshd; its pid in HOSTS_SSHD[I] (from its pid file:
# ip netns exec may run it as a child).
hosts_start_sshd() {
	rm -f "$TRASH/hostcfg/node$1/sshd.pid"
	on_host "$1" /usr/sbin/sshd -D -e -f "$TRASH/hostcfg/node$1/sshd_config" \
		2>>"$TRASH/hostcfg/sshd-$1.log" &
	test_bg $!
	wait_for_file "$TRASH/hostcfg/node$1/sshd.pid" 10 &&
	HOSTS_SSHD[$1]=$(cat "$TRASH/hostcfg/node$1/sshd.pid")
}

# hosts_leftovers: the processes running on the hosts besides their sshds (none: no output).
hosts_leftovers() {
	for _i in $(seq "$HOSTS_N"); do
		for _p in $(ip netns pids "$HOSTS_NS-$_i" 2>/dev/null); do
			[ "$_p" = "${HOSTS_SSHD[$_i]}" ] && continue
			_a=$(ps -o args= -p "$_p" 2>/dev/null) || continue
			# an ssh session that is closing (its sshd, a watchdog's cat) is gone in a moment
			echo "node$_i: $_p $_a"
		done
	done
}

# hosts_wait_clean [SECONDS]: wait until no process but the sshds runs on any host (default 15 s);
# else print what is left and fail.
hosts_wait_clean() {
	_t=0
	while [ -n "$(hosts_leftovers)" ]; do
		_t=$((_t + 1))
		[ $_t -le $((${1:-15} * 10)) ] || { echo "left on the hosts:"; hosts_leftovers; return 1; }
		sleep 0.1
	done
}

# hosts_teardown: kill whatever runs in the namespaces (by pid), remove them and their files.
hosts_teardown() {
	for _i in $(seq "$HOSTS_N"); do
		for _p in $(ip netns pids "$HOSTS_NS-$_i" 2>/dev/null); do
			kill -CONT "$_p" 2>/dev/null
			kill -9 "$_p" 2>/dev/null
		done
	done
	for _i in $(seq "$HOSTS_N"); do
		ip netns del "$HOSTS_NS-$_i" 2>/dev/null
		rm -rf "/etc/netns/$HOSTS_NS-$_i"
	done
	ip netns del "$HOSTS_NS-br" 2>/dev/null
	return 0
}
trap 'hosts_teardown; test_cleanup' EXIT
# a closed terminal or pipe also ends the script through its EXIT trap (the hosts removed)
trap 'exit 129' HUP
trap 'exit 141' PIPE
