#!/usr/bin/env bash
# Installs the Debian packages flowmesh's tests and demo need, when they are missing.
# As root it runs apt-get; otherwise it prints the exact command and fails.
set -euo pipefail
# No protoc: the workspace compiles its .proto files with protox (tests/tests/build_without_protoc.rs).
# etcd-server + etcd-client (etcdctl): the etcd datastore tests run a real 3-member cluster; arping: the shim's
# gratuitous ARP for egress IPs; containernetworking-plugins + iptables: portmap and bandwidth chained after flowmesh-cni;
# faketime (libfaketime): the chaos soak's --clock-steps steps one replica's clock, never the machine's.
pkgs=(openvswitch-switch openvswitch-common iproute2 iputils-ping arping ethtool nftables procps python3-grpcio
    etcd-server etcd-client containernetworking-plugins iptables faketime)
missing=()
for p in "${pkgs[@]}"; do
    dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
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
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"
