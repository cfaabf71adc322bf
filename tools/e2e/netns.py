"""A small switched network on one machine for end-to-end runs: N worker hosts and the appliance
in their own network namespaces, joined by veth pairs to a Linux bridge in a namespace of its own.

    ns <prefix>w0 .. w<N-1>: eth0 = 10.77.0.<k+1>/24, MAC 02:00:00:77:00:<k>  (a training host)
    ns <prefix>ap:           dpu0 (no kernel address: the appliance owns 10.77.0.100 through DPDK's
                             net_af_packet, and answers ARP for it itself; the namespace's own
                             stack sees none of its frames)
    ns <prefix>br:           br0 with the other ends of every veth

Only namespaces this module creates are touched. The workers' ends of their links leave
checksums to the device (transmit checksum offload on) and segment in their own kernel at the
device (TCP and UDP segmentation offload off: a super-packet from TCP or a UDP_SEGMENT send is
cut into MTU-sized frames as it leaves the host, as for a NIC that checksums but does not
segment), so every frame on a link is one a wire would carry. Every bridge port has transmit
checksumming off (`ethtool -K IF tx off`), so the bridge finishes the checksums the hosts left
open before any receiver sees them; the appliance's packet socket would otherwise read UDP
checksums left for a NIC to finish, which it rightly drops as bad. (The appliance's own end has
it off too, for what the appliance sends.) The bridge is a
switch, not a firewall: where the host has `br_netfilter` loaded (container hosts do), its
namespace's `net.bridge.bridge-nf-call-{iptables,ip6tables,arptables}` are set to 0 (they are
per namespace, 1 by default), so that bridged frames do not go through the IP stack's
netfilter hooks and a route lookup on their way across (about 5% of the hosts' CPU in the
training demo's profile at MTU 1500).
"""

import os
import subprocess
import sys

SUBNET = "10.77.0"
APPLIANCE_IP = f"{SUBNET}.100"
APPLIANCE_MAC = "02:00:00:77:00:fe"
APPLIANCE_IFACE = "dpu0"
WORKER_UDP_PORT = 50000
RING_TCP_PORT = 51000


def worker_ip(rank):
    return f"{SUBNET}.{rank + 1}"


def worker_mac(rank):
    return f"02:00:00:77:{rank >> 8:02x}:{rank & 0xFF:02x}"


def _run(*argv, check=True, quiet=False):
    r = subprocess.run(argv, capture_output=True, text=True)
    if check and r.returncode != 0:
        raise RuntimeError(f"`{' '.join(argv)}` failed ({r.returncode}): {r.stderr.strip()}")
    return r


def sweep_stale(base="gdpu"):
    """Deletes namespaces left by earlier runs whose process is gone (a run killed by SIGKILL)."""
    out = _run("ip", "netns", "list", check=False).stdout
    for line in out.splitlines():
        name = line.split()[0] if line.split() else ""
        if not name.startswith(base + "-"):
            continue
        pid = name[len(base) + 1 :].split("-")[0]
        if pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
            _run("ip", "netns", "del", name, check=False)


