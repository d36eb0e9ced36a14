"""Reading a running service's Prometheus metrics from a benchmark."""

from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample


def samples(metrics_address: str, *names: str) -> list[Sample]:
    """The samples of the series ``names`` (e.g. ``graphfeed_rpc_shm_declined_total``) that the
    ``/metrics`` endpoint at ``metrics_address`` (host:port) serves now, one per label set."""
    text = urllib.request.urlopen(f"http://{metrics_address}/metrics", timeout=10).read().decode()
    return [s for family in text_string_to_metric_families(text) for s in family.samples if s.name in names]
