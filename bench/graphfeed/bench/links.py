"""``graphfeed bench link``: a cross-node emulation and what TCP and gRPC get through it.

:class:`ShapedLink` makes a network namespace joined to this one by a veth pair whose two
directions are each shaped with ``tc tbf`` (netem is not available everywhere; tbf is). Processes
started with :meth:`ShapedLink.exec_prefix` live "on the other machine": they bind
:attr:`ShapedLink.remote_ip` and everything they send to this namespace crosses the shaped link.
:meth:`ShapedLink.placement` hands that to :meth:`graphfeed.cluster.LocalCluster.start`, so
the graph-stores run behind the link while the sampler and loader stay here.

The benchmark measures, for each ``--rate``, a stream from the namespace to this one:

* **TCP**: plain sockets (``sendall`` / ``recv_into`` of 4 MiB buffers): what the link gives;
* **gRPC**: :mod:`graphfeed.bench.loopback`'s raw byte stream (16 MiB messages, no protobuf):
  what gRPC gets out of it;

and the machine's CPU during each (``/proc/stat``: busy cores, of which softirq, where veth and
tbf do their work), to tell a link-bound transfer from a CPU-bound one.

Examples::

    graphfeed bench link --rate unlimited 25gbit 10gbit 1gbit
    graphfeed bench link --rate 10gbit --mtu 9000

Library use::

    with ShapedLink("10gbit") as link:
        cluster = LocalCluster.start(root, logs, store_placement=link.placement())

Needs root, ``ip`` and ``tc`` (iproute2), and a kernel with veth and sch_tbf.
"""

from __future__ import annotations

import argparse
import fcntl
import ipaddress
import itertools
import json
import os
import re
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from types import TracebackType

from graphfeed.bench import harness
from graphfeed.cluster import Placement

SUBNET = ipaddress.ip_network("10.231.0.0/16")  # carved into /30s: .1 this side, .2 the namespace
DEFAULT_MTU = 1500  # a plain data-centre Ethernet link
DEFAULT_QUEUE_S = 0.005  # tbf's queue beyond the burst, as time at the rate: a switch port's few MB
MIN_BURST_BYTES = 256 << 10  # a few 64 KiB GSO packets: tbf must not split (or drop) any of them
BURST_S = 0.001  # 1 ms of traffic: below that, timer slack alone keeps tbf under its rate
_UNITS = {"bit": 1, "kbit": 10**3, "mbit": 10**6, "gbit": 10**9, "tbit": 10**12}
_NS_NAME = re.compile(r"gf-(\d+)-(\d+)")
_LOCK = Path(tempfile.gettempdir()) / "graphfeed-links.lock"
_counter = itertools.count()


def parse_rate(rate: str | None) -> int | None:
    """Bits per second of a rate in tc's units ("10gbit", "200mbit", "1.5gbit").

    None, "" or "unlimited" mean no shaping (None). Only ``...bit`` units are accepted: tc
    reads "bps" as *bytes* per second, a factor of 8 nobody means on a command line.

    Raises:
        ValueError: anything else.
    """
    if rate is None or rate.strip().lower() in ("", "unlimited", "none"):
        return None
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([kmgt]?bit)", rate.strip().lower())
    bps = int(float(m[1]) * _UNITS[m[2]]) if m else 0
    if bps <= 0:
        raise ValueError(f"rate {rate!r}: expected e.g. 10gbit, 200mbit or unlimited")
    return bps


@dataclass(frozen=True)
class TbfShape:
    """The ``tc tbf`` parameters of one direction: rate (bit/s), burst and queue limit (bytes)."""

    rate_bps: int
    burst_bytes: int
    limit_bytes: int

    @classmethod
    def for_rate(cls, rate_bps: int, burst_bytes: int | None = None, queue_s: float = DEFAULT_QUEUE_S) -> TbfShape:
        """The burst a rate needs: :data:`BURST_S` of traffic, at least :data:`MIN_BURST_BYTES`
        (a fixed small burst throttles 10 Gbit/s far below its rate); the queue holds ``queue_s``
        more at the rate, so TCP keeps the link busy instead of backing off on every drop."""
        burst = burst_bytes if burst_bytes is not None else max(MIN_BURST_BYTES, int(rate_bps / 8 * BURST_S))
        return cls(rate_bps, burst, burst + int(rate_bps / 8 * queue_s))

    def tc_args(self) -> list[str]:
        return ["tbf", "rate", f"{self.rate_bps}bit", "burst", str(self.burst_bytes), "limit", str(self.limit_bytes)]


