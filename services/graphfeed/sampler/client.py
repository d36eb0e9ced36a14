"""Client of the sampler service: a :class:`~graphfeed.sampler.types.BlockSampler` over gRPC."""

from __future__ import annotations

import operator
from collections.abc import Sequence

import grpc
import numpy as np

from graphfeed.common import blocks, bulk, codec
from graphfeed.common.blocks import SampledBlocks
from graphfeed.common.errors import InvalidArgument, from_rpc_error
from graphfeed.common.rpc import client_channel
from graphfeed.common.transport import ClientTransport
from graphfeed.common.v1 import tensor_pb2
from graphfeed.graph_store.types import Exclusion, Fanout
from graphfeed.sampler.v1 import sampler_pb2 as pb


def encode_fanouts(fanouts: Sequence[Fanout]) -> tuple[list[int], list[int]]:
    """SampleBlocksRequest's ``fanouts`` and ``etype_fanouts`` for layers that are ints (every
    edge type) or sequences (one per edge type): with no sequence, ``(ints, [])``; else every
    layer flattened into ``etype_fanouts`` (an int repeated once per edge type, their count
    being the sequences' length) and ``fanouts[l]`` the largest of layer ``l``.

    Raises:
        InvalidArgument: a layer neither an int nor a sequence of ints, or sequences of
            different lengths.
    """
    layers: list[int | list[int]] = []
    for layer in fanouts:
        try:
            layers.append(operator.index(layer))  # type: ignore[arg-type]
            continue
        except TypeError:
            pass
        try:
            if isinstance(layer, (str, bytes)):
                raise TypeError
            layers.append([operator.index(f) for f in layer])  # type: ignore[union-attr]
        except TypeError:
            raise InvalidArgument(
                f"each layer of fanouts must be an integer or a sequence of integers (one per edge type), got {layer!r}"
            ) from None
    lengths = {len(x) for x in layers if isinstance(x, list)}
    if not lengths:
        return [x for x in layers if isinstance(x, int)], []
    if 0 in lengths:
        raise InvalidArgument("a layer of fanouts is an empty sequence; give one fanout per edge type (or one int)")
    if len(lengths) > 1:
        raise InvalidArgument(
            f"layers of fanouts give {sorted(lengths)} edge-type fanouts; each must give one per edge type"
        )
    (r,) = lengths
    flat = [f for x in layers for f in (x if isinstance(x, list) else [x] * r)]
    return [x if isinstance(x, int) else max(x, default=0) for x in layers], flat


class SamplerClient:
    """Samples through a sampler server; same semantics as the in-process ``MultiHopSampler``.

    Errors arrive as :class:`~graphfeed.common.errors.GraphfeedError` subclasses; UNAVAILABLE
    is retried a few times with backoff within the deadline (the channel's policy, see
    :func:`~graphfeed.common.rpc.client_channel`), which is safe because sampling is
    deterministic and side-effect free.

    Args:
        address: ``host:port`` of the sampler.
        timeout_s: deadline of each call, retries included, in seconds.
        shm_dir: shared-memory directory offered for the blocks ("" or None: inline bytes).
    """

    def __init__(self, address: str, timeout_s: float = 60.0, shm_dir: str | None = None) -> None:
        self.address = address
        self.timeout_s = timeout_s
        self._transport = ClientTransport(shm_dir, address)
        self._channel = client_channel(address, pb.DESCRIPTOR.services_by_name["SamplerService"], ["SampleBlocks"])
        name = pb.DESCRIPTOR.services_by_name["SamplerService"].full_name
        self._sample = bulk.unary_unary(
            self._channel, name, "SampleBlocks", pb.SampleBlocksRequest, pb.SampleBlocksResponse, self._transport.fetch
        )

    def sample(
        self,
        seeds: np.ndarray,
        fanouts: Sequence[Fanout],
        replace: bool,
        job_seed: int,
        epoch: int,
        step: int,
        *,
        exclude: Exclusion | None = None,
    ) -> SampledBlocks:
        """See :meth:`graphfeed.sampler.core.MultiHopSampler.sample` (a layer of ``fanouts`` is an
        int for every edge type or a sequence of one per edge type; ``exclude``, edges no hop
        samples, goes as given: the server checks it); arrays come back read-only."""
        req = pb.SampleBlocksRequest(replace=bool(replace))
        codec.encode(np.asarray(seeds), req.seeds)
        codec.encode_exclusion(exclude, req)
        layers, per_etype = encode_fanouts(fanouts)
        try:
            req.fanouts.extend(layers)
            req.etype_fanouts.extend(per_etype)
            req.step_key.CopyFrom(tensor_pb2.StepKey(job_seed=job_seed, epoch=epoch, step=step))
        except (TypeError, ValueError) as exc:  # out of the wire types' range (int32, uint64, uint32)
            raise InvalidArgument(f"cannot encode fanouts {list(fanouts)} / step key: {exc}") from None
        try:
            rec = self._sample(req, timeout=self.timeout_s, metadata=self._transport.metadata)
        except grpc.RpcError as err:
            raise from_rpc_error(err, f"sampler {self.address}") from None
        return blocks.from_proto(rec.message.blocks, self._transport.reader(), rec.bulk)

    def close(self) -> None:
        self._channel.close()
        self._transport.close()

    def __enter__(self) -> SamplerClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
