"""Real gRPC servers of every service, started in this process on 127.0.0.1 port 0."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from prometheus_client import CollectorRegistry

from graphfeed.common.partition import GraphManifest, part_dir_name
from graphfeed.common.rpc import RunningServer

if TYPE_CHECKING:
    from graphfeed.graph_store.store import GraphStore
    from graphfeed.loader.core import Loader
    from graphfeed.sampler.core import MultiHopSampler

_Core = TypeVar("_Core")


def _started(pair: tuple[RunningServer, _Core] | None, name: str) -> tuple[RunningServer, _Core]:
    if pair is None:
        raise RuntimeError(f"the in-process {name} is not running")
    return pair


class InProcessCluster:
    """graph-store ×P (one per partition), a sampler and a loader, each with its core object."""

    def __init__(self) -> None:
        self.graph_stores: list[RunningServer] = []
        self._stores: list[GraphStore] = []
        self._sampler: tuple[RunningServer, MultiHopSampler] | None = None
        self._loader: tuple[RunningServer, Loader] | None = None

    @property
    def sampler(self) -> RunningServer:
        """The sampler's server; raises RuntimeError before it started."""
        return _started(self._sampler, "sampler")[0]

    @property
    def loader(self) -> RunningServer:
        """The loader's server; raises RuntimeError before it started."""
        return _started(self._loader, "loader")[0]

    @classmethod
    def start(
        cls, data_dir: Path, store_overrides: dict[str, object] | None = None, **loader_overrides: object
    ) -> InProcessCluster:
        """Starts every server over the partitions in ``data_dir``; ``loader_overrides`` are
        extra LoaderSettings fields, ``store_overrides`` extra GraphStoreSettings fields
        (validated like any settings)."""
        from graphfeed.graph_store.config import GraphStoreSettings
        from graphfeed.graph_store.server import serve as serve_store
        from graphfeed.loader.config import LoaderSettings
        from graphfeed.loader.server import serve as serve_loader
        from graphfeed.sampler.config import SamplerSettings
        from graphfeed.sampler.server import serve as serve_sampler

        m = GraphManifest.load(data_dir)
        c = cls()
        try:
            for p in range(m.num_partitions):
                # model_validate runs BaseSettings.__init__ (env vars included), like the constructor.
                # No append log: a process cluster may serve the same partitions (and hold its lock).
                store_settings = GraphStoreSettings.model_validate(
                    {
                        "part_dir": Path(data_dir) / part_dir_name(p),
                        "port": 0,
                        "metrics_port": -1,
                        "append_dir": "",
                        **(store_overrides or {}),
                    }
                )
                srv, store = serve_store(store_settings, CollectorRegistry())
                c.graph_stores.append(srv)
                c._stores.append(store)
            addrs = [s.address for s in c.graph_stores]
            sampler_settings = SamplerSettings.model_validate(
                {"graph_store_addresses": addrs, "port": 0, "metrics_port": -1}
            )
            c._sampler = serve_sampler(sampler_settings, CollectorRegistry())
            loader_settings = LoaderSettings.model_validate(
                {
                    "graph_store_addresses": addrs,
                    "sampler_address": c.sampler.address,
                    "port": 0,
                    "metrics_port": -1,
                    **loader_overrides,
                }
            )
            c._loader = serve_loader(loader_settings, CollectorRegistry())
        except BaseException:
            c.stop()
            raise
        return c

    def stop(self) -> None:
        """Stops the servers (loader, sampler, graph-stores), then closes their cores."""
        from graphfeed.loader.server import close_all

        servers = [pair[0] for pair in (self._loader, self._sampler) if pair is not None]
        for s in (*servers, *self.graph_stores):
            s.stop(0.5)
        if self._loader is not None and self._sampler is not None:
            close_all(self._loader[1])
            self._sampler[1].partitions.close()
        for store in self._stores:
            store.close()
