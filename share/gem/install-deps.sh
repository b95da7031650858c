#!/bin/sh
# Install the Debian packages gem needs to build, test and run; only those missing. Then write
# the text corpus kjv (nn/data.h) once: the King James Bible as bible-kjv prints it, in
# /usr/share/datasets/kjv/kjv.txt (80 columns: its line breaks follow $COLUMNS).
# With the argument fuzz, also those of make fuzz; with hosts, those of make check-hosts.
set -e
pkgs="build-essential libcurl4-openssl-dev libjansson-dev zlib1g-dev libdeflate-dev libblis-dev libmicrohttpd-dev
pkg-config gnuplot-nox dataset-fashion-mnist bible-kjv perl curl python3 groff-base man-db procps
hostname findutils openssl time python3-torch python3-numpy"
# sh install-deps.sh fuzz: also what make fuzz needs (clang with libFuzzer); not make check
[ "${1:-}" = fuzz ] && pkgs="$pkgs clang libclang-rt-dev"
# sh install-deps.sh hosts: also what make check-hosts needs (real sshd, ssh, Slurm with munge,
# iproute2 for the network namespaces, nsenter)
[ "${1:-}" = hosts ] && pkgs="$pkgs openssh-server openssh-client slurm-wlm munge iproute2 util-linux"
missing=
for p in $pkgs; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing="$missing $p"
done
sudo=
[ "$(id -u)" = 0 ] || sudo=sudo
if [ -n "$missing" ]; then
	echo "deps: installing$missing"
	$sudo apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends $missing
else
	echo "deps: all installed"
fi
kjv=/usr/share/datasets/kjv
if [ ! -s $kjv/kjv.txt ]; then
	echo "deps: writing $kjv/kjv.txt"
	$sudo mkdir -p $kjv
	$sudo sh -c "COLUMNS=80 bible 'Gen1:1-Rev22:21' > $kjv/kjv.txt.tmp"
	$sudo mv $kjv/kjv.txt.tmp $kjv/kjv.txt
fi
