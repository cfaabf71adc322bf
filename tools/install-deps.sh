#!/usr/bin/env bash
# Installs what building and testing the appliance needs, only what is missing (idempotent):
# Debian 12 packages (DPDK 22.11, libpcap, clang for bindgen, tshark for dissection, the
# Prometheus text parser of /usr/bin/python3 for the metrics test, its matplotlib for
# tools/plot_pktgen.py, OVS-DPDK for the bench's peer) and the
# Python modules of the protocol checker (scapy, numpy); iproute2, nftables and ethtool for the
# end-to-end test in network namespaces; Debian's PyTorch (python3-torch, 1.13, CPU) and a
# virtual environment `.venv` for the project's torch code, with the native client built
# into it (below).
set -euo pipefail
cd "$(dirname "$0")/.."

PKGS=(libdpdk-dev dpdk dpdk-dev libpcap-dev clang libclang-dev pkg-config python3 python3-pip tshark
      iproute2 nftables ethtool python3-prometheus-client python3-matplotlib
      python3-torch)
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# OVS-DPDK, the peer in `make bench` (tools/bench/ovs.py) and tools/bench/test_ovs.py: Debian's
# openvswitch-switch-dpdk (OVS 3.1 on DPDK 22.11). The bench runs its own private ovsdb-server
# and ovs-vswitchd-dpdk, so the package's service is kept from starting at install: a
# policy-rc.d that refuses, for the install only (removed on any exit), unless one is there.
ovs=openvswitch-switch-dpdk
dpkg-query -W -f='${Status}' "$ovs" 2>/dev/null | grep -q "install ok installed" || missing+=("$ovs")
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  # tshark asks whether non-root users may capture; answer no.
  echo "wireshark-common wireshark-common/install-setuid boolean false" | $SUDO debconf-set-selections || true
  if [[ " ${missing[*]} " == *" $ovs "* ]] && [ ! -e /usr/sbin/policy-rc.d ]; then
    trap '$SUDO rm -f /usr/sbin/policy-rc.d' EXIT
    printf '#!/bin/sh\nexit 101\n' | $SUDO tee /usr/sbin/policy-rc.d >/dev/null
    $SUDO chmod 755 /usr/sbin/policy-rc.d
  fi
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# scapy and numpy for the protocol checker; ml_dtypes for the Python client's bfloat16 arrays.
if ! python3 -c 'import scapy, numpy, ml_dtypes' 2>/dev/null; then
  echo "install-deps: installing the Python modules scapy, numpy and ml_dtypes"
  python3 -m pip install -q scapy numpy ml_dtypes 2>/dev/null \
    || python3 -m pip install -q --break-system-packages scapy numpy ml_dtypes
fi

# The torch environment: Debian's torch is built for /usr/bin/python3 and Debian's numpy 1.24, so
# `.venv` is a venv of /usr/bin/python3 that sees the system's packages (torch, numpy) and adds
# scapy and ml_dtypes, pinned to that numpy so pip never replaces it. The DDP hook's tests, the
# example and its end-to-end run use `.venv/bin/python`.
VENV=.venv
if [ ! -x "$VENV/bin/python" ]; then
  echo "install-deps: creating $VENV (/usr/bin/python3 with the system's packages)"
  /usr/bin/python3 -m venv --without-pip --system-site-packages "$VENV"
fi
if ! "$VENV/bin/python" -c 'import torch, numpy, scapy, ml_dtypes' 2>/dev/null; then
  echo "install-deps: installing scapy and ml_dtypes into $VENV"
  np=$("$VENV/bin/python" -c 'import numpy; print(numpy.__version__)')
  "$VENV/bin/python" -m pip install -q scapy ml_dtypes "numpy==$np"
  "$VENV/bin/python" -c 'import torch, numpy, scapy, ml_dtypes'
fi


if ! command -v cargo >/dev/null 2>&1; then
  echo "install-deps: cargo (Rust) is needed: install it with rustup (https://rustup.rs)" >&2
  exit 1
fi

# The native client (client/py: the Rust client as the Python module gradclient_native, PyO3),
# built with maturin into a wheel and installed into .venv. Rebuilt only when the Rust client's
# sources or those of the dataplane crate it depends on change (a hash of them is kept beside the
# venv), so a second `make deps` does nothing.
native_hash=$(cat Cargo.lock client/Cargo.toml client/py/Cargo.toml client/py/pyproject.toml dataplane/Cargo.toml \
  $(find client/src client/py/src dataplane/src -name '*.rs' | sort) | sha256sum | cut -d' ' -f1)
if [ "$(cat "$VENV/.gradclient-native" 2>/dev/null)" != "$native_hash" ] \
   || ! "$VENV/bin/python" -c 'import gradclient_native' 2>/dev/null; then
  if ! "$VENV/bin/python" -m maturin --version >/dev/null 2>&1; then
    echo "install-deps: installing maturin into $VENV"
    "$VENV/bin/python" -m pip install -q "maturin>=1.5,<2"
  fi
  echo "install-deps: building the native client (client/py) into $VENV"
  rm -rf target/wheels/gradclient_native-*.whl
  nice -n 10 "$VENV/bin/python" -m maturin build -q --release -m client/py/Cargo.toml \
    -i "$VENV/bin/python" -o target/wheels
  "$VENV/bin/python" -m pip install -q --force-reinstall --no-deps target/wheels/gradclient_native-*.whl
  "$VENV/bin/python" -c 'import gradclient_native'
  echo "$native_hash" > "$VENV/.gradclient-native"
fi
