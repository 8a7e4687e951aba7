#!/usr/bin/env bash
# Builds the upstream components the real-cluster tests run, from source and unmodified:
# Kubernetes (kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kube-proxy,
# kubectl, e2e.test and the ginkgo CLI that runs it in parallel, agnhost, pause), containerd + containerd-shim-runc-v2 + ctr (imports the
# locally built images, scripts/images.sh), runc and CoreDNS,
# at the versions pinned by the Go modules under upstream/ (see docs/upstream.md).
#
# The binaries land in ${FLOWMESH_UPSTREAM_CACHE:-/var/cache/flowmesh-upstream}/<key>/bin,
# outside the checkout; <key> hashes the module files, the Go version and RECIPE below, so a
# run with everything present does nothing. The Go module and build caches live under the
# cache directory too. The last line printed is the bin directory.
#
#   scripts/upstream.sh            build what is missing, print the bin directory
#   scripts/upstream.sh --key      print the bin directory it would use, build nothing
set -euo pipefail

# Bump when a build command below changes, so that the cache key changes with it.
readonly RECIPE=2

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
modules=$root/upstream
cache=${FLOWMESH_UPSTREAM_CACHE:-/var/cache/flowmesh-upstream}
export PATH=/usr/local/go/bin:$PATH
command -v go >/dev/null || { echo "upstream.sh: no go (expected /usr/local/go/bin/go)" >&2; exit 1; }

go_version=$(go env GOVERSION)
key=$(
  cd "$modules"
  { echo "recipe $RECIPE"; echo "$go_version"; sha256sum -- */go.mod */go.sum */tools.go; } |
    sha256sum | cut -c1-16
)
out=$cache/$key
bin=$out/bin

if [[ ${1-} == --key ]]; then echo "$bin"; exit 0; fi
if [[ -f $out/complete ]]; then echo "$bin"; exit 0; fi

log() { echo "upstream.sh: $*" >&2; }

# One build per key at a time (a test and CI may both ask); a waiter finds the work done.
mkdir -p "$cache"
exec 9>"$cache/$key.lock"
if ! flock -n 9; then
  log "waiting for another run building $key"
  flock 9
fi
if [[ -f $out/complete ]]; then echo "$bin"; exit 0; fi

# Debian packages the cgo builds need (runc's seccomp, the static pause), installed if missing.
bash "$root/scripts/deps.sh" gcc libc6-dev linux-libc-dev pkg-config libseccomp-dev binutils

export GOMODCACHE=$cache/gomod GOCACHE=$cache/gocache GOPATH=$cache/gopath
export GOTOOLCHAIN=local GOFLAGS="-mod=readonly -modcacherw -buildvcs=false"
mkdir -p "$bin" "$GOMODCACHE" "$GOCACHE"
times=$out/build-times.log
echo "# $(date -u +%FT%TZ) $go_version nproc=$(nproc) load: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$times"

# Runs "$@" niced (the cores are shared with other builds) and logs its wall time.
timed() {
  local what=$1 start end
  shift
  start=$(date +%s.%N)
  nice -n 19 "$@"
  end=$(date +%s.%N)
  awk -v w="$what" -v s="$start" -v e="$end" 'BEGIN { printf "%-28s %7.1f s\n", w, e - s }' |
    tee -a "$times" >&2
}

# Builds one binary unless present: build NAME MODULE_DIR PACKAGE go-build-or-test-args...
# (the output goes to a temporary name first, so an interrupted build is not taken as done).
build() {
  local name=$1 dir=$2 pkg=$3
  shift 3
  [[ -x $bin/$name ]] && return 0
  log "building $name"
  (cd "$modules/$dir" && timed "$name" go "$@" -o "$bin/$name.tmp" "$pkg")
  mv "$bin/$name.tmp" "$bin/$name"
}

# Module directory of a pinned module, downloaded if needed: moddir MODULE_DIR MODULE_PATH
moddir() { (cd "$modules/$1" && go list -m -f '{{.Dir}}' "$2"); }

for dir in kubernetes containerd runc coredns; do
  (cd "$modules/$dir" && timed "download:$dir" go mod download)
done

