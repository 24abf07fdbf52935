#!/usr/bin/env bash
# Installs, from Debian's packages, what the real node needs that the Go
# module proxy cannot serve: libseccomp's headers and pkg-config, which
# runc's seccomp support links with (hack/build-node.sh builds runc and
# containerd from the module proxy), nft (kube-proxy's nftables mode),
# ip and unshare; and gcc, which runc and the GPU parity tests need
# (mig-parted's parser links NVML's bindings with cgo). Nothing is started.
#
# Without root, or on a machine without apt, it says what is missing and
# exits 0: the real-node tests then say so and do not run.
set -euo pipefail

need=()
command -v nft >/dev/null || need+=(nftables)
command -v ip >/dev/null || need+=(iproute2)
command -v unshare >/dev/null || need+=(util-linux)
command -v gcc >/dev/null || need+=(gcc libc6-dev)
command -v pkg-config >/dev/null || need+=(pkg-config)
pkg-config --exists libseccomp 2>/dev/null || need+=(libseccomp-dev)
if [[ ${#need[@]} -eq 0 ]]; then
  echo "node packages present: libseccomp $(pkg-config --modversion libseccomp), nft, gcc"
  exit 0
fi
if [[ $(id -u) -ne 0 ]] || ! command -v apt-get >/dev/null; then
  echo "node packages missing (${need[*]}): install them as root with apt-get to run the real-node tests"
  exit 0
fi
echo "installing node packages: ${need[*]}"
policy=/usr/sbin/policy-rc.d
had_policy=0
[[ -e $policy ]] && had_policy=1
if [[ $had_policy -eq 0 ]]; then
  printf '#!/bin/sh\nexit 101\n' > "$policy" && chmod +x "$policy"
  trap 'rm -f "$policy"' EXIT
fi
export DEBIAN_FRONTEND=noninteractive
if ! apt-get install -y --no-install-recommends "${need[@]}" >/tmp/trainops-node-packages.log 2>&1; then
  apt-get update >>/tmp/trainops-node-packages.log 2>&1
  apt-get install -y --no-install-recommends "${need[@]}" >>/tmp/trainops-node-packages.log 2>&1 ||
    { echo "apt-get install ${need[*]} failed; see /tmp/trainops-node-packages.log"; tail -5 /tmp/trainops-node-packages.log; exit 1; }
fi
echo "installed: ${need[*]}"