def _run(*cmd: str) -> str:
    """Runs an iproute2 command; its stderr becomes the error (not root, no veth/tbf, ...)."""
    done = _attempt(*cmd)
    if done.returncode != 0:
        hint = "" if os.geteuid() == 0 else " (a shaped link needs root)"
        raise RuntimeError(f"`{' '.join(cmd)}` failed (exit {done.returncode}){hint}: {done.stderr.strip()}")
    return done.stdout


def _attempt(*cmd: str) -> subprocess.CompletedProcess[str]:
    """Runs an iproute2 command and returns how it went (a removal may find nothing to remove)."""
    exe = shutil.which(cmd[0])
    if exe is None:
        raise RuntimeError(f"{cmd[0]} not found: a shaped link needs iproute2 (ip, tc)")
    return subprocess.run([exe, *cmd[1:]], capture_output=True, text=True, timeout=30, check=False)


def namespaces() -> list[str]:
    """Names of the network namespaces ``ip netns`` knows."""
    return [line.split()[0] for line in _run("ip", "netns", "list").splitlines() if line.strip()]


def _link_exists(dev: str) -> bool:
    return _attempt("ip", "link", "show", dev).returncode == 0


def _remove(name: str, host_dev: str) -> None:
    """Deletes the veth pair (explicitly: a namespace's own devices go asynchronously) and the namespace."""
    _attempt("ip", "link", "del", host_dev)
    _attempt("ip", "netns", "del", name)


def sweep_stale() -> list[str]:
    """Removes the links of processes that died without closing theirs; returns their names."""
    stale = []
    for name in namespaces():
        m = _NS_NAME.fullmatch(name)
        if m is None or _alive(int(m[1])):
            continue
        _remove(name, f"gfh{m[1]}x{m[2]}")
        stale.append(name)
    return stale


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _free_subnet() -> tuple[str, str]:
    """(this side, namespace side) of the first /30 of :data:`SUBNET` no address here is in."""
    used = {
        ipaddress.ip_interface(w).network for w in re.findall(r"inet (\S+)", _run("ip", "-4", "-o", "addr", "show"))
    }
    for net in SUBNET.subnets(new_prefix=30):
        if not any(net.overlaps(u) for u in used):
            host, remote = list(net.hosts())
            return str(host), str(remote)
    raise RuntimeError(f"no free /30 left in {SUBNET}: stale links? see `ip -4 addr`")


