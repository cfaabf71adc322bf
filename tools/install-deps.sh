#!/usr/bin/env bash
# Installs what building and testing the appliance needs, only what is missing (idempotent):
# Debian 12 packages (DPDK 22.11, libpcap, clang for bindgen, tshark for dissection, the
# Prometheus text parser of /usr/bin/python3 for the metrics test, its matplotlib for
# tools/plot_pktgen.py) and the
# Python modules of the protocol checker (scapy, numpy); iproute2, nftables and ethtool for the
# end-to-end test in network namespaces.
set -euo pipefail

PKGS=(libdpdk-dev dpdk dpdk-dev libpcap-dev clang libclang-dev pkg-config python3 python3-pip tshark
      iproute2 nftables ethtool python3-prometheus-client python3-matplotlib)
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  # tshark asks whether non-root users may capture; answer no.
  echo "wireshark-common wireshark-common/install-setuid boolean false" | $SUDO debconf-set-selections || true
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# scapy and numpy for the protocol checker; ml_dtypes for the Python client's bfloat16 arrays.
if ! python3 -c 'import scapy, numpy, ml_dtypes' 2>/dev/null; then
  echo "install-deps: installing the Python modules scapy, numpy and ml_dtypes"
  python3 -m pip install -q scapy numpy ml_dtypes 2>/dev/null \
    || python3 -m pip install -q --break-system-packages scapy numpy ml_dtypes
fi

if ! command -v cargo >/dev/null 2>&1; then
  echo "install-deps: cargo (Rust) is needed: install it with rustup (https://rustup.rs)" >&2
  exit 1
fi
