"""Nodes of a job on one machine, for tests of slow links: network namespaces joined by a bridge,
one link slowed for real by a rate limit (``tc ... tbf``; this kernel has no netem), each node
with a host name of its own (a UTS namespace) when asked. Root only: a test skips cleanly where
namespaces, bridges or tbf cannot be made (CI without root)."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from dataclasses import dataclass, field

import pytest


def _ip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=20)


@dataclass
class Node:
    netns: str | None       # None: the machine's own namespace, on the bridge
    address: str
    interface: str          # the one gloo must use (GLOO_SOCKET_IFNAME)

    def command(self, argv: list[str], hostname: str | None) -> list[str]:
        """``argv`` run on this node, under ``hostname`` when given."""
        inner = argv
        if hostname is not None:
            inner = ["unshare", "--uts", "sh", "-c", f"hostname {shlex.quote(hostname)} && exec \"$@\"", "sh", *argv]
        return ["ip", "netns", "exec", self.netns, *inner] if self.netns else inner


@dataclass
class Network:
    tag: str
    prefix: str                      # 10.x.y
    bridge: str = ""
    nodes: list[Node] = field(default_factory=list)
    _links: list[str] = field(default_factory=list)
    _namespaces: list[str] = field(default_factory=list)

    def node(self, rate: str | None = None) -> Node:
        """A new node: the first is the machine itself (on the bridge), the others namespaces;
        ``rate`` (``200mbit``) limits its link both ways."""
        n = len(self.nodes) + 1
        address = f"{self.prefix}.{n}"
        if n == 1:
            _must(_ip("link", "add", self.bridge, "type", "bridge"))
            self._links.append(self.bridge)
            _must(_ip("addr", "add", f"{address}/24", "dev", self.bridge))
            _must(_ip("link", "set", self.bridge, "up"))
            node = Node(None, address, self.bridge)
        else:
            netns, outside, inside = f"mc{self.tag}n{n}", f"mc{self.tag}h{n}", f"mc{self.tag}v{n}"
            _must(_ip("netns", "add", netns))
            self._namespaces.append(netns)
            _must(_ip("link", "add", outside, "type", "veth", "peer", "name", inside))
            self._links.append(outside)
            _must(_ip("link", "set", outside, "master", self.bridge))
            _must(_ip("link", "set", outside, "up"))
            _must(_ip("link", "set", inside, "netns", netns))
            for args in (("addr", "add", f"{address}/24", "dev", inside), ("link", "set", inside, "up"),
                         ("link", "set", "lo", "up")):
                _must(_ip("-n", netns, *args))
            if rate is not None:
                limit = ["root", "tbf", "rate", rate, "burst", "64kb", "limit", "4mb"]
                _must(subprocess.run(["tc", "qdisc", "add", "dev", outside, *limit], capture_output=True, text=True))
                _must(subprocess.run(["ip", "netns", "exec", netns, "tc", "qdisc", "add", "dev", inside, *limit],
                                     capture_output=True, text=True))
            node = Node(netns, address, inside)
        self.nodes.append(node)
        return node

    def close(self) -> None:
        for link in reversed(self._links):
            _ip("link", "del", link)
        for netns in self._namespaces:
            _ip("netns", "del", netns)


def _must(result: subprocess.CompletedProcess) -> None:
    """A step that failed: this machine cannot build the network, the test skips (torn down)."""
    if result.returncode != 0:
        pytest.skip(f"cannot build the test network: {shlex.join(result.args)}: {result.stderr.strip()}")


@pytest.fixture
def network():
    """A ``Network`` to add nodes to, torn down after the test; skips where it cannot be built."""
    if os.geteuid() != 0 or not shutil.which("ip") or not shutil.which("tc") or not shutil.which("unshare"):
        pytest.skip("network namespaces need root, ip, tc and unshare")
    tag = f"{os.getpid() % 1000:03d}"
    net = Network(tag, f"10.{200 + os.getpid() % 50}.{os.getpid() % 250}", bridge=f"mc{tag}br")
    try:
        yield net
    finally:
        net.close()
