#!/bin/sh
# Install the Debian packages gem needs to build, test and run; only those missing.
# With the argument fuzz, also those of make fuzz; with hosts, those of make check-hosts.
set -e
pkgs="build-essential libcurl4-openssl-dev libjansson-dev zlib1g-dev libdeflate-dev libblis-dev libmicrohttpd-dev
pkg-config gnuplot-nox dataset-fashion-mnist perl curl python3 groff-base man-db procps
hostname findutils openssl time"
# sh install-deps.sh fuzz: also what make fuzz needs (clang with libFuzzer); not make check
[ "${1:-}" = fuzz ] && pkgs="$pkgs clang libclang-rt-dev"
# sh install-deps.sh hosts: also what make check-hosts needs (real sshd, ssh, Slurm with munge,
# iproute2 for the network namespaces, nsenter)
[ "${1:-}" = hosts ] && pkgs="$pkgs openssh-server openssh-client slurm-wlm munge iproute2 util-linux"
missing=
for p in $pkgs; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing="$missing $p"
done
[ -z "$missing" ] && { echo "deps: all installed"; exit 0; }
sudo=
[ "$(id -u)" = 0 ] || sudo=sudo
echo "deps: installing$missing"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends $missing
