#!/usr/bin/env bash
# Installs the Debian packages flowmesh's tests and demo need, when they are missing:
#
#   scripts/deps.sh              the packages below
#   scripts/deps.sh PACKAGE...   those packages (what upstream.sh, images.sh and kube-up.sh need)
#
# As root it runs apt-get; otherwise it prints the exact command and fails.
set -euo pipefail
# No protoc: the workspace compiles its .proto files with protox (tests/tests/build_without_protoc.rs).
# etcd-server + etcd-client (etcdctl): the etcd datastore tests run a real 3-member cluster; arping: the shim's
# gratuitous ARP for egress IPs; containernetworking-plugins + iptables: portmap and bandwidth chained after flowmesh-cni;
# faketime (libfaketime): the chaos soak's --clock-steps steps one replica's clock, never the machine's;
# make: the controller's allocator, jemalloc, is built from source (tikv-jemalloc-sys).
pkgs=(make openvswitch-switch openvswitch-common iproute2 iputils-ping arping ethtool nftables procps python3-grpcio
    etcd-server etcd-client containernetworking-plugins iptables faketime)
if (($#)); then
    pkgs=("$@")
fi
missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
    exit 0
fi
cmd="apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
    echo "flowmesh: missing system packages: ${missing[*]}" >&2
    echo "install them as root with:" >&2
    echo "    $cmd" >&2
    exit 1
fi
echo "flowmesh: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
# Several of the project's scripts may install at once (scripts/test.sh starts upstream.sh beside
# the Rust build): wait for dpkg's lock rather than fail on it.
apt-get -o DPkg::Lock::Timeout=600 update -qq
apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${missing[@]}"