# Kubernetes: flags as its hack/lib/golang.sh and hack/lib/version.sh give them (static
# binaries without cgo, kubelet and e2e.test with it; -trimpath -s -w; version ldflags).
k8s_version=$(cd "$modules/kubernetes" && go list -m -f '{{.Version}}' k8s.io/kubernetes)
k8s_dir=$(moddir kubernetes k8s.io/kubernetes)
k8s_date=$(cd "$modules/kubernetes" && go list -m -f '{{.Time.UTC.Format "2006-01-02T15:04:05Z"}}' k8s.io/kubernetes)
minor=${k8s_version#v1.}
minor=${minor%%.*}
kv=""
for pkg in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
  kv+=" -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
  kv+=" -X $pkg.buildDate=$k8s_date"
done
for cmd in kube-apiserver kube-controller-manager kube-scheduler kube-proxy kubectl; do
  CGO_ENABLED=0 build "$cmd" kubernetes "k8s.io/kubernetes/cmd/$cmd" build -trimpath -ldflags "-s -w$kv"
done
CGO_ENABLED=1 build kubelet kubernetes k8s.io/kubernetes/cmd/kubelet build -trimpath -ldflags "-s -w$kv"
CGO_ENABLED=1 build e2e.test kubernetes k8s.io/kubernetes/test/e2e test -c -trimpath -ldflags "-s -w$kv"
# The ginkgo CLI at the version e2e.test links (hack/ginkgo-e2e.sh runs e2e.test through it for
# parallel specs): built from the same module graph.
CGO_ENABLED=0 build ginkgo kubernetes github.com/onsi/ginkgo/v2/ginkgo build -trimpath -ldflags "-s -w"
# agnhost as test/images/image-util.sh builds it.
agnhost_version=$(cat "$k8s_dir/test/images/agnhost/VERSION")
CGO_ENABLED=0 build agnhost kubernetes k8s.io/kubernetes/test/images/agnhost \
  build -trimpath -ldflags "-s -w -X main.Version=$agnhost_version"
echo "$agnhost_version" >"$out/agnhost.version"
# pause is C: build/pause/Makefile's CFLAGS, version TAG-REV as its Makefile makes it.
if [[ ! -x $bin/pause ]]; then
  pause_tag=$(sed -n 's/^TAG ?= *//p' "$k8s_dir/build/pause/Makefile")
  log "building pause"
  timed pause cc -Os -Wall -Werror -static "-DVERSION=v$pause_tag-$k8s_version" \
    -o "$bin/pause.tmp" "$k8s_dir/build/pause/linux/pause.c"
  strip "$bin/pause.tmp"
  mv "$bin/pause.tmp" "$bin/pause"
  echo "$pause_tag" >"$out/pause.version"
fi

# containerd: its Makefile's tags and version ldflags; the shim static, without cgo or grpc.
ctr_version=$(cd "$modules/containerd" && go list -m -f '{{.Version}}' github.com/containerd/containerd/v2)
ctr_ld="-s -w -X github.com/containerd/containerd/v2/version.Version=$ctr_version"
ctr_ld+=" -X github.com/containerd/containerd/v2/version.Package=github.com/containerd/containerd/v2"
CGO_ENABLED=1 build containerd containerd github.com/containerd/containerd/v2/cmd/containerd \
  build -trimpath -tags urfave_cli_no_docs -ldflags "$ctr_ld"
CGO_ENABLED=0 build ctr containerd github.com/containerd/containerd/v2/cmd/ctr \
  build -trimpath -tags urfave_cli_no_docs -ldflags "$ctr_ld"
CGO_ENABLED=0 build containerd-shim-runc-v2 containerd github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2 \
  build -trimpath -tags "urfave_cli_no_docs no_grpc" -ldflags "$ctr_ld -extldflags -static"

# runc: its Makefile's default target (cgo, seccomp; version from its embedded VERSION file).
runc_version=$(cd "$modules/runc" && go list -m -f '{{.Version}}' github.com/opencontainers/runc)
CGO_ENABLED=1 build runc runc github.com/opencontainers/runc \
  build -trimpath -tags "seccomp urfave_cli_no_docs" -ldflags "-s -w -X main.gitCommit=$runc_version"

# CoreDNS: its Makefile's flags (no cgo).
coredns_version=$(cd "$modules/coredns" && go list -m -f '{{.Version}}' github.com/coredns/coredns)
CGO_ENABLED=0 build coredns coredns github.com/coredns/coredns \
  build -trimpath -ldflags "-s -w -X github.com/coredns/coredns/coremain.GitCommit=$coredns_version"

cat >"$out/versions" <<EOF
kubernetes $k8s_version
agnhost $agnhost_version
pause $(cat "$out/pause.version")
containerd $ctr_version
runc $runc_version
coredns $coredns_version
go $go_version
EOF
touch "$out/complete"
log "done: $(du -sh "$bin" | cut -f1) in $bin"
echo "$bin"
