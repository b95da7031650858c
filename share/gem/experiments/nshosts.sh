# nshosts.sh: hosts made of network namespaces, for the experiment scripts that need real
# links (sgp-links.sh, scale-hosts.sh, and codec.sh's and lowcomm.sh's PARTS=tbf through
# linkruns.sh); sourced, not run, as root.
#
# Hosts NS_P-h0 .. NS_P-hN, one network namespace each, on a bridge in a namespace of its own
# (NS_P-br), addresses NS_NET.(10 + i) inside them only, names h0 .. hN in each host's
# /etc/hosts; each host's link limited both ways with tc's tbf (on its veth and on the bridge's
# end). gem-run reaches them through ns_shim's "ssh", which runs the command in the host's
# namespace: the hosts share the filesystem, so nothing is copied.
#
# The caller sets NS_P (a prefix unique to the script's run, e.g. gemx$$), NS_N (the last
# host's index) and NS_NET (the first three octets, e.g. 10.78.0), then calls ns_shim DIR once,
# ns_hosts for each configuration, and ns_teardown at exit.

# ns_shim DIR: DIR/ssh, gem-run's "ssh": drop the options, run the command in the host's
# namespace.
ns_shim() {
	cat >"$1/ssh" <<-EOF2 && chmod +x "$1/ssh"
	#!/bin/sh
	while [ \$# -gt 0 ]; do
		case \$1 in
		-[BbcDEeFIiJLlmOoPpQRSWw]) shift 2 ;;
		-*) shift ;;
		*) break ;;
		esac
	done
	h=\$1
	shift
	exec ip netns exec "$NS_P-\$h" sh -c "\$*"
	EOF2
}

# ns_teardown: kill what runs on the hosts, remove them and the bridge.
ns_teardown() {
	local i p
	for i in $(seq 0 "$NS_N"); do
		for p in $(ip netns pids "$NS_P-h$i" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
		ip netns del "$NS_P-h$i" 2>/dev/null
		rm -rf "/etc/netns/$NS_P-h$i"
	done
	ip netns del "$NS_P-br" 2>/dev/null
}

# ns_hosts RATE [SLOW]: the hosts h0 .. hNS_N afresh, each link at RATE Mbit/s; host SLOW's (if
# given) at a tenth of it.
ns_hosts() {
	local rate=$1 slow=${2:--1} i j r
	ns_teardown
	ip netns add "$NS_P-br" && ip -n "$NS_P-br" link add br0 type bridge &&
		ip -n "$NS_P-br" link set br0 up || return 1
	for i in $(seq 0 "$NS_N"); do
		ip netns add "$NS_P-h$i" &&
		ip -n "$NS_P-br" link add "v$i" type veth peer name eth0 netns "$NS_P-h$i" &&
		ip -n "$NS_P-br" link set "v$i" master br0 up &&
		ip -n "$NS_P-h$i" addr add "$NS_NET.$((10 + i))/24" dev eth0 &&
		ip -n "$NS_P-h$i" link set eth0 up && ip -n "$NS_P-h$i" link set lo up || return 1
		mkdir -p "/etc/netns/$NS_P-h$i"
		{
			echo "127.0.0.1 localhost"
			for j in $(seq 0 "$NS_N"); do echo "$NS_NET.$((10 + j)) h$j"; done
		} >"/etc/netns/$NS_P-h$i/hosts"
		r=$((rate * 1000))
		[ "$i" != "$slow" ] || r=$((rate * 100))
		tc -n "$NS_P-h$i" qdisc add dev eth0 root tbf rate "${r}kbit" burst 256kb latency 100ms &&
		tc -n "$NS_P-br" qdisc add dev "v$i" root tbf rate "${r}kbit" burst 256kb latency 100ms ||
			return 1
	done
}