@contextmanager
def _setup_lock() -> Iterator[None]:
    """Serializes subnet choice and creation between processes (parallel benchmarks and tests)."""
    with open(_LOCK, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


class ShapedLink:
    """A network namespace joined to this one by a veth pair, each direction shaped with tbf.

    Created on construction, removed by :meth:`close` (or leaving the ``with`` block), also
    after errors; links of processes that died without closing are swept by the next one.

    Args:
        rate: per direction, in tc's units ("25gbit", "10gbit", "200mbit"); None or
            "unlimited": no shaping (the bare veth).
        mtu: both ends' MTU in bytes (default 1500; 9000 for jumbo frames).
        burst_bytes: tbf's bucket (default: :meth:`TbfShape.for_rate`).
        queue_s: tbf's queue beyond the burst, in seconds at the rate (default 5 ms).

    Raises:
        RuntimeError: with ip's or tc's message when not root or the kernel lacks veth or tbf.
    """

    def __init__(
        self,
        rate: str | None = None,
        mtu: int = DEFAULT_MTU,
        *,
        burst_bytes: int | None = None,
        queue_s: float = DEFAULT_QUEUE_S,
    ) -> None:
        rate_bps = parse_rate(rate)
        self.shape = None if rate_bps is None else TbfShape.for_rate(rate_bps, burst_bytes, queue_s)
        self.mtu = mtu
        pid, n = os.getpid(), next(_counter)
        self.name = f"gf-{pid}-{n}"
        self._host_dev, self._ns_dev = f"gfh{pid}x{n}", f"gfn{pid}x{n}"  # <= 15 characters
        self.host_ip = self.remote_ip = ""
        try:
            with _setup_lock():
                sweep_stale()
                self.host_ip, self.remote_ip = _free_subnet()
                self._create()
        except BaseException:
            _remove(self.name, self._host_dev)  # what was made; the error says what was not
            raise

    def _create(self) -> None:
        ns, mtu = self.name, str(self.mtu)
        _run("ip", "netns", "add", ns)
        _run(
            "ip",
            "link",
            "add",
            self._host_dev,
            "mtu",
            mtu,
            "type",
            "veth",
            "peer",
            "name",
            self._ns_dev,
            "mtu",
            mtu,
            "netns",
            ns,
        )
        _run("ip", "addr", "add", f"{self.host_ip}/30", "dev", self._host_dev)
        _run("ip", "-n", ns, "addr", "add", f"{self.remote_ip}/30", "dev", self._ns_dev)
        _run("ip", "link", "set", self._host_dev, "up")
        _run("ip", "-n", ns, "link", "set", self._ns_dev, "up")
        _run("ip", "-n", ns, "link", "set", "lo", "up")
        if self.shape is not None:
            _run("tc", "qdisc", "add", "dev", self._host_dev, "root", *self.shape.tc_args())
            _run("tc", "-n", ns, "qdisc", "add", "dev", self._ns_dev, "root", *self.shape.tc_args())

    @property
    def rate(self) -> str:
        """The shaped rate as tc writes it, or "unlimited"."""
        return "unlimited" if self.shape is None else _format_rate(self.shape.rate_bps)

    def exec_prefix(self) -> list[str]:
        """Command words that run the rest of a command inside the namespace."""
        return ["ip", "netns", "exec", self.name]

    def placement(self) -> Placement:
        """Where :class:`~graphfeed.cluster.LocalCluster` starts services behind this link."""
        return Placement(prefix=tuple(self.exec_prefix()), host=self.remote_ip)

    def drops(self) -> dict[str, int]:
        """Packets tbf dropped so far, per direction ("to_remote", "from_remote"); empty when unshaped."""
        if self.shape is None:
            return {}
        out = {}
        for side, ns_args, dev in (("to_remote", (), self._host_dev), ("from_remote", ("-n", self.name), self._ns_dev)):
            stats = json.loads(_run("tc", *ns_args, "-s", "-j", "qdisc", "show", "dev", dev))
            out[side] = sum(int(q.get("drops", 0)) for q in stats if q.get("kind") == "tbf")
        return out

    def close(self) -> None:
        """Removes the veth pair and the namespace (stop the processes in it first).

        Raises:
            RuntimeError: something is still there afterwards.
        """
        _remove(self.name, self._host_dev)
        left = [x for x in (self.name,) if x in namespaces()] + [d for d in (self._host_dev,) if _link_exists(d)]
        if left:
            raise RuntimeError(f"shaped link {self.name}: could not remove {left}")

    def __enter__(self) -> ShapedLink:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def _format_rate(bps: int) -> str:
    for unit, scale in (("tbit", 10**12), ("gbit", 10**9), ("mbit", 10**6), ("kbit", 10**3)):
        if bps >= scale and bps % scale == 0:
            return f"{bps // scale}{unit}"
    return f"{bps}bit"


# --- servers run inside the namespace, clients here -------------------------------------------

CHUNK_BYTES = 4 << 20


def tcp_source(host: str) -> None:
    """Serves bytes over plain TCP until killed: each request, a little-endian uint64 ``n``, is
    answered with ``n`` bytes on the same connection. Prints ``GRAPHFEED_READY ... tcp=HOST:PORT``."""
    payload = memoryview(b"\x01" * CHUNK_BYTES)
    with socket.create_server((host, 0)) as srv:
        print(f"GRAPHFEED_READY service=tcp-source tcp={host}:{srv.getsockname()[1]}", flush=True)
        while True:
            conn, _ = srv.accept()
            with conn:
                while (req := _recv_exactly(conn, 8)) is not None:
                    (left,) = struct.unpack("<Q", req)
                    while left > 0:
                        conn.sendall(payload[: min(left, CHUNK_BYTES)])
                        left -= min(left, CHUNK_BYTES)


def _recv_exactly(conn: socket.socket, n: int) -> bytes | None:
    buf = b""
    while len(buf) < n:
        got = conn.recv(n - len(buf))
        if not got:
            return None
        buf += got
    return buf


def measure_tcp(address: str, total_bytes: int = 1 << 30, warmup_bytes: int = 16 << 20) -> float:
    """Gbit/s received from :func:`tcp_source` at ``address`` over one connection (after a warm-up)."""
    host, port = address.rsplit(":", 1)
    buf = bytearray(CHUNK_BYTES)
    with socket.create_connection((host, int(port)), timeout=120) as conn:

        def fetch(n: int) -> None:
            conn.sendall(struct.pack("<Q", n))
            while n > 0:
                got = conn.recv_into(buf, min(n, CHUNK_BYTES))
                if got == 0:
                    raise ConnectionError(f"tcp-source {address} closed with {n} bytes to go")
                n -= got

        fetch(warmup_bytes)
        t0 = time.perf_counter()
        fetch(total_bytes)
        return total_bytes * 8 / (time.perf_counter() - t0) / 1e9


@contextmanager
def server_in(link: ShapedLink, module_args: list[str], key: str, timeout_s: float = 60.0) -> Iterator[tuple[str, int]]:
    """Runs ``python -m <module_args>`` inside ``link``'s namespace; yields (the address its
    READY line gives under ``key``, its pid) and stops it on exit."""
    from graphfeed.bench.systems import Child

    child = Child.spawn(f"{module_args[0]} in {link.name}", module_args, link.exec_prefix(), key)
    try:
        yield child.wait_ready(timeout_s), child.proc.pid
    finally:
        child.stop()


# --- measurement -------------------------------------------------------------------------------


@dataclass
class Transfer:
    """One measured stream: its rate and what the machine's CPUs did meanwhile."""

    gbit_s: float
    seconds: float  # wall time of the whole call (its warm-up included)
    busy_cores: float  # all CPUs of the machine (other jobs included), from /proc/stat
    softirq_cores: float  # of which softirq: veth delivery and tbf run there
    server_cpu_s: float  # the sending process (in the namespace)
    client_cpu_s: float  # this process


def _proc_stat() -> tuple[int, int, int]:
    """(busy, softirq, total) jiffies of all CPUs."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:8]]
    user, nice, system, _idle, _iowait, irq, softirq = fields
    return user + nice + system + irq + softirq, softirq, sum(fields)


def metered(transfer: Callable[[], float], server_pid: int) -> Transfer:
    """Runs ``transfer`` (returns Gbit/s) and accounts the CPU it took."""
    import psutil

    server = psutil.Process(server_pid)
    s0, c0, p0, t0 = server.cpu_times(), time.process_time(), _proc_stat(), time.perf_counter()
    gbit_s = transfer()
    s1, c1, p1, t1 = server.cpu_times(), time.process_time(), _proc_stat(), time.perf_counter()
    total = max(1, p1[2] - p0[2])
    cores = os.cpu_count() or 1
    return Transfer(
        gbit_s=gbit_s,
        seconds=t1 - t0,
        busy_cores=cores * (p1[0] - p0[0]) / total,
        softirq_cores=cores * (p1[1] - p0[1]) / total,
        server_cpu_s=(s1.user + s1.system) - (s0.user + s0.system),
        client_cpu_s=c1 - c0,
    )


def measure_link(rate: str | None, mtu: int = DEFAULT_MTU, total_bytes: int = 1 << 30, repeats: int = 3) -> dict:
    """TCP and gRPC streams from a namespace behind ``ShapedLink(rate, mtu)``, ``repeats`` each."""
    from graphfeed.bench import loopback

    with ShapedLink(rate, mtu) as link:
        tcp_args = ["graphfeed.bench.links", "tcp-source", link.remote_ip]
        with (
            server_in(link, tcp_args, "tcp") as (tcp, tcp_pid),
            server_in(link, ["graphfeed.bench.loopback", link.remote_ip], "grpc") as (rpc, rpc_pid),
        ):
            runs: dict[str, list[Transfer]] = {"tcp": [], "grpc": []}
            for _ in range(repeats):  # interleaved, so drift on a shared machine hits both alike
                runs["tcp"].append(metered(lambda: measure_tcp(tcp, total_bytes), tcp_pid))
                runs["grpc"].append(metered(lambda: loopback.measure(rpc, total_bytes=total_bytes) * 8, rpc_pid))
        drops = link.drops()
        shape = None if link.shape is None else asdict(link.shape)
    rate_gbit = None if shape is None else shape["rate_bps"] / 1e9
    out: dict = {
        "rate": link.rate,
        "rate_gbit_s": rate_gbit,
        "mtu": mtu,
        "bytes": total_bytes,
        "tbf": shape,
        "tbf_drops": drops,
    }
    for kind, transfers in runs.items():
        med = statistics.median(t.gbit_s for t in transfers)
        out[kind] = {
            "gbit_s_median": med,
            "of_rate": None if rate_gbit is None else med / rate_gbit,
            "runs": [asdict(t) for t in transfers],
        }
    return out


def markdown(results: list[dict]) -> str:
    """One row per link: TCP and gRPC Gbit/s (median, range), share of the rate, and the CPU
    (medians, TCP / gRPC): the machine's busy cores, softirq's, and the two processes' own."""
    rows = [
        (
            "| link | MTU | TCP Gbit/s | gRPC Gbit/s | TCP / rate | gRPC / rate | machine busy cores | softirq cores "
            "| processes, cores |"
        ),
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        cells = [r["rate"], str(r["mtu"])]
        for kind in ("tcp", "grpc"):
            g = [t["gbit_s"] for t in r[kind]["runs"]]
            cells.append(f"{r[kind]['gbit_s_median']:.2f} ({min(g):.2f}-{max(g):.2f})")
        cells += ["-" if r[k]["of_rate"] is None else f"{r[k]['of_rate']:.2f}" for k in ("tcp", "grpc")]
        for cores in (
            lambda t: t["busy_cores"],
            lambda t: t["softirq_cores"],
            lambda t: (t["server_cpu_s"] + t["client_cpu_s"]) / t["seconds"],
        ):
            cells.append(
                " / ".join(f"{statistics.median(cores(t) for t in r[k]['runs']):.2f}" for k in ("tcp", "grpc"))
            )
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows) + "\n"


def register(sub: argparse._SubParsersAction) -> None:
    """Adds ``bench link``."""
    harness.register(
        sub,
        "link",
        __doc__,
        "TCP and gRPC throughput through a tbf-shaped veth link (root)",
        add_arguments,
        run,
        repeats=3,
    )


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--rate", nargs="+", default=["10gbit"], help="per-direction rates, tc units or 'unlimited' (default 10gbit)"
    )
    p.add_argument("--mtu", type=int, default=DEFAULT_MTU, help=f"link MTU in bytes (default {DEFAULT_MTU})")
    p.add_argument("--bytes", type=int, default=1 << 30, dest="total_bytes", help="bytes per transfer (default 1 GiB)")


def run(args: argparse.Namespace) -> int:
    for rate in args.rate:
        parse_rate(rate)  # a typo fails before any link is made
    results = [measure_link(rate, args.mtu, args.total_bytes, args.repeats) for rate in args.rate]
    harness.write(args, {"cpus": os.cpu_count(), "results": results}, markdown(results), "link")
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] != ["tcp-source"] or len(sys.argv) != 3:
        sys.exit("usage: python -m graphfeed.bench.links tcp-source HOST")
    tcp_source(sys.argv[2])