class Topology:
    """The namespaces of one run; `with Topology(4) as t:` builds them and always removes them."""

    def __init__(self, workers, mtu=1500, base="gdpu"):
        self.workers = workers
        self.mtu = mtu
        self.prefix = f"{base}-{os.getpid()}-"
        self.bridge_ns = self.prefix + "br"
        self.appliance_ns = self.prefix + "ap"
        self.worker_ns = [f"{self.prefix}w{k}" for k in range(workers)]
        self.created = []

    def __enter__(self):
        try:
            self.up()
        except BaseException:
            self.down()
            raise
        return self

    def __exit__(self, *exc):
        self.down()
        return False

    def _netns(self, name):
        _run("ip", "netns", "add", name)
        self.created.append(name)
        _run("ip", "-n", name, "link", "set", "lo", "up")

    def _attach(self, ns, iface, mac, bridge_end, offloads=True):
        """A veth from `iface` in `ns` to `bridge_end` on the bridge; without `offloads`, transmit
        checksumming (and with it segmentation) off at both ends."""
        _run("ip", "link", "add", iface, "netns", ns, "type", "veth", "peer", "name", bridge_end, "netns", self.bridge_ns)
        _run("ip", "-n", ns, "link", "set", iface, "address", mac, "mtu", str(self.mtu))
        _run("ip", "-n", self.bridge_ns, "link", "set", bridge_end, "mtu", str(self.mtu))
        # IPv6 off on the hosts' links: no router solicitations or DAD chatter to count as drops.
        _run("ip", "netns", "exec", ns, "sysctl", "-q", "-w", f"net.ipv6.conf.{iface}.disable_ipv6=1")
        if offloads:
            # Checksums left to the device; segmentation (TCP's TSO, UDP's GSO) done by this
            # host's kernel at its device (as for a NIC that checksums but does not segment):
            # every frame leaves the host at the MTU, so the bridge can drop single datagrams.
            _run("ip", "netns", "exec", ns, "ethtool", "-K", iface, "tx-tcp-segmentation", "off",
                 "tx-tcp6-segmentation", "off", "tx-udp-segmentation", "off")
            # No GRO (the veth default since Linux 5.13, said here): with it a veth polls each
            # frame alone as its peer sends, so nothing coalesces and every frame pays for the poll.
            _run("ip", "netns", "exec", ns, "ethtool", "-K", iface, "gro", "off")
        else:
            _run("ip", "netns", "exec", ns, "ethtool", "-K", iface, "tx", "off")
        # The bridge puts frames on the wire as a host's NIC would: checksums finished (for TCP
        # and UDP alike, whoever receives them).
        _run("ip", "netns", "exec", self.bridge_ns, "ethtool", "-K", bridge_end, "tx", "off")
        _run("ip", "-n", ns, "link", "set", iface, "up")
        _run("ip", "-n", self.bridge_ns, "link", "set", bridge_end, "master", "br0")
        _run("ip", "-n", self.bridge_ns, "link", "set", bridge_end, "up")

    def up(self):
        sweep_stale()
        self._netns(self.bridge_ns)
        for table in ("iptables", "ip6tables", "arptables"):
            # Absent without br_netfilter: nothing to turn off.
            _run("ip", "netns", "exec", self.bridge_ns, "sysctl", "-q", "-w",
                 f"net.bridge.bridge-nf-call-{table}=0", check=False)
        _run("ip", "-n", self.bridge_ns, "link", "add", "br0", "type", "bridge")
        _run("ip", "-n", self.bridge_ns, "link", "set", "br0", "mtu", str(self.mtu))
        _run("ip", "-n", self.bridge_ns, "link", "set", "br0", "up")
        for k, ns in enumerate(self.worker_ns):
            self._netns(ns)
            self._attach(ns, "eth0", worker_mac(k), f"w{k}")
            _run("ip", "-n", ns, "addr", "add", f"{worker_ip(k)}/24", "dev", "eth0")
        self._netns(self.appliance_ns)
        self._attach(self.appliance_ns, APPLIANCE_IFACE, APPLIANCE_MAC, "ap", offloads=False)
        # The appliance owns its link, as DPDK owns a NIC: its namespace's kernel must not also
        # take every frame through its own IP stack (a route lookup, an unreachable-host drop and
        # a freed route per contribution, about 5% of the sending ranks' CPU in the training
        # demo's profile). A netdev ingress hook drops each frame after the appliance's packet
        # socket has read it (packet sockets read a link before its ingress hooks).
        rules = (f"table netdev appliance {{\n  chain owned {{ type filter hook ingress device \"{APPLIANCE_IFACE}\" "
                 f"priority 0; policy drop; }}\n}}\n")
        r = subprocess.run(["ip", "netns", "exec", self.appliance_ns, "nft", "-f", "-"], input=rules,
                           capture_output=True, text=True)
        if r.returncode != 0:
            # Only CPU is at stake (the namespace's stack drops what it cannot route): go on.
            print(f"netns.py: warning: no ingress drop on {APPLIANCE_IFACE} ({r.stderr.strip()}); the "
                  f"appliance namespace's kernel will route and drop every frame too", file=sys.stderr)

    def down(self):
        for name in reversed(self.created):
            _run("ip", "netns", "del", name, check=False)
        self.created = []

    def exec_argv(self, ns, argv):
        return ["ip", "netns", "exec", ns, *argv]

    def set_loss(self, percent):
        """Drops `percent` % of UDP datagrams at random in each direction between the workers and
        the appliance (nftables `numgen random`; this kernel has no netem): on the way in, at
        each worker's input; on the way out, where the bridge forwards to the appliance's port
        (the appliance's packet socket reads its link before any hook there could drop). 0
        removes the rules."""
        rule = f"numgen random mod 100 lt {percent} drop"
        tables = [(ns, "inet", f"chain in {{ type filter hook input priority 0; meta l4proto udp {rule}; }}")
                  for ns in self.worker_ns]
        tables.append((self.bridge_ns, "bridge",
                       f"chain toappliance {{ type filter hook forward priority 0; oifname \"ap\" ip protocol udp {rule}; }}"))
        for ns, family, chain in tables:
            _run("ip", "netns", "exec", ns, "nft", "delete", "table", family, "loss", check=False)
            if percent <= 0:
                continue
            rules = f"table {family} loss {{\n  {chain}\n}}\n"
            r = subprocess.run(["ip", "netns", "exec", ns, "nft", "-f", "-"], input=rules, capture_output=True, text=True)
            if r.returncode != 0:
                raise RuntimeError(f"nft in {ns} failed: {r.stderr.strip()}")
