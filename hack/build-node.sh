#!/usr/bin/env bash
# Builds the parts of the test environment's real node: containerd 2 with
# its runc shim and ctr (hack/tools/containerd), runc with seccomp
# (hack/tools/runc: cgo, linked with Debian's libseccomp), the NVIDIA
# Container Toolkit's installer, runtime, hook and CLIs into nvidia/
# (hack/tools/nvidia-toolkit), the NVIDIA device plugin
# (hack/tools/deviceplugin), GPU feature discovery (hack/tools/gfd), Node
# Feature Discovery's master and worker with its CRDs into nfd/
# (hack/tools/nfd), and the NVML stand-in it loads on a machine
# without a GPU (hack/tools/nvml, libnvidia-ml.so.1) with the CUDA
# stand-in beside it (hack/tools/nvml/libcuda, libcuda.so.1) and the
# description of the machine they stand for (nvidia/machine), kubelet and
# kube-proxy (hack/tools/kube, the control plane's own Kubernetes), the CNI
# plugins (hack/tools/cni), a trimmed CoreDNS (hack/tools/coredns), the
# distribution registry (hack/tools/registry) and the pause program; and
# installs what they need from Debian's packages when it is missing
# (hack/node-packages.sh).
#
# The binaries land in $NODE_DIR (default bin/node/<versions>), which is
# git-ignored, with a stamp of the inputs: a second run with the same
# inputs does nothing.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tools="$root/hack/tools"
"$root/hack/node-packages.sh"

# version MODULE GOMOD: the version GOMOD requires of MODULE.
version() { awk -v m="$1" '$1==m{print $2; exit} $1=="require" && $2==m{print $3; exit}' "$2"; }
kube_version="$(version k8s.io/kubernetes "$tools/kube/go.mod")"
cni_version="$(version github.com/containernetworking/plugins "$tools/cni/go.mod")"
coredns_version="$(version github.com/coredns/coredns "$tools/coredns/go.mod")"
registry_version="$(version github.com/distribution/distribution/v3 "$tools/registry/go.mod")"
containerd_version="$(version github.com/containerd/containerd/v2 "$tools/containerd/go.mod")"
runc_version="$(version github.com/opencontainers/runc "$tools/runc/go.mod")"
toolkit_version="$(version github.com/NVIDIA/nvidia-container-toolkit "$tools/nvidia-toolkit/go.mod")"
plugin_version="$(version github.com/NVIDIA/k8s-device-plugin "$tools/deviceplugin/go.mod")"
nfd_version="$(version sigs.k8s.io/node-feature-discovery "$tools/nfd/go.mod")"
versions="kube-${kube_version}_containerd-${containerd_version}_runc-${runc_version}_nvidia-toolkit-${toolkit_version}_device-plugin-${plugin_version}_nfd-${nfd_version}_cni-${cni_version}_coredns-${coredns_version}_registry-${registry_version}"
out="${NODE_DIR:-$root/bin/node/$versions}"
stamp="$out/.stamp"
want="$(cat "$0" "$tools"/{kube,containerd,runc,nvidia-toolkit,deviceplugin,gfd,nfd,nvml,cni,coredns,registry}/go.{mod,sum} "$tools"/nvml/*.{go,c} "$tools"/nvml/libcuda/*.c "$tools"/nvml/machine/*.go "$tools"/coredns/main.go "$root"/hack/pause/main.go | sha256sum | cut -d' ' -f1)"
toolkit_bins=(nvidia-toolkit nvidia-container-runtime nvidia-container-runtime.cdi nvidia-container-runtime.legacy nvidia-container-runtime-hook nvidia-ctk nvidia-cdi-hook)
bins=(containerd containerd-shim-runc-v2 ctr runc "${toolkit_bins[@]/#/nvidia/}" nvidia/nvidia-device-plugin nvidia/gpu-feature-discovery nfd/nfd-master nfd/nfd-worker nvidia/libnvidia-ml.so.1 nvidia/libcuda.so.1 kubelet kube-proxy coredns registry pause cni/bridge cni/host-local cni/loopback cni/portmap)

up_to_date() {
  [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]] || return 1
  # A shared library is a file, not a program.
  for b in "${bins[@]}"; do [[ -x "$out/$b" || ($b == *.so.* && -f "$out/$b") ]] || return 1; done
  [[ -s "$out/nvidia/machine" ]]
}
if up_to_date; then
  [[ -n "${NODE_DIR:-}" ]] || ln -sfn "$versions" "$root/bin/node/current"
  echo "node parts up to date in ${out#$root/}"
  exit 0
fi

mkdir -p "$out/cni"
export CGO_ENABLED=0 GOFLAGS="${GOFLAGS:-} -trimpath"
log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*"; }
start=$SECONDS

