#!/usr/bin/env bash
# Stops the cluster scripts/kube-up.sh started and removes what it made: every process it
# started (by the PIDs it recorded, then whatever is left in the nodes' cgroups: containerd
# shims and the pods' processes), the nodes' mount and network namespaces, cgroups, state
# directory (logs are kept in ${FLOWMESH_CLUSTER_DIR:-/var/lib/flowmesh-kube}/logs unless
# --purge), and the host kernel settings kubelet changed are put back.
#
#   scripts/kube-down.sh [--purge]
set -uo pipefail

dir=${FLOWMESH_CLUSTER_DIR:-/var/lib/flowmesh-kube}
purge=false
[[ ${1-} == --purge ]] && purge=true
log() { echo "kube-down.sh: $*" >&2; }
[[ -d $dir ]] || exit 0

# stop PID...: SIGTERM, up to 10 s, then SIGKILL.
stop() {
  local pids=() p
  for p in "$@"; do [[ $p =~ ^[0-9]+$ ]] && kill -0 "$p" 2>/dev/null && pids+=("$p"); done
  ((${#pids[@]})) || return 0
  kill -TERM "${pids[@]}" 2>/dev/null
  local deadline=$((SECONDS + 10)) alive
  while ((SECONDS < deadline)); do
    alive=()
    for p in "${pids[@]}"; do
      # A zombie (PID 1 here does not reap) counts as gone.
      [[ -e /proc/$p && $(awk '{print $3}' "/proc/$p/stat" 2>/dev/null) != Z ]] && alive+=("$p")
    done
    ((${#alive[@]})) || return 0
    sleep 0.2
  done
  kill -KILL "${alive[@]}" 2>/dev/null
}

# Node daemons first (kubelet before containerd before OVS), then the control plane.
order=()
for f in "$dir"/pids/node*-kubelet "$dir"/pids/node*-kube-proxy "$dir"/pids/node*-containerd \
  "$dir"/pids/node*-vswitchd "$dir"/pids/node*-ovsdb "$dir"/pids/scheduler \
  "$dir"/pids/controller-manager "$dir"/pids/apiserver "$dir"/pids/etcd "$dir"/pids/syslog; do
  [[ -f $f ]] && order+=("$f")
done
for f in "${order[@]}"; do
  stop "$(cat "$f")"
  rm -f "$f"
done

# What the nodes' runtimes started (shims, pods): every process left in the nodes' cgroups.
if [[ -f $dir/cgroup ]]; then
  cg=$(cat "$dir/cgroup")
  for round in 1 2 3; do
    left=$(find /sys/fs/cgroup/memory"$cg" -name cgroup.procs -exec cat {} + 2>/dev/null | sort -u)
    [[ -z $left ]] && break
    # shellcheck disable=SC2086
    stop $left
  done
  # Remove the cgroups bottom-up in every hierarchy.
  for h in /sys/fs/cgroup/*/; do
    [[ -d $h${cg#/} ]] && find "$h${cg#/}" -depth -type d -exec rmdir {} + 2>/dev/null
  done
  rm -f "$dir/cgroup"
fi

# The /dev/log receiver kube-up started when the machine had none: its socket goes too.
if [[ -f $dir/devlog-ours ]]; then
  [[ -S /dev/log ]] && rm -f /dev/log
  rm -f "$dir/devlog-ours"
fi

for m in "$dir"/ns/*.mnt; do
  [[ -e $m ]] && umount "$m" 2>/dev/null
  rm -f "$m"
done
mountpoint -q "$dir/ns" && umount "$dir/ns"

for ns in $(ip netns list | awk '{print $1}' | grep -E '^fmk-(ul|cp|n[0-9]+)$'); do
  ip netns delete "$ns"
done

if [[ -f $dir/sysctl.before ]]; then
  read -r -d '' oc pom panic poops maxkeys maxbytes <"$dir/sysctl.before"
  sysctl -q -w vm.overcommit_memory="$oc" vm.panic_on_oom="$pom" kernel.panic="$panic" \
    kernel.panic_on_oops="$poops" kernel.keys.root_maxkeys="$maxkeys" \
    kernel.keys.root_maxbytes="$maxbytes" || true
  rm -f "$dir/sysctl.before"
fi

# flowmesh's own pods' logs (controller replicas, shims) join the daemons' in logs/pods/nodeN/
# before the nodes' state goes: a failed cluster test is read from them afterwards.
for pods in "$dir"/nodes/*/log/pods; do
  [[ -d $pods ]] || continue
  n=$(basename "$(dirname "$(dirname "$pods")")")
  for p in "$pods"/flowmesh_*; do
    [[ -d $p ]] || continue
    mkdir -p "$dir/logs/pods/$n"
    cp -rL "$p" "$dir/logs/pods/$n/" 2>/dev/null || true
  done
done

# State: everything but the logs (kept for a look after a failure) unless --purge.
rm -rf "$dir/nodes" "$dir/etcd" "$dir/pki" "$dir/flowmesh-pki" "$dir/pids" "$dir/ns" \
  "$dir/run" "$dir/deploy" "$dir/up" "$dir/env" "$dir/mode" "$dir/key" "$dir/resolv.conf"
if $purge; then rm -rf "$dir"; else log "logs kept in $dir/logs"; fi
exit 0
