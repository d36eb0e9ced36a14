"""DistDGL (DGL 2.1's ``dgl.distributed``) as a system in graphfeed's benchmarks.

Two emulated machines on one host, as DistDGL's ``tools/launch.py`` would start them on two,
without ssh: machine 0 runs server 0 and the trainer, machine 1 runs server 1. Each machine is
its own mount namespace with a private ``/dev/shm`` (``unshare --mount`` + a tmpfs), because a
DistDGL server names its shared memory after the graph and the partition's data, so two servers
on one ``/dev/shm`` would collide; the trainer joins machine 0's namespace (``nsenter``) to read
its local partition from server 0's shared memory, as a trainer does on a real machine. All
processes share the host's network: the ip_config lists ``127.0.0.1`` twice with two ports.

The trainer samples in its own process (``DGL_NUM_SAMPLER=0``) with ``DistNodeDataLoader`` and
``NeighborSampler``, and pulls each minibatch's input features from the ``feat`` DistTensor.
A typed graph (graphfeed's node and edge types) is a DGL heterograph throughout: partitioned
with ``feat`` and ``train_mask`` per node type, the loader seeded ``{ntype: ids}`` and each
type's input features pulled from that type's ``feat`` DistTensor.

Edge mode (``bench throughput --edges``; :func:`ensure_partitions` given the train edges): the
trainer runs ``DistEdgeDataLoader`` over the train edges (in DistDGL's relabelled edge ids,
from the partitioning's id mapping, ``edges.pt`` next to the config) with ``Uniform(k)``
negatives. Its exclusion is nominal: DGL 2.1's ``DistGraph.sample_neighbors`` takes
``exclude_edges`` and ignores it, so DistDGL's neighbourhoods keep the seed edges and their
twins (graphfeed and in-process DGL leave them out). ``reverse_id`` is passed on a one-type
graph; on a typed one ``self`` (``EdgeCollator`` has no rule for a twin of another edge type
with another id).
:class:`DistDGLSystem` keeps all three processes alive between runs, so a harness can
alternate it run by run with other systems; each run is one command over the trainer's pipes.

Run as ``python -m graphfeed.bench.distdgl server|trainer`` it is one of those processes (the
launcher passes the DGL_* environment that launch.py would set).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import os
import re
import select
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from graphfeed.bench.runs import Run

log = logging.getLogger(__name__)

GRAPH_NAME = "gf_distdgl"  # names the servers' shared memory files and the partition config
NUM_MACHINES = 2  # one partition per machine, one server per machine
# Mounted over /dev/shm inside each emulated machine; `exec "$@"` keeps the server's pid the
# one the launcher holds (for CPU accounting and for stopping it).
_PRIVATE_SHM = 'mount -t tmpfs -o mode=1777 tmpfs /dev/shm && exec "$@"'


# --- partitions ------------------------------------------------------------------------------


def ensure_partitions(
    root: Path, workdir: Path, load: Callable[[Path], tuple[Any, Any, Any]], edges: dict[str, Any] | None = None
) -> Path:
    """DistDGL's partition config (JSON) for graphfeed's dataset ``root``, written once.

    ``dgl.distributed.partition_graph`` splits the graph into 2 METIS parts, balancing training
    nodes and edges (DistDGL's recipe), with node data ``feat`` and ``train_mask``; on a
    heterograph per node type (those with a feature table, those with training nodes), balancing
    each node type and, within a seed type, its training nodes. The result is
    cached under ``workdir`` keyed by ``root``'s path and manifest; a later call returns it
    without loading anything.

    Args:
        root: a graphfeed partitioned dataset (holds ``manifest.json``).
        workdir: where the DistDGL partitions are kept (``distdgl-<name>-<key>/``).
        load: ``root -> (DGLGraph in global id space, float32 features, training ids)``, called
            only when the partitions are not cached yet (``graphfeed.bench.harness.load_global``);
            for a typed graph a heterograph, ``{ntype: features}`` and ``{ntype: training ids}``.
        edges: edge mode: the train edges in the loaded graph's ids (``etype``: the canonical
            type or None on a one-type graph, ``seeds``, ``twins`` aligned, -1 for none, ``rev``
            the twins' type), written in DistDGL's ids as ``edges.pt`` next to the config.
    """
    from graphfeed.common.partition import MANIFEST

    root = root.resolve()
    key = hashlib.sha256(
        str(root).encode() + (root / MANIFEST).read_bytes() + (b"edges" if edges is not None else b"")
    ).hexdigest()[:12]
    out = workdir.resolve() / f"distdgl-{root.name}-{key}"
    config = out / f"{GRAPH_NAME}.json"
    if config.exists():
        return config
    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    g, feat, train = load(root)
    _partition(g, feat, train, tmp, edges)
    shutil.rmtree(out, ignore_errors=True)  # an older layout's leftovers
    tmp.rename(out)  # the config appears only once every part is written
    return config


def _partition(g: Any, feat: Any, train: Any, out: Path, edges: dict[str, Any] | None = None) -> None:
    import dgl

    started = time.perf_counter()
    try:
        if isinstance(feat, dict):  # a typed graph: a DGL heterograph, data per node type
            _set_typed_data(g, feat, train)
            balance: Any = _balance_by_train(g)
        else:
            balance = _train_mask(g.num_nodes(), train)
            g.ndata["feat"], g.ndata["train_mask"] = feat, balance
        mapping = dgl.distributed.partition_graph(
            g,
            GRAPH_NAME,
            NUM_MACHINES,
            str(out),
            part_method="metis",
            balance_ntypes=balance,
            balance_edges=True,
            return_mapping=edges is not None,
        )
        if edges is not None:
            _write_edges(edges, mapping[1], out)
    finally:  # the caller's graph is left as it came (its DGL reference samples it)
        for nt in g.ntypes:
            for key in ("feat", "train_mask"):
                g.nodes[nt].data.pop(key, None)
    log.info("DistDGL partitions of %d nodes written to %s in %.1fs", g.num_nodes(), out, time.perf_counter() - started)


def _write_edges(edges: dict[str, Any], orig_eids: Any, out: Path) -> None:
    """``edges.pt``: the train edges and each one's twin (-1: none) in DistDGL's edge ids
    (``orig_eids[new] = old``, per canonical type on a heterograph)."""
    import torch

    def inverse(etype: Any) -> Any:
        orig = orig_eids[etype] if isinstance(orig_eids, dict) else orig_eids
        inv = torch.empty_like(orig)
        inv[orig] = torch.arange(len(orig), dtype=orig.dtype)
        return inv

    seeds, twins = edges["seeds"], edges["twins"]
    train = inverse(edges["etype"])[seeds]
    has = twins >= 0
    twin = torch.full_like(twins, -1)
    twin[has] = inverse(edges["rev"])[twins[has]]
    torch.save({"etype": edges["etype"], "rev": edges["rev"], "train": train, "twin": twin}, out / "edges.pt")


def _train_mask(num_nodes: int, ids: Any) -> Any:
    import torch

    mask = torch.zeros(num_nodes, dtype=torch.bool)
    mask[ids] = True
    return mask


def _set_typed_data(g: Any, feat: dict[str, Any], train: dict[str, Any]) -> None:
    """``feat`` on each type that has a table, ``train_mask`` on each type with training ids
    (DistDGL stores them as ``<ntype>/feat`` and ``<ntype>/train_mask`` DistTensors)."""
    for nt, table in feat.items():
        g.nodes[nt].data["feat"] = table
    for nt, ids in train.items():
        g.nodes[nt].data["train_mask"] = _train_mask(g.num_nodes(nt), ids)


def _balance_by_train(g: Any) -> dict[str, Any]:
    """METIS constraints of a heterograph in DGL 2.1's form: ``{ntype: int classes 0..k-1}``.

    ``partition_graph`` balances each node type as one class and, for a type given here, each
    of its classes separately (here: training and other nodes of a seed type), as DistDGL
    balances ``train_mask`` on a homogeneous graph. A 1-D tensor would be ignored on a
    heterograph (node types only), and a type's classes must be exactly ``0..k-1``, so a type
    whose nodes are all training nodes is left to balance as one class.
    """
    import torch

    out = {}
    for nt in g.ntypes:
        if "train_mask" in g.nodes[nt].data:
            classes = g.nodes[nt].data["train_mask"].to(torch.int32)
            if len(torch.unique(classes)) == 2:
                out[nt] = classes
    return out


# --- launcher --------------------------------------------------------------------------------


def _tool(name: str) -> str:
    """The path of a util-linux/iproute2 program the emulation needs."""
    path = shutil.which(name)
    if path is None:
        raise RuntimeError(f"DistDGL's emulated machines need `{name}` on PATH (util-linux, iproute2)")
    return path


def _dying_with_parent(cmd: list[str]) -> list[str]:
    """``cmd`` run through ``setpriv --pdeathsig KILL``: a launcher that dies takes its servers
    along (a server whose trainer vanished would otherwise wait for it forever). The kernel
    watches the thread that started the child, so start the system from one that outlives it
    (the main thread). Not ``preexec_fn``: Python code between fork and exec in a process with
    threads (gRPC's, in a test session) can hang or fail there, and the server never starts."""
    return [_tool("setpriv"), "--pdeathsig", "KILL", "--", *cmd]


def _wire_bytes(pids: dict[str, int]) -> dict[str, int]:
    """Bytes sent plus received over the established TCP sockets of each process (the kernel's
    tcp_info counters, as ``ss -ti`` reports them); by name."""
    by_pid, out = {pid: name for name, pid in pids.items()}, dict.fromkeys(pids, 0)
    text = subprocess.run(
        [_tool("ss"), "-tinpH", "state", "established"], capture_output=True, text=True, check=True
    ).stdout
    owner = None
    for line in text.splitlines():  # a socket's line (with its users) and then its indented tcp_info line
        if not line[:1].isspace():
            found = re.search(r"pid=(\d+),", line)
            owner = by_pid.get(int(found.group(1))) if found else None
        elif owner is not None:
            out[owner] += sum(int(n) for n in re.findall(r"bytes_(?:sent|received):(\d+)", line))
    return out


class _Lines:
    """Lines of a child's stdout, each awaited with a deadline: a hung child must not hang us."""

    def __init__(self, stream: IO[bytes]) -> None:
        self._fd = stream.fileno()
        self._buf = b""

    def read(self, timeout_s: float) -> str:
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no answer within {timeout_s:.0f}s")
            if select.select([self._fd], [], [], left)[0]:
                chunk = os.read(self._fd, 1 << 16)
                if not chunk:
                    raise EOFError("the process closed its stdout")
                self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        return line.decode()


@dataclass
class _Proc:
    name: str
    popen: subprocess.Popen
    log_path: Path

    def tail(self) -> str:
        return (
            f"--- {self.name} (exit {self.popen.poll()}), {self.log_path}:\n"
            + self.log_path.read_text(errors="replace")[-2000:]
        )


class DistDGLSystem:
    """2 DistDGL servers and 1 trainer, started once and driven run by run.

    Use as a context manager; :meth:`run` samples ``steps`` minibatches in the trainer and pulls
    their features, :meth:`close` (or leaving the ``with``) stops the trainer, which shuts the
    servers down; anything still alive after ``stop_timeout_s`` is killed. The machines' private
    ``/dev/shm`` mounts vanish with their last process.

    Args:
        part_config: the partition config from :func:`ensure_partitions`.
        log_dir: each process's stdout/stderr goes to ``distdgl-<process>.log`` here.
        fanouts: neighbours per layer, input layer first (DGL's order).
        batch_size: seed nodes per minibatch.
        trainer_threads: OMP threads of the trainer; None: launch.py's default, half the cores.
        start_timeout_s: for the servers to load their partitions and the trainer to connect.
        run_timeout_s: for one :meth:`run`.
        stop_timeout_s: for all three to exit after the trainer is told to quit; then they are killed.
        trainer_args: more flags of the trainer process (``--rgcn``: it also trains an RGCN).
    """

    def __init__(
        self,
        part_config: Path,
        log_dir: Path,
        fanouts: list[int],
        batch_size: int,
        *,
        trainer_threads: int | None = None,
        start_timeout_s: float = 600.0,
        run_timeout_s: float = 600.0,
        stop_timeout_s: float = 60.0,
        trainer_args: tuple[str, ...] = (),
    ) -> None:
        self.part_config = part_config.resolve()
        self.trainer_args = trainer_args  # more trainer flags (e.g. --rgcn)
        self.log_dir = log_dir.resolve()
        self.fanouts, self.batch_size = list(fanouts), batch_size
        self.trainer_threads = trainer_threads or max((os.cpu_count() or 1) // 2, 1)
        self.start_timeout_s, self.run_timeout_s, self.stop_timeout_s = start_timeout_s, run_timeout_s, stop_timeout_s
        self.procs: dict[str, _Proc] = {}
        self.num_train = 0
        # [rows, width...] of each node type's feature DistTensor (DGL's ``_N`` when untyped)
        self.feat_shapes: dict[str, list[int]] = {}
        # [rows, width...] of the features the last run pulled, by node type
        self.pulled: dict[str, list[int]] = {}
        self._lines: _Lines | None = None

    def __enter__(self) -> DistDGLSystem:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def setup(self) -> str:
        """One sentence saying what runs where, for the benchmark's report."""
        import dgl

        return (
            f"DistDGL (dgl {dgl.__version__}): {NUM_MACHINES} METIS partitions, {NUM_MACHINES} emulated machines "
            "on this host (each a mount namespace with a private /dev/shm; TCP on 127.0.0.1), 1 server per machine, "
            "1 trainer on machine 0 "
            f"sampling in-process (DGL_NUM_SAMPLER=0, OMP_NUM_THREADS={self.trainer_threads}), "
            + (
                "DistEdgeDataLoader (exclusion ignored by DGL 2.1's DistGraph) + "
                if "--num-negatives" in self.trainer_args
                else "DistNodeDataLoader + "
            )
            + f"NeighborSampler({self.fanouts}), batch {self.batch_size}, shuffle, "
            "features pulled from the DistTensor" + ("s of each node type" if set(self.feat_shapes) - {"_N"} else "")
        )

    def start(self) -> None:
        """Starts both servers, waits for them to listen, then starts and awaits the trainer."""
        from graphfeed.bench.systems import free_port  # not in the DistDGL processes: they need no gRPC

        self.log_dir.mkdir(parents=True, exist_ok=True)
        ports = [free_port() for _ in range(NUM_MACHINES)]
        ip_config = self.log_dir / "distdgl-ip_config.txt"
        ip_config.write_text("".join(f"127.0.0.1 {p}\n" for p in ports))
        env = {
            **os.environ,
            "DGL_DIST_MODE": "distributed",
            "DGL_NUM_SAMPLER": "0",
            "DGL_NUM_CLIENT": "1",
            "DGL_NUM_SERVER": "1",
            "DGL_IP_CONFIG": str(ip_config),
            "DGL_CONF_PATH": str(self.part_config),
            "DGL_GRAPH_FORMAT": "csc",
            "DGL_KEEP_ALIVE": "0",
            "DGL_DIST_MAX_TRY_TIMES": "60",
        }
        started = time.perf_counter()
        try:
            for m in range(NUM_MACHINES):
                server_env = {**env, "DGL_ROLE": "server", "DGL_SERVER_ID": str(m), "OMP_NUM_THREADS": "1"}
                cmd = [
                    _tool("unshare"),
                    "--mount",
                    "--propagation",
                    "private",
                    "sh",
                    "-c",
                    _PRIVATE_SHM,
                    "sh",
                    *self._python("server"),
                ]
                self._spawn(f"server-{m}", cmd, server_env)
            for m, port in enumerate(ports):
                self._await_listening(f"server-{m}", port)
            log.info(
                "DistDGL servers listening after %.1fs (partitions in shared memory)", time.perf_counter() - started
            )
            trainer_env = {
                **env,
                "DGL_ROLE": "client",
                "DGL_GROUP_ID": "0",
                "OMP_NUM_THREADS": str(self.trainer_threads),
            }
            machine0 = self.procs["server-0"].popen.pid
            cmd = [
                _tool("nsenter"),
                f"--target={machine0}",
                "--mount",
                "--",
                *self._python("trainer", "--fanouts", *map(str, self.fanouts), "--batch-size", str(self.batch_size)),
                *self.trainer_args,
            ]
            trainer = self._spawn("trainer", cmd, trainer_env, pipes=True)
            assert trainer.stdout is not None  # stdout=PIPE
            self._lines = _Lines(trainer.stdout)
            ready = self._answer(self.start_timeout_s)
            self.num_train, self.feat_shapes = int(ready["train"]), ready["feat"]
            log.info(
                "DistDGL trainer ready after %.1fs: %d training nodes", time.perf_counter() - started, self.num_train
            )
        except BaseException:
            self._kill_all()
            raise

    def run(self, steps: int) -> Run:
        """Samples ``steps`` minibatches in the trainer (crossing into a new shuffled epoch when
        one ends) and pulls their features; CPU seconds are those of each process meanwhile."""
        import psutil

        procs = {name: psutil.Process(p.popen.pid) for name, p in self.procs.items()}
        servers = {name: p.pid for name, p in procs.items() if name.startswith("server")}
        wire, cpu = _wire_bytes(servers), {name: sum(p.cpu_times()[:2]) for name, p in procs.items()}
        self._send(f"run {steps}")
        got = self._answer(self.run_timeout_s)
        self.pulled = got["rows"]
        cpu = {name: sum(p.cpu_times()[:2]) - cpu[name] for name, p in procs.items()}
        traffic = {f"{name} rpc wire": n - wire[name] for name, n in _wire_bytes(servers).items()}
        # TCP payload bytes each server sent plus received, keyed "<server> rpc wire"; servers talk
        # only to the trainer, so each byte counts once
        return Run("distdgl", steps, float(got["seconds"]), int(got["edges"]), traffic, cpu)

    def close(self) -> dict[str, int]:
        """Stops the trainer (whose exit shuts the servers down), then every process left;
        returns the exit codes by process."""
        trainer = self.procs.get("trainer")
        if trainer is not None and trainer.popen.poll() is None:
            with contextlib.suppress(RuntimeError):  # the trainer is gone already; the waits below find out
                self._send("quit")
        deadline = time.monotonic() + self.stop_timeout_s
        for proc in self.procs.values():
            try:
                proc.popen.wait(max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                log.warning("DistDGL %s did not exit within %.0fs; killing it", proc.name, self.stop_timeout_s)
        self._kill_all()
        codes = {name: p.popen.returncode for name, p in self.procs.items()}
        if any(codes.values()):
            log.warning("DistDGL exit codes %s; logs in %s", codes, self.log_dir)
        return codes

    # -- helpers --

    def _python(self, role: str, *args: str) -> list[str]:
        return [
            sys.executable,
            "-m",
            "graphfeed.bench.distdgl",
            role,
            "--ip-config",
            str(self.log_dir / "distdgl-ip_config.txt"),
            *args,
        ]

    def _spawn(self, name: str, cmd: list[str], env: dict[str, str], pipes: bool = False) -> subprocess.Popen:
        log_path = self.log_dir / f"distdgl-{name}.log"
        with open(log_path, "wb") as out:  # the child keeps its own descriptor
            pipe = subprocess.PIPE if pipes else subprocess.DEVNULL
            popen = subprocess.Popen(
                _dying_with_parent(cmd), stdin=pipe, stdout=subprocess.PIPE if pipes else out, stderr=out, env=env
            )
        self.procs[name] = _Proc(name, popen, log_path)
        return popen

    def _await_listening(self, name: str, port: int) -> None:
        """Polls until the server listens on ``port`` (it has loaded its partition into shared
        memory by then); a connection to probe it would count as one of its clients."""
        import psutil

        proc = self.procs[name]
        deadline = time.monotonic() + self.start_timeout_s
        while proc.popen.poll() is None and time.monotonic() < deadline:
            with contextlib.suppress(psutil.NoSuchProcess):  # it died just now: poll() says so next
                conns = psutil.Process(proc.popen.pid).net_connections("tcp")
                if any(c.status == psutil.CONN_LISTEN and c.laddr.port == port for c in conns):
                    return
            time.sleep(0.1)  # polling a condition with a deadline
        raise RuntimeError(f"DistDGL {name} is not listening on {port}\n{proc.tail()}")

    def _send(self, command: str) -> None:
        stdin = self.procs["trainer"].popen.stdin
        assert stdin is not None  # stdin=PIPE
        try:
            stdin.write(command.encode() + b"\n")
            stdin.flush()
        except OSError as e:  # a dead trainer's pipe
            raise self._failed(e) from e

    def _answer(self, timeout_s: float) -> dict[str, Any]:
        assert self._lines is not None
        try:
            return json.loads(self._lines.read(timeout_s))
        except (TimeoutError, EOFError) as e:
            raise self._failed(e) from e

    def _failed(self, e: Exception) -> RuntimeError:
        tails = "\n".join(p.tail() for p in self.procs.values())
        return RuntimeError(f"DistDGL trainer: {e}\n{tails}")

    def _kill_all(self) -> None:
        for proc in self.procs.values():
            if proc.popen.poll() is None:
                proc.popen.kill()
            proc.popen.wait()
            for stream in (proc.popen.stdin, proc.popen.stdout):
                if stream is not None:
                    stream.close()


# --- the processes ---------------------------------------------------------------------------


def _serve(ip_config: str) -> None:
    """One DistDGL server: loads its partition (``DGL_SERVER_ID``) and serves until shut down."""
    import dgl

    dgl.distributed.initialize(ip_config)  # in the server role this serves and then exits


def _train(
    ip_config: str, fanouts: list[int], batch_size: int, rgcn: dict[str, Any] | None = None, negatives: int = 0
) -> None:
    """The trainer: answers ``run <steps>`` on stdin with one JSON line, until ``quit`` or EOF.
    With ``rgcn`` (``hidden``, ``lr``, ``num_classes``) each step also trains an RGCN with
    ``DistEmbedding`` tables for the featureless types (:mod:`graphfeed.bench.distdgl_rgcn`)."""
    answers = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # DGL prints progress on stdout; the answers keep their own copy of it
    import dgl

    dgl.distributed.initialize(ip_config)
    g = dgl.distributed.DistGraph(GRAPH_NAME)
    # Every training node (node_split refuses 1 trainer over 2 partitions: its even split
    # asserts trainers % partitions == 0), in DistDGL's ids; per type on a heterograph.
    if len(g.ntypes) == 1:
        train: Any = _mask_ids(g.ndata["train_mask"])
        feat: Any = g.ndata["feat"]
        shapes = {g.ntypes[0]: list(feat.shape)}
        num_train = len(train)
    else:  # input nodes and features are {ntype: ...}; featureless types have no rows to pull
        train = {nt: _mask_ids(g.nodes[nt].data["train_mask"]) for nt in g.ntypes if "train_mask" in g.nodes[nt].data}
        feat = {nt: g.nodes[nt].data["feat"] for nt in g.ntypes if "feat" in g.nodes[nt].data}
        shapes = {nt: list(t.shape) for nt, t in feat.items()}
        num_train = sum(len(ids) for ids in train.values())
    sampler = dgl.dataloading.NeighborSampler(fanouts)
    if negatives:
        loader, num_train = _edge_loader(g, sampler, batch_size, negatives)
    else:
        loader = dgl.dataloading.DistNodeDataLoader(
            g, train, sampler, batch_size=batch_size, shuffle=True, drop_last=False
        )
    run: Callable[[Any, int], tuple[int, dict[str, list[int]]]] = functools.partial(_minibatches, feat=feat)
    if rgcn is not None:
        from graphfeed.bench.distdgl_rgcn import rgcn_trainer

        (target,) = train  # a typed graph with one seed type
        run = rgcn_trainer(g, feat, target, num_layers=len(fanouts), **rgcn)
    print(json.dumps({"train": num_train, "feat": shapes}), file=answers)
    while (line := sys.stdin.readline().split()) and line[0] == "run":
        started = time.perf_counter()
        edges, rows = run(loader, int(line[1]))
        print(json.dumps({"seconds": time.perf_counter() - started, "edges": edges, "rows": rows}), file=answers)
    dgl.distributed.exit_client()  # the barrier, then a shutdown request to every server


def _edge_loader(g: Any, sampler: Any, batch_size: int, negatives: int) -> tuple[Any, int]:
    """``DistEdgeDataLoader`` over the train edges of ``edges.pt`` (next to ``DGL_CONF_PATH``)
    with ``Uniform(negatives)``, and how many train edges; exclusion as the module says
    (nominal in DGL 2.1)."""
    import dgl
    import torch

    e = torch.load(Path(os.environ["DGL_CONF_PATH"]).parent / "edges.pt")
    kwargs: dict[str, Any] = {"exclude": "self"}
    train = e["train"]
    if e["etype"] is None:  # every seed maps to its twin (itself where it has none)
        reverse = torch.arange(g.num_edges(), dtype=torch.int64)
        has = e["twin"] >= 0
        reverse[train[has]] = e["twin"][has]
        kwargs = {"exclude": "reverse_id", "reverse_eids": reverse}
    else:
        train = {tuple(e["etype"]): train}
    loader = dgl.dataloading.DistEdgeDataLoader(
        g,
        train,
        sampler,
        negative_sampler=dgl.dataloading.negative_sampler.Uniform(negatives),
        batch_size=batch_size,
        shuffle=True,
        drop_last=False,
        **kwargs,
    )
    return loader, len(e["train"])


def _mask_ids(mask: Any) -> Any:
    """The ids whose entry of a boolean ``DistTensor`` is set."""
    return mask[0 : len(mask)].nonzero().squeeze(1)


def _minibatches(loader: Any, steps: int, feat: Any) -> tuple[int, dict[str, list[int]]]:
    """Samples ``steps`` minibatches and pulls their input features (local rows from shared
    memory, remote rows over RPC); returns the block edges and, by node type (DGL's ``_N`` on a
    homogeneous graph), the shape of all the feature rows pulled."""
    edges = done = 0
    rows: dict[str, list[int]] = {}

    def pulled(nt: str, x: Any) -> None:
        rows[nt] = [rows.get(nt, [0])[0] + x.shape[0], *x.shape[1:]]

    while done < steps:
        for batch in loader:  # a new shuffled epoch on each pass; an edge loader's batch has 4 parts
            input_nodes, blocks = batch[0], batch[-1]
            edges += sum(b.num_edges() for b in blocks)
            if isinstance(feat, dict):
                for nt, table in feat.items():
                    if nt in input_nodes:
                        pulled(nt, table[input_nodes[nt]])
            else:
                pulled("_N", feat[input_nodes])
            done += 1
            if done == steps:
                break
    return edges, rows


def main(argv: list[str]) -> int:
    import argparse

    p = argparse.ArgumentParser(
        prog="python -m graphfeed.bench.distdgl", description="one DistDGL process (started by DistDGLSystem)"
    )
    p.add_argument("role", choices=("server", "trainer"))
    p.add_argument("--ip-config", required=True)
    p.add_argument("--fanouts", type=int, nargs="+", default=[15, 10, 5])
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--num-negatives", type=int, default=0, help="edge mode: DistEdgeDataLoader, k negatives each")
    p.add_argument("--rgcn", action="store_true", help="also train an RGCN with DistEmbedding (typed graphs)")
    p.add_argument("--hidden", type=int, default=64, help="--rgcn: hidden units = embedding width")
    p.add_argument("--lr", type=float, default=0.01, help="--rgcn: learning rate (Adam, SparseAdam)")
    p.add_argument("--num-classes", type=int, default=16, help="--rgcn: classes of the random labels")
    args = p.parse_args(argv)
    if args.role == "server":
        _serve(args.ip_config)
    else:
        rgcn = {"hidden": args.hidden, "lr": args.lr, "num_classes": args.num_classes} if args.rgcn else None
        _train(args.ip_config, args.fanouts, args.batch_size, rgcn, args.num_negatives)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
