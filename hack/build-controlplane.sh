#!/usr/bin/env bash
# Builds the local control plane the tests, `make demo` and `make bench` run on:
# kube-apiserver, kube-controller-manager, kube-scheduler, etcd and kwok, from
# source through the Go module proxy (no prebuilt downloads are possible here),
# and Kueue, the queue controller, with its CRDs and webhook configuration.
#
# The binaries land in $CONTROLPLANE_DIR (default bin/controlplane/<versions>)
# and $KUEUE_DIR (default bin/kueue/<version>), which are git-ignored. A stamp
# records the versions and the tool modules' checksums: a second run with the
# same inputs does nothing.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tools="$root/hack/tools"
# Versions are read from the tool modules so there is one place to change them.
kube_version="$(awk '$1=="k8s.io/kubernetes"{print $2; exit}' "$tools/kube/go.mod")"
etcd_version="$(awk '$1=="go.etcd.io/etcd/server/v3"{print $2; exit}' "$tools/etcd/go.mod")"
kwok_version="$(awk '$1=="sigs.k8s.io/kwok"{print $2; exit}' "$tools/kwok/go.mod")"
versions="kube-${kube_version}_etcd-${etcd_version}_kwok-${kwok_version}"
out="${CONTROLPLANE_DIR:-$root/bin/controlplane/$versions}"
stamp="$out/.stamp"
want="$(cat "$0" "$tools"/{kube,etcd,kwok}/go.{mod,sum} | sha256sum | cut -d' ' -f1)"

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*"; }

# Kueue has its own folder and stamp: a new Kueue leaves the cluster's
# binaries alone.
build_kueue() {
  local version dir kstamp kwant mod f
  version="$(cd "$tools/kueue" && go list -m -f '{{.Version}}' sigs.k8s.io/kueue)"
  dir="${KUEUE_DIR:-$root/bin/kueue/$version}"
  kstamp="$dir/.stamp"
  kwant="$(cat "$0" "$tools"/kueue/go.{mod,sum} | sha256sum | cut -d' ' -f1)"
  if [[ -f "$kstamp" && "$(cat "$kstamp")" == "$kwant" && -x "$dir/kueue" ]]; then
    echo "kueue up to date in ${dir#$root/}"
  else
    log "building kueue $version"
    mkdir -p "$dir"
    # Kueue's visibility server reads its certificate from /visibility, a
    # folder no setting moves; linked here to read it from ./visibility, so
    # the test environment gives it one without writing outside its own.
    (cd "$tools/kueue" && CGO_ENABLED=0 go build -trimpath \
      -ldflags '-s -w -X sigs.k8s.io/kueue/pkg/visibility.certDir=visibility' \
      -o "$dir/kueue" sigs.k8s.io/kueue/cmd/kueue)
    # The module's own CRDs and webhook configuration; the test environment
    # points their webhooks at the local process.
    mod="$(cd "$tools/kueue" && go list -m -f '{{.Dir}}' sigs.k8s.io/kueue)"
    rm -rf "$dir/crds" && mkdir -p "$dir/crds"
    for f in "$mod"/config/components/crd/bases/*.yaml; do cp "$f" "$dir/crds/"; done
    # The CRDs whose versions Kueue converts: the patches its kustomization
    # applies (the ones not commented out).
    rm -rf "$dir/conversion" && mkdir -p "$dir/conversion"
    for f in $(sed -n 's|^- path: \(patches/webhook_in_.*\)$|\1|p' "$mod/config/components/crd/kustomization.yaml"); do
      cp "$mod/config/components/crd/$f" "$dir/conversion/"
    done
    cp "$mod/config/components/webhook/manifests.yaml" "$dir/webhooks.yaml"
    chmod -R u+w "$dir"
    echo "$kwant" > "$kstamp"
  fi
  [[ -n "${KUEUE_DIR:-}" ]] || ln -sfn "$version" "$root/bin/kueue/current"
}
build_kueue

if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
  for b in kube-apiserver kube-controller-manager kube-scheduler kubectl etcd kwok; do
    [[ -x "$out/$b" ]] || { rm -f "$stamp"; break; }
  done
  if [[ -f "$stamp" ]]; then
    [[ -n "${CONTROLPLANE_DIR:-}" ]] || ln -sfn "$versions" "$root/bin/controlplane/current"
    echo "control plane up to date in ${out#$root/}"
    exit 0
  fi
fi

mkdir -p "$out"
export CGO_ENABLED=0 GOFLAGS="${GOFLAGS:-} -trimpath"
start=$SECONDS

log "building etcd $etcd_version"
(cd "$tools/etcd" && go build -o "$out/etcd" go.etcd.io/etcd/server/v3)

log "building kwok $kwok_version"
(cd "$tools/kwok" && go build -o "$out/kwok" sigs.k8s.io/kwok/cmd/kwok)
# kwok refuses to start without stage configurations; ship the module's own.
kwok_dir="$(cd "$tools/kwok" && go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)"
rm -rf "$out/kwok-stages" && mkdir -p "$out/kwok-stages"
for f in node/fast/node-initialize.yaml node/heartbeat/node-heartbeat.yaml \
         pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml; do
  cp "$kwok_dir/kustomize/stage/$f" "$out/kwok-stages/"
done
chmod -R u+w "$out/kwok-stages"

minor="${kube_version#v1.}"; minor="${minor%%.*}"
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$kube_version -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean"
for b in kube-apiserver kube-controller-manager kube-scheduler kubectl; do
  log "building $b $kube_version (the first build takes several minutes)"
  (cd "$tools/kube" && go build -ldflags "$ldflags" -o "$out/$b" "k8s.io/kubernetes/cmd/$b")
done

echo "$want" > "$stamp"
[[ -n "${CONTROLPLANE_DIR:-}" ]] || ln -sfn "$versions" "$root/bin/controlplane/current"
log "control plane built in $((SECONDS - start))s into ${out#$root/}"
