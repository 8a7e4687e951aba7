#!/usr/bin/env bash
# kubectl as the admin of the cluster scripts/kube-up.sh started (in its control-plane network
# namespace, where the API server's address is): scripts/kubectl.sh get pods -A
set -euo pipefail
dir=${FLOWMESH_CLUSTER_DIR:-/var/lib/flowmesh-kube}
[[ -f $dir/env ]] || { echo "kubectl.sh: no cluster in $dir (scripts/kube-up.sh)" >&2; exit 1; }
set -a
# shellcheck disable=SC1091
source "$dir/env"
set +a
exec ip netns exec "$CP_NETNS" "$UPSTREAM_BIN/kubectl" --kubeconfig "$KUBECONFIG" "$@"
