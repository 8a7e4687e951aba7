#!/usr/bin/env bash
# Builds the container images the real cluster runs, without a registry or a container engine:
# root filesystems from Debian's packages (mmdebstrap, the host's apt sources), the upstream
# binaries of scripts/upstream.sh and flowmesh's release binaries, each written as a
# docker-archive tarball that `ctr -n k8s.io images import` reads (scripts/kube-up.sh).
#
#   localhost/flowmesh:0.1.0                 deploy/Containerfile's image: the packages and
#                                            binaries of FLOWMESH_PACKAGES / FLOWMESH_BINARIES
#                                            below (a test compares them with the Containerfile)
#   registry.k8s.io/pause:3.10.1             build/pause/Dockerfile: /pause, user 65535
#   registry.k8s.io/e2e-test-images/agnhost:2.56
#                                            test/images/agnhost/Dockerfile: its helper tools
#                                            from Debian's packages, /coredns, /uploads, porter's
#                                            certificate, /agnhost and /agnhost-2
#   registry.k8s.io/e2e-test-images/jessie-dnsutils:1.7
#                                            test/images/jessie-dnsutils/Dockerfile: Debian with
#                                            dnsutils (dig, nslookup) and /coredns (the DNS specs'
#                                            second querier)
#   registry.k8s.io/coredns/coredns:VERSION  the cluster DNS kube-up.sh runs: CoreDNS's
#                                            Dockerfile (the static binary, /coredns, user
#                                            nonroot 65532), VERSION the one upstream.sh built
#
# The names and tags are the ones `e2e.test --list-images` prints (docs/cluster.md).
# Tarballs are cached in ${FLOWMESH_IMAGE_CACHE:-/var/cache/flowmesh-images}, outside the
# checkout, keyed by their content (root filesystems by RECIPE, package list and apt
# sources; images by the root filesystem's key and the files and config added), so a second
# run with nothing changed builds nothing. The last line printed is a file listing
# "REFERENCE TARBALL", one image a line.
#
#   scripts/images.sh [--bin-dir DIR]   DIR holds flowmesh's release binaries
#                                       (default: $CARGO_TARGET_DIR/release or target/release)
set -euo pipefail
# A failure inside $(...) (a root filesystem's build) stops the script too.
shopt -s inherit_errexit

# Bump when a build step below changes, so that every key changes with it.
readonly RECIPE=1
readonly SUITE=bookworm
# The flowmesh image: what deploy/Containerfile installs and copies (tests/tests/images.rs).
readonly FLOWMESH_PACKAGES="openvswitch-common openvswitch-switch iproute2 nftables arping ethtool ca-certificates"
readonly FLOWMESH_BINARIES="flowmesh-controller flowmeshctl flowmesh-shim flowmesh-cni"
readonly FLOWMESH_REF=localhost/flowmesh:0.1.0
# agnhost's Dockerfile adds, from Alpine: bind-tools curl netcat-openbsd iproute2 iperf bash.
readonly AGNHOST_PACKAGES="bind9-dnsutils curl netcat-openbsd iproute2 iperf bash"
# jessie-dnsutils's Dockerfile installs dnsutils (bind9-dnsutils in bookworm) on Debian.
readonly DNSUTILS_PACKAGES="bind9-dnsutils"

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cache=${FLOWMESH_IMAGE_CACHE:-/var/cache/flowmesh-images}
bin_dir=${CARGO_TARGET_DIR:-$root/target}/release
while (($#)); do
  case $1 in
    --bin-dir) bin_dir=$2; shift 2 ;;
    *) echo "images.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done

log() { echo "images.sh: $*" >&2; }
hash_of() { sha256sum | cut -c1-16; }


upstream_bin=$(bash "$root/scripts/upstream.sh" | tail -n1)
upstream_dir=$(dirname "$upstream_bin")
agnhost_version=$(cat "$upstream_dir/agnhost.version")
pause_version=$(cat "$upstream_dir/pause.version")
readonly PAUSE_REF=registry.k8s.io/pause:$pause_version
readonly AGNHOST_REF=registry.k8s.io/e2e-test-images/agnhost:$agnhost_version
coredns_version=$(awk '$1 == "coredns" {print $2}' "$upstream_dir/versions")
[[ -n $coredns_version ]] || { log "no coredns version in $upstream_dir/versions"; exit 1; }
readonly COREDNS_REF=registry.k8s.io/coredns/coredns:$coredns_version
k8s_dir=$(ls -d "$upstream_dir/../gomod/k8s.io/kubernetes@"*/ 2>/dev/null | head -n1)
[[ -d $k8s_dir/test/images/agnhost/porter ]] || { log "no kubernetes module under $upstream_dir/../gomod"; exit 1; }
readonly DNSUTILS_REF=registry.k8s.io/e2e-test-images/jessie-dnsutils:$(cat "$k8s_dir/test/images/jessie-dnsutils/VERSION")

bash "$root/scripts/deps.sh" mmdebstrap jq

