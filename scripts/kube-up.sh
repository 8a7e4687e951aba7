#!/usr/bin/env bash
# A real Kubernetes cluster on this one machine, from nothing (docs/cluster.md):
#
# * namespace fmk-ul: the underlay, a Linux bridge; fmk-cp (172.31.200.254): etcd,
#   kube-apiserver (own CA, RBAC, Node authorizer, NodeRestriction, service-account tokens),
#   kube-controller-manager, kube-scheduler;
# * nodes node1..node3 (172.31.200.1-3), each its own network namespace fmk-nN and mount
#   namespace (its own /run, /var/lib/kubelet, /var/lib/containerd, /etc/cni/net.d,
#   /opt/cni/bin, /etc/flowmesh, ...), its own Open vSwitch (userspace datapath: br-phy holds
#   the underlay address, br0 is left to flowmesh-shim), containerd + runc with the locally
#   built images imported (scripts/images.sh), a kubelet (cgroupfs driver, its own cgroup
#   root, credentials system:node:nodeN) and kube-proxy (iptables mode);
# * every node labelled master/control-plane (deploy/'s controller Deployment runs one replica
#   on each), none tainted: ordinary pods run on them too;
# * then `kubectl apply` of deploy/crds.yaml and deploy/kubernetes/ (the ConfigMap's
#   `controllers`, `openflow-targets` and mode set for this cluster, as docs/install.md says to
#   edit them), the ConfigMap flowmesh-apiserver (the API server's own address, install.md
#   step 5), the controller's TLS Secret and each node's certificate from `flowmeshctl
#   certs lab`; it waits until the controller replicas are Ready and every node is Ready;
# * routes from the control plane's namespace to each node's pod subnet via that node (the API
#   server reaches pods as on masters that are nodes);
# * then the cluster DNS, CoreDNS (scripts/cluster/coredns.yaml: cluster.local only, no
#   forwarder) behind kube-system/kube-dns at 172.30.0.10, kubelet's clusterDNS; in multitenant
#   mode kube-system is made global first (NETID 0, as OpenShift makes its DNS project global),
#   so that every project reaches it.
#
#   scripts/kube-up.sh [--mode multitenant|networkpolicy|subnet] [--bin-dir DIR]
#
# DIR holds flowmesh's release binaries (scripts/images.sh). State, logs and kubeconfigs live in
# ${FLOWMESH_CLUSTER_DIR:-/var/lib/flowmesh-kube}; the last line printed is that directory
# (its env file has KUBECONFIG and the namespaces' names). A cluster already up is reused when
# it is healthy and was made in the same mode from the same images, manifests and script. On failure the script says where the logs are. scripts/kube-down.sh stops it.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dir=${FLOWMESH_CLUSTER_DIR:-/var/lib/flowmesh-kube}
mode=networkpolicy
bin_args=()
while (($#)); do
  case $1 in
    --mode) mode=$2; shift 2 ;;
    --bin-dir) bin_args=(--bin-dir "$2"); shift 2 ;;
    *) echo "kube-up.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
case $mode in multitenant | networkpolicy | subnet) ;; *) echo "kube-up.sh: bad --mode $mode" >&2; exit 2 ;; esac

readonly NODES=3
readonly PREFIX=172.31.200
readonly CP_IP=$PREFIX.254
readonly SERVICE_CIDR=172.30.0.0/16
readonly SERVICE_IP=172.30.0.1
readonly CLUSTER_DNS_IP=172.30.0.10
readonly CLUSTER_CIDR=10.128.0.0/14
readonly UL=fmk-ul CP=fmk-cp

log() { echo "kube-up.sh: $(date +%T) $*" >&2; }
started=$SECONDS
fail() {
  log "FAILED: $*"
  log "logs: $dir/logs (one file per daemon; nodeN-kubelet.log, nodeN-containerd.log, apiserver.log, ...)"
  log "pod logs: $dir/nodes/nodeN/log/pods; stop with: bash scripts/kube-down.sh"
  exit 1
}
trap 'fail "line $LINENO: $BASH_COMMAND"' ERR

