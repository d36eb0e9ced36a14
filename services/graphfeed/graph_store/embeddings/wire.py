"""Embedding values to and from graph_store.proto's messages (the servicer's and client's
shared translations; no logic)."""

from __future__ import annotations

from graphfeed.common.errors import InvalidArgument
from graphfeed.graph_store.embeddings.store import TableInfo
from graphfeed.graph_store.embeddings.types import NO_STEP, EmbeddingSpec, PushAck, StepKey
from graphfeed.graph_store.v1 import graph_store_pb2 as pb

_OPTIMIZERS = {pb.EMBEDDING_OPTIMIZER_ADAGRAD: "adagrad", pb.EMBEDDING_OPTIMIZER_ADAM: "adam"}
_OPTIMIZER_ENUMS = {v: k for k, v in _OPTIMIZERS.items()}


def key_to_proto(key: StepKey | None, msg: pb.StepKey) -> None:
    """Fills ``msg`` with ``key`` (None leaves it unset)."""
    if key is not None:
        msg.epoch, msg.step = key.epoch, key.step


def key_from_proto(msg: pb.StepKey) -> StepKey:
    return StepKey(int(msg.epoch), int(msg.step))


def optional_key(parent: object, field: str) -> StepKey | None:
    """The step in ``parent.field``, or None when the field is unset."""
    return key_from_proto(getattr(parent, field)) if parent.HasField(field) else None  # type: ignore[attr-defined]


def spec_to_proto(spec: EmbeddingSpec) -> pb.EmbeddingSpec:
    fields = spec.to_dict()
    fields["optimizer"] = _OPTIMIZER_ENUMS.get(spec.optimizer, pb.EMBEDDING_OPTIMIZER_UNSPECIFIED)
    return pb.EmbeddingSpec(**fields)


def spec_from_proto(msg: pb.EmbeddingSpec) -> EmbeddingSpec:
    """The spec a request names (InvalidArgument for an unspecified optimizer)."""
    if msg.optimizer not in _OPTIMIZERS:
        raise InvalidArgument(
            f"embedding {msg.name!r}: optimizer must be EMBEDDING_OPTIMIZER_ADAGRAD or _ADAM, got {msg.optimizer}"
        )
    return EmbeddingSpec(
        name=msg.name,
        ntype=msg.ntype,
        dim=int(msg.dim),
        job=msg.job,
        optimizer=_OPTIMIZERS[msg.optimizer],  # type: ignore[arg-type]
        lr=msg.lr,
        eps=msg.eps,
        beta1=msg.beta1,
        beta2=msg.beta2,
        init_low=msg.init_low,
        init_high=msg.init_high,
        seed=int(msg.seed),
    )


def created_to_proto(info: TableInfo) -> pb.CreateEmbeddingResponse:
    resp = pb.CreateEmbeddingResponse(created=info.created, first_id=info.lo, num_rows=info.hi - info.lo)
    key_to_proto(info.applied, resp.applied)
    return resp


def ack_to_proto(ack: PushAck) -> pb.PushEmbeddingGradResponse:
    resp = pb.PushEmbeddingGradResponse(duplicate=ack.duplicate, pending_ranks=list(ack.pending_ranks))
    key_to_proto(ack.applied, resp.applied)
    return resp


def ack_from_proto(resp: pb.PushEmbeddingGradResponse) -> PushAck:
    applied = key_from_proto(resp.applied) if resp.HasField("applied") else NO_STEP
    return PushAck(bool(resp.duplicate), applied, tuple(int(r) for r in resp.pending_ranks))
