"""Real gRPC servers of every service, started in this process on 127.0.0.1 port 0."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client import CollectorRegistry

from graphfeed.common.partition import GraphManifest, part_dir_name
from graphfeed.common.rpc import RunningServer


@dataclass
class InProcessCluster:
    graph_stores: list[RunningServer] = field(default_factory=list)
    sampler: RunningServer | None = None
    loader: RunningServer | None = None
    cores: list = field(default_factory=list)

    @classmethod
    def start(cls, data_dir: Path, **loader_overrides: object) -> InProcessCluster:
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
                srv, core = serve_store(
                    GraphStoreSettings(part_dir=Path(data_dir) / part_dir_name(p), port=0, metrics_port=-1), CollectorRegistry()
                )
                c.graph_stores.append(srv)
                c.cores.append(core)
            addrs = [s.address for s in c.graph_stores]
            c.sampler, core = serve_sampler(SamplerSettings(graph_store_addresses=addrs, port=0, metrics_port=-1), CollectorRegistry())
            c.cores.append(core)
            settings = LoaderSettings(
                graph_store_addresses=addrs, sampler_address=c.sampler.address, port=0, metrics_port=-1, **loader_overrides
            )
            c.loader, core = serve_loader(settings, CollectorRegistry())
            c.cores.append(core)
        except BaseException:
            c.stop()
            raise
        return c

    def stop(self) -> None:
        from graphfeed.loader.server import close_all

        for s in (self.loader, self.sampler, *self.graph_stores):
            if s is not None:
                s.stop(0.5)
        if len(self.cores) == len(self.graph_stores) + 2:
            close_all(self.cores[-1])
            self.cores[-2].partitions.close()
        for store in self.cores[: len(self.graph_stores)]:
            store.close()
