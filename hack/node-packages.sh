#!/usr/bin/env bash
# Installs what the real node runs that the Go module proxy cannot serve:
# containerd and runc (and nft, which kube-proxy's nftables mode calls),
# from Debian's packages, when they are missing; and gcc, which the GPU
# parity tests need (mig-parted's parser links NVML's bindings with cgo). Nothing is started: the
# packages' own services are kept from starting (policy-rc.d), as the test
# environment runs containerd with a root, state and socket of its own.
#
# Without root, or on a machine without apt, it says what is missing and
# exits 0: the real-node tests then say so and do not run.
set -euo pipefail

need=()
command -v containerd >/dev/null || need+=(containerd)
command -v runc >/dev/null || need+=(runc)
command -v nft >/dev/null || need+=(nftables)
command -v ip >/dev/null || need+=(iproute2)
command -v unshare >/dev/null || need+=(util-linux)
command -v gcc >/dev/null || need+=(gcc libc6-dev)
if [[ ${#need[@]} -eq 0 ]]; then
  echo "node packages present: containerd $(containerd --version | awk '{print $3}'), runc $(runc --version | awk 'NR==1{print $3}')"
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