mkdir -p "$cache/rootfs" "$cache/images" "$cache/lists"
exec 9>"$cache/lock"
flock 9
scratch=$(mktemp -d "$cache/tmp.XXXXXX")
trap 'rm -rf "$scratch"' EXIT

# The host's apt sources (the mirrors this machine may use), handed to mmdebstrap as files.
sources=()
for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
  [[ -s $f ]] && grep -qv '^\s*\(#.*\)\?$' "$f" && sources+=("$f")
done
((${#sources[@]})) || { log "no apt sources in /etc/apt"; exit 1; }
sources_hash=$(cat "${sources[@]}" | hash_of)

# rootfs NAME "PACKAGES": a minbase Debian root filesystem tarball with PACKAGES, cached.
rootfs() {
  local name=$1 packages=$2 key out
  key=$(printf 'recipe %s\nsuite %s\npackages %s\nsources %s\n' "$RECIPE" "$SUITE" "$packages" "$sources_hash" | hash_of)
  out=$cache/rootfs/$name-$key.tar
  if [[ ! -s $out ]]; then
    log "building the $name root filesystem ($packages)"
    local start=$SECONDS attempt
    # No documentation, no apt lists: what the Containerfile's rm -rf /var/lib/apt/lists does.
    # A download the mirror did not answer fails the attempt; three attempts a minute and two
    # apart, then the script stops (never an empty or partial tarball in the cache).
    for attempt in 1 2 3; do
      rm -f "$out.tmp"
      if nice -n 10 mmdebstrap --quiet --format=tar --variant=minbase --include="${packages// /,}" \
        --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
        --dpkgopt='path-exclude=/usr/share/locale/*' \
        --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin' \
        "$SUITE" "$out.tmp" "${sources[@]}" >&2 && [[ -s $out.tmp ]]; then
        break
      fi
      log "the $name root filesystem: mmdebstrap failed (attempt $attempt of 3)"
      ((attempt < 3)) || { rm -f "$out.tmp"; exit 1; }
      # A mirror that did not answer for a while (seen here for ~5 minutes): back off.
      sleep $((60 * attempt))
    done
    mv "$out.tmp" "$out"
    log "$name root filesystem: $((SECONDS - start)) s, $(du -h "$out" | cut -f1)"
  fi
  echo "$out"
}

# layer_of DIR OUT: a reproducible tar of DIR's contents (sorted, owner root, fixed mtime).
layer_of() {
  tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner --format=gnu \
    -C "$1" -cf "$2" .
}

# image REF CONFIG_JSON LAYER...: the docker-archive tarball of REF, cached by content; echoes
# its path. CONFIG_JSON is the image config's "config" object (Entrypoint, Cmd, User...).
image() {
  local ref=$1 config=$2
  shift 2
  local dir=$scratch/image diff_ids=() layers_json=() key out l sum
  rm -rf "$dir" && mkdir -p "$dir"
  for l in "$@"; do
    sum=$(sha256sum "$l" | cut -d' ' -f1)
    diff_ids+=("sha256:$sum")
  done
  key=$(printf '%s\n' "recipe $RECIPE" "$ref" "$config" "${diff_ids[@]}" | hash_of)
  out=$cache/images/$(echo "$ref" | tr '/:' '__')-$key.tar
  if [[ ! -s $out ]]; then
    log "writing $ref"
    for l in "$@"; do
      sum=$(sha256sum "$l" | cut -d' ' -f1)
      mkdir -p "$dir/$sum"
      ln "$l" "$dir/$sum/layer.tar" 2>/dev/null || cp "$l" "$dir/$sum/layer.tar"
      layers_json+=("$sum/layer.tar")
    done
    jq -n --argjson config "$config" --args '{
        architecture: "amd64", os: "linux", created: "1970-01-01T00:00:00Z",
        config: $config,
        rootfs: {type: "layers", diff_ids: $ARGS.positional},
        history: [$ARGS.positional[] | {created: "1970-01-01T00:00:00Z", created_by: "scripts/images.sh"}]
      }' "${diff_ids[@]}" >"$dir/config.json"
    local config_sum
    config_sum=$(sha256sum "$dir/config.json" | cut -d' ' -f1)
    mv "$dir/config.json" "$dir/$config_sum.json"
    jq -n --arg c "$config_sum.json" --arg ref "$ref" --args \
      '[{Config: $c, RepoTags: [$ref], Layers: $ARGS.positional}]' "${layers_json[@]}" >"$dir/manifest.json"
    # Member names without "./": readers look up "manifest.json" by that name.
    (cd "$dir" && find . -mindepth 1 | sed 's|^\./||' | LC_ALL=C sort |
      tar --no-recursion --mtime=@0 --owner=0 --group=0 --numeric-owner -cf "$out.tmp" -T -)
    mv "$out.tmp" "$out"
    # Older tarballs of the same reference are of no more use.
    find "$cache/images" -maxdepth 1 -name "$(echo "$ref" | tr '/:' '__')-*.tar" ! -path "$out" -delete
  fi
  echo "$out"
}

# pause: the static binary alone, as build/pause/Dockerfile (FROM scratch).
mkdir -p "$scratch/pause"
install -m 0755 "$upstream_bin/pause" "$scratch/pause/pause"
layer_of "$scratch/pause" "$scratch/pause.tar"
pause_tar=$(image "$PAUSE_REF" '{"User":"65535:65535","Entrypoint":["/pause"]}' "$scratch/pause.tar")

# agnhost: test/images/agnhost/Dockerfile on a Debian root filesystem.
agnhost_base=$(rootfs agnhost "$AGNHOST_PACKAGES")
a=$scratch/agnhost
mkdir -p "$a/uploads" "$a/usr/local/bin"
install -m 0755 "$upstream_bin/agnhost" "$a/agnhost"
ln -s agnhost "$a/agnhost-2"
ln -s /usr/bin/iperf "$a/usr/local/bin/iperf"
# The Dockerfile unpacks a CoreDNS release at /coredns; ours is the one upstream.sh built.
install -m 0755 "$upstream_bin/coredns" "$a/coredns"
install -m 0644 "$k8s_dir/test/images/agnhost/porter/localhost.crt" "$a/localhost.crt"
install -m 0644 "$k8s_dir/test/images/agnhost/porter/localhost.key" "$a/localhost.key"
layer_of "$a" "$scratch/agnhost.tar"
agnhost_tar=$(image "$AGNHOST_REF" '{
    "Entrypoint": ["/agnhost"], "Cmd": ["pause"],
    "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
    "ExposedPorts": {"80/tcp": {}, "8080/tcp": {}, "8081/tcp": {}, "9376/tcp": {}},
    "WorkingDir": "/"
  }' "$agnhost_base" "$scratch/agnhost.tar")

# jessie-dnsutils: test/images/jessie-dnsutils/Dockerfile (Debian, dnsutils, a CoreDNS at /coredns).
dnsutils_base=$(rootfs dnsutils "$DNSUTILS_PACKAGES")
mkdir -p "$scratch/dnsutils"
install -m 0755 "$upstream_bin/coredns" "$scratch/dnsutils/coredns"
layer_of "$scratch/dnsutils" "$scratch/dnsutils.tar"
dnsutils_tar=$(image "$DNSUTILS_REF" '{
    "Cmd": ["/bin/sh"],
    "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
    "WorkingDir": "/"
  }' "$dnsutils_base" "$scratch/dnsutils.tar")

# coredns: the static binary alone (CoreDNS's Dockerfile: /coredns on a distroless base, user
# nonroot, port 53; kube-up.sh's Deployment runs it as root with NET_BIND_SERVICE alone, since this
# layer carries no file capability).
mkdir -p "$scratch/coredns/etc"
install -m 0755 "$upstream_bin/coredns" "$scratch/coredns/coredns"
printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"$scratch/coredns/etc/passwd"
printf 'root:x:0:\nnonroot:x:65532:\n' >"$scratch/coredns/etc/group"
layer_of "$scratch/coredns" "$scratch/coredns.tar"
coredns_tar=$(image "$COREDNS_REF" '{
    "User": "65532:65532", "Entrypoint": ["/coredns"],
    "ExposedPorts": {"53/tcp": {}, "53/udp": {}}
  }' "$scratch/coredns.tar")

# flowmesh: deploy/Containerfile's runtime stage.
flowmesh_base=$(rootfs flowmesh "$FLOWMESH_PACKAGES")
for b in $FLOWMESH_BINARIES; do
  [[ -x $bin_dir/$b ]] || {
    log "no $bin_dir/$b: build it first (cargo build --release -p controller -p flowmeshctl -p agent-shim)"
    exit 1
  }
done
f=$scratch/flowmesh
mkdir -p "$f/usr/local/bin" "$f/usr/local/share/flowmesh"
for b in $FLOWMESH_BINARIES; do
  install -m 0755 "$bin_dir/$b" "$f/usr/local/bin/$b"
done
install -m 0644 "$root/deploy/cni/80-flowmesh.conflist" "$f/usr/local/share/flowmesh/80-flowmesh.conflist"
layer_of "$f" "$scratch/flowmesh.tar"
flowmesh_tar=$(image "$FLOWMESH_REF" '{
    "User": "0",
    "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
    "WorkingDir": "/"
  }' "$flowmesh_base" "$scratch/flowmesh.tar")

list_body=$(printf '%s %s\n' "$PAUSE_REF" "$pause_tar" "$AGNHOST_REF" "$agnhost_tar" \
  "$DNSUTILS_REF" "$dnsutils_tar" "$COREDNS_REF" "$coredns_tar" "$FLOWMESH_REF" "$flowmesh_tar")
list=$cache/lists/$(echo "$list_body" | hash_of).list
echo "$list_body" >"$list"
echo "$list"
