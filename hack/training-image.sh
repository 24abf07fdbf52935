#!/usr/bin/env bash
# Writes the training image the real node's PyJobs run: Debian bookworm
# (minbase) with Debian's CPU PyTorch (python3-torch: python3, torchrun,
# torch.distributed with gloo), made with debootstrap from Debian's
# mirror and written as an OCI image by hack/image, without Docker.
#
# The root filesystem is cached in bin/image/rootfs/pytorch with a stamp
# of this script; the image in bin/image/pytorch.tar, listed in
# bin/image/index.txt. Without root or debootstrap it says so and writes
# nothing (the real-node tests then do not run).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${IMAGE_DIR:-$root/bin/image}"
rootfs="$out/rootfs/pytorch"
ref="${TRAINING_IMAGE:-trainops.local/pytorch-cpu:bookworm}"
mirror="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
want="$(cat "$0" "$root"/hack/image/*.go | sha256sum | cut -d' ' -f1)"
log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*"; }

if [[ -f "$out/pytorch.tar" && -f "$out/.pytorch.stamp" && "$(cat "$out/.pytorch.stamp")" == "$want" ]] &&
   grep -q " pytorch.tar$" "$out/index.txt" 2>/dev/null; then
  echo "training image up to date in ${out#$root/}/pytorch.tar"
  exit 0
fi
if [[ $(id -u) -ne 0 ]]; then
  echo "the training image needs root (debootstrap): not written"
  exit 0
fi
if ! command -v debootstrap >/dev/null; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends debootstrap >/dev/null 2>&1 ||
    { echo "debootstrap is missing and could not be installed: the training image is not written"; exit 0; }
fi
start=$SECONDS
# An interrupted debootstrap leaves its /proc and /sys mounted inside the
# root filesystem: unmount whatever is mounted beneath it, deepest first,
# before anything there is removed, and again on the way out.
unmount_under() {
  awk -v r="$1/" 'index($2, r) == 1 {print $2}' /proc/mounts | sort -r |
    while read -r m; do umount -l "$m" || true; done
}
trap 'unmount_under "$rootfs"' EXIT
unmount_under "$rootfs"
rootfs_stamp="$out/rootfs/.pytorch.stamp"
if [[ ! -f "$rootfs_stamp" || "$(cat "$rootfs_stamp")" != "$want" ]]; then
  log "debootstrap bookworm with python3-torch into ${rootfs#$root/} (a few minutes the first time)"
  rm -rf --one-file-system "$rootfs" && mkdir -p "$rootfs"
  debootstrap --variant=minbase --include=python3-torch bookworm "$rootfs" "$mirror" >"$out/debootstrap.log" 2>&1 ||
    { echo "debootstrap failed; see ${out#$root/}/debootstrap.log"; tail -5 "$out/debootstrap.log"; exit 1; }
  # What a container never needs: downloaded packages, docs, man pages.
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* \
         "$rootfs"/usr/share/doc "$rootfs"/usr/share/man "$rootfs"/usr/share/info "$rootfs"/dev/*
  mkdir -p "$rootfs/workspace"
  # Debian's torch 1.13 on Python 3.11: torchrun's Std.from_str finds no
  # member for "0" (3.11 no longer iterates a Flag's zero value), so every
  # torchrun fails with "'NoneType' object has no attribute 'get'". The
  # change is upstream's own fix (torch 2.0: Std(int(v))).
  perl -0pi -e 's/            v = int\(v\)\n            for s in Std:\n                if s == v:\n                    return s\n/            return Std(int(v))\n/' \
    "$rootfs/usr/lib/python3/dist-packages/torch/distributed/elastic/multiprocessing/api.py"
  grep -q 'return Std(int(v))' "$rootfs/usr/lib/python3/dist-packages/torch/distributed/elastic/multiprocessing/api.py" ||
    { echo "could not mend torchrun's Std.from_str in the training image"; exit 1; }
  echo "$want" > "$rootfs_stamp"
fi
log "writing the training image $ref"
epoch="${SOURCE_DATE_EPOCH:-$(git -C "$root" log -1 --format=%ct 2>/dev/null || echo 0)}"
(cd "$root" && SOURCE_DATE_EPOCH="$epoch" go run ./hack/image rootfs --out "$out" --dir "$rootfs" --ref "$ref" --file pytorch.tar --workdir /workspace)
echo "$want" > "$out/.pytorch.stamp"
log "training image written in $((SECONDS - start))s"
