#!/usr/bin/env bash
# flowmesh demo, one command (as root): a private Open vSwitch with 3 bridges (one per node,
# dummy datapath, nothing touches the host network), flowmesh-controller on its embedded store,
# two namespaces with pods, then `flowmeshctl get`, `dump-flows` (desired vs what OVS holds)
# and a trace of an allowed and of a blocked packet. Everything is stopped on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" -ne 0 ]; then
    echo "the demo runs its own Open vSwitch daemons: run it as root (sudo bash scripts/demo.sh)" >&2
    exit 1
fi
bash scripts/deps.sh
cargo build --release -p controller -p flowmeshctl --bins
bin=$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')/release

run=$(mktemp -d /tmp/flowmesh-demo.XXXXXX)
export OVS_RUNDIR=$run OVS_LOGDIR=$run OVS_DBDIR=$run OVS_SYSCONFDIR=$run
GRPC=${FLOWMESH_DEMO_GRPC:-127.0.0.1:19650}
OF=${FLOWMESH_DEMO_OPENFLOW:-127.0.0.1:16653}
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    rm -rf "$run"
}
trap cleanup EXIT
say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
ctl() { echo "\$ flowmeshctl $*"; "$bin/flowmeshctl" --server "http://$GRPC" "$@"; }

say "private Open vSwitch in $run (dummy datapath)"
ovsdb-tool create "$run/conf.db" /usr/share/openvswitch/vswitch.ovsschema
ovsdb-server --no-chdir --pidfile --log-file -vconsole:off --remote=punix:"$run/db.sock" "$run/conf.db" &
pids+=($!)
for _ in $(seq 100); do ovs-vsctl --no-wait show >/dev/null 2>&1 && break; sleep 0.05; done
ovs-vsctl --no-wait init
ovs-vswitchd --enable-dummy --disable-system --disable-system-route --no-chdir --pidfile --log-file -vconsole:off &
pids+=($!)
for _ in $(seq 100); do ovs-appctl version >/dev/null 2>&1 && break; sleep 0.05; done

say "flowmesh-controller (embedded store in $run/data)"
"$bin/flowmesh-controller" --data-dir "$run/data" --grpc-listen "$GRPC" --openflow-listen "$OF" \
    --metrics-listen 127.0.0.1:0 --log warn 2>"$run/controller.log" &
pids+=($!)
for _ in $(seq 200); do "$bin/flowmeshctl" --server "http://$GRPC" get switches >/dev/null 2>&1 && break; sleep 0.05; done

say "three nodes: bridges node-1..3 with vxlan0 (ofport 1), tun0 (2), two pod ports (3, 4)"
args=()
for n in 1 2 3; do
    b=node-$n
    args+=(-- add-br $b -- set bridge $b datapath_type=dummy protocols=OpenFlow13 fail-mode=secure
           other-config:datapath-id=$(printf '%016x' $n) other-config:disable-in-band=true
           -- add-port $b $b-vxlan0 -- set interface $b-vxlan0 type=vxlan ofport_request=1
              options:remote_ip=flow options:key=flow options:local_ip=192.0.2.$n
           -- add-port $b $b-tun0 -- set interface $b-tun0 type=internal ofport_request=2
           -- add-port $b $b-p1 -- set interface $b-p1 type=dummy ofport_request=3
           -- add-port $b $b-p2 -- set interface $b-p2 type=dummy ofport_request=4
           -- set-controller $b tcp:$OF -- set controller $b max_backoff=1000)
done
ovs-vsctl "${args[@]}"
for n in 1 2 3; do ctl node add node-$n --ip 192.0.2.$n --dpid $n; done

say "namespaces and pods"
ctl namespace create blue
ctl namespace create red
ctl pod attach --node node-1 --namespace blue --name web-1 --port node-1-p1 --ofport 3
ctl pod attach --node node-2 --namespace blue --name web-2 --port node-2-p1 --ofport 3
ctl pod attach --node node-1 --namespace red --name db-1 --port node-1-p2 --ofport 4
ctl get hostsubnets
ctl get netnamespaces
ctl get pods
ctl get switches

say "node-1: what the controller wants (first lines) and whether OVS holds exactly that"
ctl dump-flows node-1 | head -n 12
"$bin/flowmeshctl" --server "http://$GRPC" dump-flows node-1 | sort >"$run/desired"
ovs-ofctl -O OpenFlow13 dump-flows node-1 --no-stats | sed 's/^ //' | grep -v '^OFPST_FLOW' | sort >"$run/installed"
if diff -u "$run/desired" "$run/installed"; then
    echo "ovs-ofctl dump-flows node-1 == flowmeshctl dump-flows node-1 ($(wc -l <"$run/installed") flows)"
fi
ctl dump-flows node-1 --diff

say "trace: blue/web-1 -> blue/web-2 (same namespace, across VXLAN): allowed"
ctl trace --from blue/web-1 --to blue/web-2 --tcp 80
say "trace: red/db-1 -> blue/web-1 (different namespaces): blocked"
ctl trace --from red/db-1 --to blue/web-1

say "join red to blue, and the same packet is allowed"
ctl adm pod-network join-projects --to=blue red
ctl trace --from red/db-1 --to blue/web-1