# One bring-up at a time (tests of several binaries, a person at a shell).
mkdir -p "$dir"
exec 8>"$dir.lock"
flock 8

# --- what it needs ----------------------------------------------------------------------------
bash "$root/scripts/deps.sh" openvswitch-switch iproute2 iptables conntrack etcd-server containernetworking-plugins openssl jq util-linux ethtool

UPSTREAM_BIN=$(bash "$root/scripts/upstream.sh" | tail -n1)
image_list=$(bash "$root/scripts/images.sh" "${bin_args[@]}" | tail -n1)
flowmeshctl=$(awk '$1 ~ /flowmesh:/ {print $2}' "$image_list")
[[ -s $flowmeshctl ]] || fail "no flowmesh image in $image_list"
K=$UPSTREAM_BIN

# Reuse a healthy cluster of the same mode made from the same images, manifests and script
# (a rebuilt flowmesh binary gives a new image: the old cluster is stopped and a new one made).
cluster_key=$(
  { echo "$mode"; cat "$image_list"; cat "$root"/deploy/crds.yaml "$root"/deploy/kubernetes/*.yaml "$root/scripts/kube-up.sh" "$root/scripts/cluster/coredns.yaml"; } |
    sha256sum | cut -c1-16
)
if [[ -f $dir/env && -f $dir/up ]] && [[ $(cat "$dir/key" 2>/dev/null) == "$cluster_key" ]]; then
  # Only the two values needed here (sourcing the file would redefine this script's constants).
  up_bin=$(sed -n 's/^UPSTREAM_BIN=//p' "$dir/env")
  up_kc=$(sed -n 's/^KUBECONFIG=//p' "$dir/env")
  if ip netns exec $CP "$up_bin/kubectl" --kubeconfig "$up_kc" get --raw /readyz >/dev/null 2>&1; then
    log "cluster in $dir is up (mode $mode)"
    echo "$dir"
    exit 0
  fi
fi
if [[ -e $dir/up || -d $dir/nodes ]]; then
  log "a cluster is left in $dir (stopped, or made from other images, manifests or mode): stopping it first"
  bash "$root/scripts/kube-down.sh"
fi

# The logs of the last three clusters stay as logs.1 (newest) .. logs.3: the test suite makes a
# new cluster when a test needs another mode, and a failure in the first one is read afterwards.
rm -rf "$dir/logs.3"
for i in 2 1; do [[ -d $dir/logs.$i ]] && mv "$dir/logs.$i" "$dir/logs.$((i + 1))"; done
[[ -d $dir/logs ]] && mv "$dir/logs" "$dir/logs.1"
mkdir -p "$dir"/{logs,pki,pids,ns,nodes,run}
echo "$mode" >"$dir/mode"
echo "$cluster_key" >"$dir/key"
cat >"$dir/env" <<EOF
UPSTREAM_BIN=$UPSTREAM_BIN
KUBECONFIG=$dir/pki/admin.kubeconfig
CLUSTER_DIR=$dir
CP_NETNS=$CP
UL_NETNS=$UL
NODES=$NODES
NODE_PREFIX=$PREFIX
CP_IP=$CP_IP
IMAGE_LIST=$image_list
EOF
export KUBECONFIG=$dir/pki/admin.kubeconfig

# Host kernel settings kubelet changes (it sets them on start); kube-down puts them back.
sysctl -n vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops \
  kernel.keys.root_maxkeys kernel.keys.root_maxbytes >"$dir/sysctl.before"

# --- the processes: each one's PID in pids/NAME, its output in logs/NAME.log --------------------
# spawn NAME NETNS MOUNTNS_FILE|- CGROUP|- COMMAND...: started in its own session, with no
# descriptor but stdin, stdout and stderr: not this script's lock (a daemon holding it would
# block every later kube-up), nor whatever its caller left open (a caller's own flock, the pipe
# of a test runner's output), which a daemon would otherwise hold for the cluster's lifetime.
spawn() {
  local name=$1 netns=$2 mnt=$3 cg=$4
  shift 4
  local enter=(nsenter "--net=/run/netns/$netns")
  [[ $mnt != - ]] && enter+=("--mount=$mnt")
  setsid "${enter[@]}" -- bash -c '
      for fd in /proc/self/fd/*; do
        fd=${fd##*/}
        ((fd > 2)) && eval "exec $fd>&-" 2>/dev/null
      done
      cg=$1; shift
      if [[ $cg != - ]]; then
        for h in /sys/fs/cgroup/*/; do
          [[ -e $h$cg/cgroup.procs ]] && echo $$ >"$h$cg/cgroup.procs" 2>/dev/null || true
        done
      fi
      exec "$@"' spawn "$cg" "$@" >>"$dir/logs/$name.log" 2>&1 </dev/null 8>&- &
  echo $! >"$dir/pids/$name"
}

# wait_for WHAT SECONDS COMMAND...: retries COMMAND until it succeeds.
wait_for() {
  local what=$1 limit=$2 deadline=$((SECONDS + $2))
  shift 2
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < deadline)) || fail "$what: not within ${limit} s"
    sleep 0.5
  done
}

# --- network namespaces ---------------------------------------------------------------------
log "network namespaces"
for ns in $UL $CP; do ip netns add $ns; done
ip -n $UL link add br-ul type bridge
ip -n $UL link set br-ul up
ip -n $UL link set lo up
ip link add cp-eth0 netns $CP type veth peer name cp netns $UL
ip -n $UL link set cp master br-ul up
ip -n $CP link set cp-eth0 name eth0
ip -n $CP addr add $CP_IP/24 dev eth0
ip -n $CP link set eth0 up
ip -n $CP link set lo up
# The userspace datapath cannot complete partial checksums (docs/cluster.md).
ip netns exec $CP ethtool -K eth0 tx off >/dev/null

# --- certificates ---------------------------------------------------------------------------
log "certificates"
P=$dir/pki
cd "$P"
openssl_quiet() { openssl "$@" 2>/dev/null; }
openssl_quiet req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 7 -subj "/CN=flowmesh-kube-ca"
# cert NAME SUBJECT [SAN]: a client/server certificate signed by the cluster CA.
cert() {
  local name=$1 subj=$2 san=${3-}
  openssl_quiet req -newkey rsa:2048 -nodes -keyout "$name.key" -out "$name.csr" -subj "$subj"
  {
    echo "basicConstraints=CA:FALSE"
    echo "keyUsage=critical,digitalSignature,keyEncipherment"
    echo "extendedKeyUsage=serverAuth,clientAuth"
    [[ -n $san ]] && echo "subjectAltName=$san"
  } >"$name.ext"
  openssl_quiet x509 -req -in "$name.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 7 \
    -extfile "$name.ext" -out "$name.crt"
  rm -f "$name.csr" "$name.ext"
}
cert apiserver "/CN=kube-apiserver" \
  "IP:$CP_IP,IP:127.0.0.1,IP:$SERVICE_IP,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,DNS:localhost"
cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client"
cert admin "/O=system:masters/CN=kubernetes-admin"
cert controller-manager "/CN=system:kube-controller-manager"
cert scheduler "/CN=system:kube-scheduler"
cert kube-proxy "/CN=system:kube-proxy"
for i in $(seq 1 $NODES); do
  cert "node$i" "/O=system:nodes/CN=system:node:node$i"
  cert "node$i-serving" "/O=system:nodes/CN=system:node:node$i" "IP:$PREFIX.$i,DNS:node$i"
done
openssl_quiet genrsa -out sa.key 2048
openssl_quiet rsa -in sa.key -pubout -out sa.pub
# kubeconfig NAME CERT: a kubeconfig for the API server on the underlay with CERT's identity.
kubeconfig() {
  local name=$1 c=$2
  cat >"$name.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
  - name: flowmesh-kube
    cluster: {server: "https://$CP_IP:6443", certificate-authority: "$P/ca.crt"}
users:
  - name: $c
    user: {client-certificate: "$P/$c.crt", client-key: "$P/$c.key"}
contexts:
  - name: default
    context: {cluster: flowmesh-kube, user: $c}
current-context: default
EOF
}
for c in admin controller-manager scheduler kube-proxy; do kubeconfig "$c" "$c"; done
for i in $(seq 1 $NODES); do kubeconfig "node$i" "node$i"; done
cd "$root"

# --- the nodes' syslog socket ------------------------------------------------------------------
# deploy/kubernetes/40-node.yaml mounts the node's /dev/log (a Socket hostPath: the shim's audit
# log destination `syslog`), which every real node has from journald or rsyslog. This machine may
# have none: then a small receiver binds /dev/log for the cluster's lifetime (the nodes share the
# host's /dev) and keeps what it gets in logs/syslog.log; kube-down stops it and removes the socket.
if [[ ! -S /dev/log ]]; then
  [[ -e /dev/log ]] && fail "/dev/log exists and is not a socket"
  log "/dev/log: none on this machine, a receiver for the cluster's lifetime"
  spawn syslog $CP - - python3 -u -c '
import os, socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind("/dev/log")
os.chmod("/dev/log", 0o666)
out = open(sys.argv[1], "ab", buffering=0)
while True:
    out.write(s.recv(65536).rstrip(b"\n") + b"\n")
' "$dir/logs/syslog.log"
  touch "$dir/devlog-ours"
  wait_for "/dev/log" 30 test -S /dev/log
fi

# --- control plane --------------------------------------------------------------------------
log "etcd, kube-apiserver, controller-manager, scheduler"
spawn etcd $CP - - etcd --name cp --data-dir "$dir/etcd" \
  --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
  --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
  --initial-cluster cp=http://127.0.0.1:2380 --auto-compaction-retention=0
wait_for "etcd" 60 ip netns exec $CP etcdctl --endpoints http://127.0.0.1:2379 endpoint health
spawn apiserver $CP - - "$K/kube-apiserver" \
  --etcd-servers=http://127.0.0.1:2379 \
  --bind-address=0.0.0.0 --secure-port=6443 --advertise-address=$CP_IP \
  --service-cluster-ip-range=$SERVICE_CIDR \
  --client-ca-file="$P/ca.crt" --tls-cert-file="$P/apiserver.crt" --tls-private-key-file="$P/apiserver.key" \
  --kubelet-client-certificate="$P/apiserver-kubelet-client.crt" \
  --kubelet-client-key="$P/apiserver-kubelet-client.key" \
  --authorization-mode=Node,RBAC --enable-admission-plugins=NodeRestriction \
  --service-account-issuer=https://kubernetes.default.svc.cluster.local \
  --service-account-key-file="$P/sa.pub" --service-account-signing-key-file="$P/sa.key" \
  --kubelet-preferred-address-types=InternalIP \
  --allow-privileged=true --profiling=false --event-ttl=1h
kubectl_cp() { ip netns exec $CP "$K/kubectl" --kubeconfig "$KUBECONFIG" "$@"; }
wait_for "kube-apiserver /readyz" 180 kubectl_cp get --raw /readyz
spawn controller-manager $CP - - "$K/kube-controller-manager" \
  --kubeconfig="$P/controller-manager.kubeconfig" \
  --authentication-kubeconfig="$P/controller-manager.kubeconfig" \
  --authorization-kubeconfig="$P/controller-manager.kubeconfig" \
  --service-account-private-key-file="$P/sa.key" --root-ca-file="$P/ca.crt" \
  --use-service-account-credentials=true --allocate-node-cidrs=false \
  --service-cluster-ip-range=$SERVICE_CIDR --leader-elect=false --bind-address=127.0.0.1 \
  --profiling=false
spawn scheduler $CP - - "$K/kube-scheduler" \
  --kubeconfig="$P/scheduler.kubeconfig" \
  --authentication-kubeconfig="$P/scheduler.kubeconfig" \
  --authorization-kubeconfig="$P/scheduler.kubeconfig" \
  --leader-elect=false --bind-address=127.0.0.1 --profiling=false

# --- nodes ----------------------------------------------------------------------------------
# The cgroup every node's daemons and pods live under: below this session's own memory cgroup.
base_cg=$(awk -F: '$2 == "memory" {print $3}' /proc/self/cgroup)
base_cg=${base_cg%/}/flowmesh-kube
echo "$base_cg" >"$dir/cgroup"
# Mount namespaces are kept as bind mounts of files on a private mount.
mount --bind "$dir/ns" "$dir/ns"
mount --make-private "$dir/ns"
sandbox_image=$(awk '$1 ~ /pause:/ {print $1}' "$image_list")

start_node() {
  local i=$1 n=node$1 ns=fmk-n$1 nd=$dir/nodes/node$1 ip=$PREFIX.$1
  local mnt=$dir/ns/$n.mnt cg=$base_cg/$n
  mkdir -p "$nd"/{run,kubelet,containerd,cni-bin,cni-conf,cni-state,log,etc-flowmesh/pki,etc-kubernetes,nm,ovs}
  # Network: eth0 to the underlay inside OVS bridge br-phy, whose tap holds the node address.
  ip netns add $ns
  ip link add "$n-eth0" netns $ns type veth peer name "$n" netns $UL
  ip -n $UL link set "$n" master br-ul up
  ip -n $ns link set "$n-eth0" name eth0
  # eth0 is br-phy's port, not an interface of the node's own: without `arp off` the node's
  # kernel answers underlay ARP for the node's address a second time, from eth0's MAC, and a
  # peer's Open vSwitch that kept that answer sent VXLAN to a MAC br-phy does not take in.
  ip -n $ns link set eth0 arp off up
  ip -n $ns link set lo up
  ip netns exec $ns ethtool -K eth0 tx off >/dev/null
  # Cgroups: the node's own root in every hierarchy (cpuset with its parent's cpus and mems).
  local h
  for h in /sys/fs/cgroup/*/; do
    [[ -e ${h}cgroup.procs ]] || continue
    [[ $h == /sys/fs/cgroup/unified/ ]] && continue
    mkdir -p "$h${cg#/}/system"
    if [[ -e ${h}cpuset.cpus ]]; then
      local d=$h p
      for p in $(echo "${cg#/}/system" | tr / ' '); do
        local up=$d
        d=$d$p/
        [[ -s ${d}cpuset.cpus ]] || cat "${up}cpuset.cpus" >"${d}cpuset.cpus"
        [[ -s ${d}cpuset.mems ]] || cat "${up}cpuset.mems" >"${d}cpuset.mems"
      done
    fi
  done
  # Mount namespace: private /run, and the node's own state directories over the host's.
  touch "$mnt"
  unshare --mount="$mnt" --propagation private true
  nsenter --mount="$mnt" -- bash -euc '
    nd=$1
    # The host'"'"'s netns mounts would shadow the node'"'"'s /run/netns in mountinfo (containerd
    # then finds a private mount there and refuses the shim'"'"'s HostToContainer volume).
    umount -R -l /run/netns 2>/dev/null || true
    mount -t tmpfs -o mode=755 tmpfs /run
    mkdir -p /run/netns /run/openvswitch /run/flowmesh /var/lib/kubelet /var/lib/containerd \
      /etc/cni/net.d /opt/cni/bin /var/lib/cni /var/log/pods /var/log/containers /etc/flowmesh \
      /etc/kubernetes /etc/NetworkManager
    mount --bind /run/netns /run/netns && mount --make-shared /run/netns
    for pair in kubelet:/var/lib/kubelet containerd:/var/lib/containerd cni-bin:/opt/cni/bin \
        cni-conf:/etc/cni/net.d cni-state:/var/lib/cni log:/var/log etc-flowmesh:/etc/flowmesh \
        etc-kubernetes:/etc/kubernetes nm:/etc/NetworkManager; do
      mount --bind "$nd/${pair%%:*}" "${pair#*:}"
    done
    mkdir -p /var/log/pods /var/log/containers
    mount --make-rshared /var/lib/kubelet 2>/dev/null || true
  ' node "$nd"
  # The standard CNI plugins (flowmesh-cni joins them from the DaemonSet's init container).
  cp /usr/lib/cni/* "$nd/cni-bin/"
  # This node's flowmesh certificate, placed on the host as kubelet's are (docs/install.md).
  cp "$dir/flowmesh-pki/ca.pem" "$nd/etc-flowmesh/pki/ca.crt"
  cp "$dir/flowmesh-pki/node-$n.pem" "$nd/etc-flowmesh/pki/node.crt"
  cp "$dir/flowmesh-pki/node-$n-key.pem" "$nd/etc-flowmesh/pki/node.key"
  # Open vSwitch, userspace datapath.
  ovsdb-tool create "$nd/ovs/conf.db" /usr/share/openvswitch/vswitch.ovsschema
  spawn "$n-ovsdb" $ns "$mnt" "$cg/system" ovsdb-server "$nd/ovs/conf.db" \
    --remote=punix:/run/openvswitch/db.sock --pidfile=/run/openvswitch/ovsdb-server.pid \
    --unixctl=/run/openvswitch/ovsdb-server.ctl --log-file="$dir/logs/$n-ovsdb-server.vlog" -vconsole:off
  local vsctl=(nsenter --net=/run/netns/$ns --mount="$mnt" -- ovs-vsctl --timeout=10)
  wait_for "$n ovsdb socket" 30 "${vsctl[@]}" --no-wait show
  "${vsctl[@]}" --no-wait init
  spawn "$n-vswitchd" $ns "$mnt" "$cg/system" ovs-vswitchd unix:/run/openvswitch/db.sock \
    --disable-system --pidfile=/run/openvswitch/ovs-vswitchd.pid \
    --unixctl=/run/openvswitch/ovs-vswitchd.ctl --log-file="$dir/logs/$n-ovs-vswitchd.vlog" -vconsole:off
  "${vsctl[@]}" -- add-br br-phy -- set bridge br-phy datapath_type=netdev \
    "other-config:hwaddr=0a:00:00:00:c8:0$i" -- add-port br-phy eth0 \
    -- --may-exist add-br br0 -- set bridge br0 datapath_type=netdev
  ip -n $ns addr add "$ip/24" dev br-phy
  ip -n $ns link set br-phy up
  ip -n $ns route add default via $CP_IP
  # containerd + runc.
  cat >"$nd/containerd.toml" <<EOF
version = 3
root = "/var/lib/containerd"
state = "/run/containerd"
[grpc]
  address = "/run/containerd/containerd.sock"
[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "$sandbox_image"
[plugins.'io.containerd.cri.v1.runtime']
  enable_selinux = false
  # This machine's processes lack CAP_SYS_RESOURCE (not even in the bounding set), so none may
  # lower its oom_score_adj, and every pod sandbox (-998) would fail ("failed to update
  # /proc/self/oom_score_adj: Permission denied"): clamp to [own score, 1000] instead.
  restrict_oom_score_adj = true
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = "$K/runc"
        SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["/opt/cni/bin"]
    conf_dir = "/etc/cni/net.d"
EOF
  spawn "$n-containerd" $ns "$mnt" "$cg/system" env "PATH=$K:$PATH" "$K/containerd" --config "$nd/containerd.toml"
  local ctr=(nsenter --net=/run/netns/$ns --mount="$mnt" -- "$K/ctr" --address /run/containerd/containerd.sock -n k8s.io)
  wait_for "$n containerd" 60 "${ctr[@]}" version
  local ref tarball
  while read -r ref tarball; do
    "${ctr[@]}" images import --no-unpack "$tarball" >/dev/null
    "${ctr[@]}" images label "$ref" io.cri-containerd.pinned=pinned >/dev/null
  done <"$image_list"
  # kubelet.
  cat >"$nd/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $ip
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: "$P/ca.crt"}
authorization: {mode: Webhook}
tlsCertFile: "$P/$n-serving.crt"
tlsPrivateKeyFile: "$P/$n-serving.key"
cgroupDriver: cgroupfs
cgroupRoot: "$cg"
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
clusterDomain: cluster.local
clusterDNS: [$CLUSTER_DNS_IP]
resolvConf: "$dir/resolv.conf"
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
# The disk is shared with other work that may fill it for a while: evict only when nearly
# nothing is left, and end the pressure soon after.
evictionHard: {memory.available: "100Mi", nodefs.available: "200Mi", imagefs.available: "200Mi", nodefs.inodesFree: "1%"}
evictionPressureTransitionPeriod: 30s
serializeImagePulls: false
maxPods: 110
EOF
  spawn "$n-kubelet" $ns "$mnt" "$cg/system" env "PATH=$K:$PATH" "$K/kubelet" \
    --config="$nd/kubelet.yaml" --kubeconfig="$P/$n.kubeconfig" \
    --hostname-override=$n --node-ip="$ip" --v=1
  # kube-proxy.
  cat >"$nd/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: "$P/kube-proxy.kubeconfig"}
hostnameOverride: $n
bindAddress: $ip
clusterCIDR: $CLUSTER_CIDR
mode: iptables
conntrack: {maxPerCore: 0}
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
EOF
  spawn "$n-kube-proxy" $ns "$mnt" "$cg/system" env "PATH=$K:$PATH" "$K/kube-proxy" --config="$nd/kube-proxy.yaml" --v=1
}

# The resolver configuration of the nodes, which pods with dnsPolicy Default (CoreDNS among them)
# get: no server (nothing may leave the machine). ClusterFirst pods get the cluster DNS.
echo "# flowmesh-kube: no upstream resolver" >"$dir/resolv.conf"

# flowmesh's certificates: the controller's for the nodes' addresses (the replicas run with host
# networking on them), one per node (docs/install.md, step 3).
ctl_bin=${bin_args[1]:-${CARGO_TARGET_DIR:-$root/target}/release}/flowmeshctl
sans=()
nodes_args=()
for i in $(seq 1 $NODES); do sans+=(--san "$PREFIX.$i"); nodes_args+=(--node "node$i"); done
"$ctl_bin" certs lab --dir "$dir/flowmesh-pki" "${sans[@]}" "${nodes_args[@]}" --days 7 >/dev/null

for i in $(seq 1 $NODES); do
  log "node$i"
  start_node "$i"
done

log "waiting for the nodes to register"
for i in $(seq 1 $NODES); do
  wait_for "node$i registered" 180 kubectl_cp get node "node$i"
done
# Masters, as deploy/kubernetes/30-controller.yaml selects them (a kubelet may not set
# node-role labels on itself: NodeRestriction).
for i in $(seq 1 $NODES); do
  kubectl_cp label node "node$i" --overwrite node-role.kubernetes.io/master= node-role.kubernetes.io/control-plane= >/dev/null
done

# --- flowmesh from deploy/ ------------------------------------------------------------------
log "kubectl apply -f deploy/"
controllers=$(for i in $(seq 1 $NODES); do printf 'https://%s:9650,' "$PREFIX.$i"; done)
targets=$(for i in $(seq 1 $NODES); do printf 'ssl:%s:6653,' "$PREFIX.$i"; done)
mkdir -p "$dir/deploy"
sed -e "s|^  controllers: .*|  controllers: \"${controllers%,}\"|" \
  -e "s|^  openflow-targets: .*|  openflow-targets: \"${targets%,}\"|" \
  -e "s|^    mode: .*|    mode: $mode|" \
  "$root/deploy/kubernetes/20-config.yaml" >"$dir/deploy/20-config.yaml"
kubectl_cp apply -f "$root/deploy/crds.yaml" >/dev/null
wait_for "CRDs established" 60 kubectl_cp wait --for condition=established --timeout=5s \
  crd/hostsubnets.network.openshift.io crd/netnamespaces.network.openshift.io \
  crd/clusternetworks.network.openshift.io crd/egressnetworkpolicies.network.openshift.io
kubectl_cp apply -f "$root/deploy/kubernetes/00-namespace.yaml" >/dev/null
# flowmesh's own CRDs (PodAttachment) established before the controller starts.
kubectl_cp apply -f "$root/deploy/kubernetes/05-crds.yaml" >/dev/null
wait_for "flowmesh CRDs established" 60 kubectl_cp wait --for condition=established --timeout=5s \
  -f "$root/deploy/kubernetes/05-crds.yaml"
# The controller reaches the API server at its own address, not through kube-proxy's cluster IP
# (docs/install.md step 5; deploy/kubernetes/30-controller.yaml's envFrom).
kubectl_cp -n flowmesh create configmap flowmesh-apiserver \
  --from-literal=KUBERNETES_SERVICE_HOST=$CP_IP --from-literal=KUBERNETES_SERVICE_PORT=6443 >/dev/null
kubectl_cp -n flowmesh create secret generic flowmesh-controller-tls \
  --from-file=controller.crt="$dir/flowmesh-pki/controller.pem" \
  --from-file=controller.key="$dir/flowmesh-pki/controller-key.pem" \
  --from-file=ca.crt="$dir/flowmesh-pki/ca.pem" >/dev/null
for f in "$root"/deploy/kubernetes/*.yaml; do
  case $(basename "$f") in
    20-config.yaml) kubectl_cp apply -f "$dir/deploy/20-config.yaml" >/dev/null ;;
    *) kubectl_cp apply -f "$f" >/dev/null ;;
  esac
done

log "waiting for the controller replicas, the node shims and Ready nodes"
wait_for "controller Deployment available" 300 kubectl_cp -n flowmesh rollout status deployment/flowmesh-controller --timeout=5s
wait_for "node DaemonSet rolled out" 300 kubectl_cp -n flowmesh rollout status daemonset/flowmesh-node --timeout=5s
wait_for "nodes Ready" 300 kubectl_cp wait --for=condition=Ready node --all --timeout=5s

# The control plane reaches pods as on masters that are nodes (OpenShift's are: the API server's
# proxy to pods and services, webhooks): a route in its namespace for each node's pod subnet via
# that node, whose tun0 takes it into br0 (traffic from a node, NETID 0). Each reply leaves the
# pod's own node the way the request came.
hostsubnets() {
  kubectl_cp get hostsubnets -o jsonpath='{range .items[*]}{.subnet} {.hostIP}{"\n"}{end}'
}
all_hostsubnets() { [[ $(hostsubnets | grep -c .) -eq $NODES ]]; }
wait_for "a HostSubnet for every node" 120 all_hostsubnets
while read -r subnet host_ip; do
  ip -n $CP route replace "$subnet" via "$host_ip"
done < <(hostsubnets)

log "cluster DNS (CoreDNS at $CLUSTER_DNS_IP)"
if [[ $mode == multitenant ]]; then
  # `oc adm pod-network make-projects-global kube-system`: the annotation on its NetNamespace,
  # carried out (NETID 0) and removed by the controller.
  wait_for "NetNamespace kube-system" 120 kubectl_cp get netnamespace kube-system
  kubectl_cp annotate --overwrite netnamespace kube-system \
    pod.network.openshift.io/multitenant.change-network=global >/dev/null
  kube_system_global() {
    [[ $(kubectl_cp get netnamespace kube-system -o jsonpath='{.netid}/{.metadata.annotations.pod\.network\.openshift\.io/multitenant\.change-network}') == 0/ ]]
  }
  wait_for "kube-system made global" 120 kube_system_global
fi
coredns_image=$(awk '$1 ~ /coredns:/ {print $1}' "$image_list")
[[ -n $coredns_image ]] || fail "no coredns image in $image_list"
sed -e "s|COREDNS_IMAGE|$coredns_image|" -e "s|CLUSTER_DNS_IP|$CLUSTER_DNS_IP|" \
  "$root/scripts/cluster/coredns.yaml" >"$dir/deploy/coredns.yaml"
kubectl_cp apply -f "$dir/deploy/coredns.yaml" >/dev/null
wait_for "CoreDNS available" 300 kubectl_cp -n kube-system rollout status deployment/coredns --timeout=5s
touch "$dir/up"
log "cluster up in $((SECONDS - started)) s (mode $mode)"
echo "$dir"