minor="${kube_version#v1.}"; minor="${minor%%.*}"
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$kube_version -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean"
for b in kubelet kube-proxy; do
  log "building $b $kube_version"
  (cd "$tools/kube" && go build -ldflags "$ldflags" -o "$out/$b" "k8s.io/kubernetes/cmd/$b")
done
log "building containerd $containerd_version"
for b in containerd containerd-shim-runc-v2 ctr; do
  (cd "$tools/containerd" && go build -tags "no_btrfs no_devmapper no_zfs" \
    -ldflags "-s -w -X github.com/containerd/containerd/v2/version.Version=$containerd_version" \
    -o "$out/$b" "github.com/containerd/containerd/v2/cmd/$b")
done
log "building runc $runc_version"
(cd "$tools/runc" && CGO_ENABLED=1 go build -tags seccomp -ldflags "-s -w -X main.version=${runc_version#v}" \
  -o "$out/runc" github.com/opencontainers/runc)
log "building the NVIDIA Container Toolkit $toolkit_version"
mkdir -p "$out/nvidia"
for b in "${toolkit_bins[@]}"; do
  pkg="cmd/$b"
  [[ $b == nvidia-toolkit ]] && pkg="tools/container/nvidia-toolkit"
  (cd "$tools/nvidia-toolkit" && CGO_ENABLED=1 go build -ldflags "-s -w" -o "$out/nvidia/$b" "github.com/NVIDIA/nvidia-container-toolkit/$pkg")
done
log "building the NVIDIA device plugin $plugin_version"
(cd "$tools/deviceplugin" && CGO_ENABLED=1 go build -ldflags "-s -w -X github.com/NVIDIA/k8s-device-plugin/internal/info.version=$plugin_version" \
  -o "$out/nvidia/nvidia-device-plugin" github.com/NVIDIA/k8s-device-plugin/cmd/nvidia-device-plugin)
log "building GPU feature discovery $plugin_version"
(cd "$tools/gfd" && CGO_ENABLED=1 go build -ldflags "-s -w -X github.com/NVIDIA/k8s-device-plugin/internal/info.version=$plugin_version" \
  -o "$out/nvidia/gpu-feature-discovery" github.com/NVIDIA/k8s-device-plugin/cmd/gpu-feature-discovery)
log "building Node Feature Discovery $nfd_version"
mkdir -p "$out/nfd"
(cd "$tools/nfd" && go build -ldflags "-s -w -X sigs.k8s.io/node-feature-discovery/pkg/version.version=$nfd_version" -o "$out/nfd/" \
  sigs.k8s.io/node-feature-discovery/cmd/nfd-master sigs.k8s.io/node-feature-discovery/cmd/nfd-worker)
cp "$(go -C "$tools/nfd" list -m -f '{{.Dir}}' sigs.k8s.io/node-feature-discovery)/deployment/base/nfd-crds/nfd-api-crds.yaml" "$out/nfd/"
log "building the NVML stand-in"
nvml_headers="$(go -C "$tools/nvml" mod download -json github.com/NVIDIA/go-nvml | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')/pkg/nvml"
(cd "$tools/nvml" && CGO_ENABLED=1 CGO_CFLAGS="-I$nvml_headers" go build -buildmode=c-shared -ldflags "-s -w" -o "$out/nvidia/libnvidia-ml.so.1" . &&
  rm -f "$out/nvidia/libnvidia-ml.so.h")
# The mock machine's description (hack/tools/nvml/machine): the CUDA
# stand-in reports its CUDA driver version.
(cd "$tools/nvml" && CGO_ENABLED=1 go run ./machine) > "$out/nvidia/machine"
read -r _ cuda_version < "$out/nvidia/machine"
gcc -shared -fPIC -O2 -s -Wl,-soname,libcuda.so.1 -DCUDA_DRIVER_VERSION="$cuda_version" \
  -o "$out/nvidia/libcuda.so.1" "$tools/nvml/libcuda/cuda.c"
log "building CNI plugins $cni_version"
for p in ipam/host-local main/bridge main/loopback meta/portmap; do
  (cd "$tools/cni" && go build -ldflags "-s -w" -o "$out/cni/${p#*/}" "github.com/containernetworking/plugins/plugins/$p")
done
log "building CoreDNS $coredns_version"
(cd "$tools/coredns" && go build -ldflags "-s -w" -o "$out/coredns" .)
log "building the distribution registry $registry_version"
(cd "$tools/registry" && go build -ldflags "-s -w" -o "$out/registry" github.com/distribution/distribution/v3/cmd/registry)
log "building pause"
(cd "$root" && go build -ldflags "-s -w" -o "$out/pause" ./hack/pause)

echo "$want" > "$stamp"
[[ -n "${NODE_DIR:-}" ]] || ln -sfn "$versions" "$root/bin/node/current"
log "node parts built in $((SECONDS - start))s into ${out#$root/}"
