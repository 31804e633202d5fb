#!/usr/bin/env bash
# Installs what wirelab needs on a fresh Debian 12 machine, and only what is
# missing. Run as root (make does). Idempotent and quiet when all is there.
set -euo pipefail

need_root() {
  if [[ $(id -u) -ne 0 ]]; then
    echo "wirelab: setting up needs root (apt-get, network namespaces, BPF): run 'sudo make $*'" >&2
    exit 2
  fi
}
need_root "${MAKECMDGOALS:-}"

# clang/llvm/libbpf-dev/libelf-dev/zlib/pkg-config: compiling the BPF switch
# and libbpf-sys; iproute2 + ethtool: the lab; tshark/tcpdump/iperf3:
# cross-checks and benchmark baselines; nftables: the loss in the
# capture tests (and stateful DUTs); procps: sysctl.
# python3-venv: a virtualenv for the PyPI tools the cross-checks use.
# openvswitch-switch: ScalaCN's DUT 2 (`flowtables.dut: ovs`), which
# wirelab starts in a lab namespace of its own and stops. netsniff-ng:
# trafgen, the baseline `wirelab bench load` measures its generator against.
# haproxy and nginx-light: `wirelab load`'s stateful DUT and real server
# (started in a lab namespace, never as services); wrk: the HTTP baseline.
PKGS=(clang llvm libbpf-dev libelf-dev zlib1g-dev pkg-config make iproute2 ethtool
      tshark tcpdump iperf3 nftables procps bpftool linux-libc-dev python3 python3-venv
      openvswitch-switch netsniff-ng haproxy nginx-light wrk)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

# Rust >= 1.85 (clap 4.6 needs it). A rustup toolchain in ~/.cargo is used
# when present; otherwise Debian 12's rustc-web/cargo-web (1.96) are.
export PATH="$HOME/.cargo/bin:$PATH"
rust_ok() {
  command -v cargo >/dev/null 2>&1 || return 1
  local v; v=$(rustc --version 2>/dev/null | awk '{print $2}')
  [[ -n $v ]] || return 1
  local major minor; IFS=. read -r major minor _ <<<"$v"
  (( major > 1 || (major == 1 && minor >= 85) ))
}
if ! rust_ok; then
  missing+=(rustc-web cargo-web)
fi

if ((${#missing[@]})); then
  echo "wirelab: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # No service starts on install (a system-wide Open vSwitch would be left
  # running): a policy-rc.d that refuses, unless the image has its own.
  policy=/usr/sbin/policy-rc.d
  ours=
  if [[ ! -e $policy ]]; then
    printf '#!/bin/sh\nexit 101\n' > "$policy" && chmod +x "$policy" && ours=1
  fi
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  if [[ -n $ours ]]; then rm -f "$policy"; fi
fi
# Installed before this script knew better, or by hand: the system's Open
# vSwitch is not wirelab's and is not needed running.
if command -v systemctl >/dev/null 2>&1 && systemctl is-active -q openvswitch-switch 2>/dev/null; then
  echo "wirelab: note: a system Open vSwitch is running; wirelab's runs use their own"
fi
rust_ok || { echo "wirelab: no Rust >= 1.85 after installing rustc-web/cargo-web" >&2; exit 2; }

# The BPF filesystem is where libbpf expects it (some minimal images lack it).
mountpoint -q /sys/fs/bpf || mount -t bpf bpf /sys/fs/bpf 2>/dev/null || true

# PyPI tools, pinned in scripts/requirements.txt, in a virtualenv under
# target/ (scapy's scapy.contrib.roce recomputes ICRCs in the lab tests;
# ray runs `wirelab fuzz --ray` campaigns).
here=$(cd "$(dirname "$0")/.." && pwd)
py="$here/target/py"
if ! "$py/bin/python" -c 'import scapy.contrib.roce, ray' 2>/dev/null; then
  echo "wirelab: installing scripts/requirements.txt into target/py"
  python3 -m venv "$py"
  "$py/bin/pip" install -q --disable-pip-version-check -r "$here/scripts/requirements.txt"
fi
