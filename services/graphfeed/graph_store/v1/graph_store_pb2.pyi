from graphfeed.common.v1 import tensor_pb2 as _tensor_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class TemporalStrategy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TEMPORAL_STRATEGY_UNSPECIFIED: _ClassVar[TemporalStrategy]
    TEMPORAL_STRATEGY_RECENT: _ClassVar[TemporalStrategy]
    TEMPORAL_STRATEGY_UNIFORM: _ClassVar[TemporalStrategy]

class EmbeddingOptimizer(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EMBEDDING_OPTIMIZER_UNSPECIFIED: _ClassVar[EmbeddingOptimizer]
    EMBEDDING_OPTIMIZER_ADAGRAD: _ClassVar[EmbeddingOptimizer]
    EMBEDDING_OPTIMIZER_ADAM: _ClassVar[EmbeddingOptimizer]
TEMPORAL_STRATEGY_UNSPECIFIED: TemporalStrategy
TEMPORAL_STRATEGY_RECENT: TemporalStrategy
TEMPORAL_STRATEGY_UNIFORM: TemporalStrategy
EMBEDDING_OPTIMIZER_UNSPECIFIED: EmbeddingOptimizer
EMBEDDING_OPTIMIZER_ADAGRAD: EmbeddingOptimizer
EMBEDDING_OPTIMIZER_ADAM: EmbeddingOptimizer

class GetPartitionInfoRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class NodeDataSchema(_message.Message):
    __slots__ = ("name", "dtype", "row_shape", "ntype")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    ROW_SHAPE_FIELD_NUMBER: _ClassVar[int]
    NTYPE_FIELD_NUMBER: _ClassVar[int]
    name: str
    dtype: _tensor_pb2.DType
    row_shape: _containers.RepeatedScalarFieldContainer[int]
    ntype: str
    def __init__(self, name: _Optional[str] = ..., dtype: _Optional[_Union[_tensor_pb2.DType, str]] = ..., row_shape: _Optional[_Iterable[int]] = ..., ntype: _Optional[str] = ...) -> None: ...

class GetPartitionInfoResponse(_message.Message):
    __slots__ = ("partition_id", "num_partitions", "num_nodes", "num_edges", "node_offsets", "node_data", "num_classes", "dataset", "schema_version", "num_local_edges", "num_halo_nodes", "graph_version", "types")
    PARTITION_ID_FIELD_NUMBER: _ClassVar[int]
    NUM_PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    NUM_NODES_FIELD_NUMBER: _ClassVar[int]
    NUM_EDGES_FIELD_NUMBER: _ClassVar[int]
    NODE_OFFSETS_FIELD_NUMBER: _ClassVar[int]
    NODE_DATA_FIELD_NUMBER: _ClassVar[int]
    NUM_CLASSES_FIELD_NUMBER: _ClassVar[int]
    DATASET_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_VERSION_FIELD_NUMBER: _ClassVar[int]
    NUM_LOCAL_EDGES_FIELD_NUMBER: _ClassVar[int]
    NUM_HALO_NODES_FIELD_NUMBER: _ClassVar[int]
    GRAPH_VERSION_FIELD_NUMBER: _ClassVar[int]
    TYPES_FIELD_NUMBER: _ClassVar[int]
    partition_id: int
    num_partitions: int
    num_nodes: int
    num_edges: int
    node_offsets: _containers.RepeatedScalarFieldContainer[int]
    node_data: _containers.RepeatedCompositeFieldContainer[NodeDataSchema]
    num_classes: int
    dataset: str
    schema_version: int
    num_local_edges: int
    num_halo_nodes: int
    graph_version: str
    types: _tensor_pb2.GraphTypes
    def __init__(self, partition_id: _Optional[int] = ..., num_partitions: _Optional[int] = ..., num_nodes: _Optional[int] = ..., num_edges: _Optional[int] = ..., node_offsets: _Optional[_Iterable[int]] = ..., node_data: _Optional[_Iterable[_Union[NodeDataSchema, _Mapping]]] = ..., num_classes: _Optional[int] = ..., dataset: _Optional[str] = ..., schema_version: _Optional[int] = ..., num_local_edges: _Optional[int] = ..., num_halo_nodes: _Optional[int] = ..., graph_version: _Optional[str] = ..., types: _Optional[_Union[_tensor_pb2.GraphTypes, _Mapping]] = ...) -> None: ...

class SampleNeighborsRequest(_message.Message):
    __slots__ = ("seeds", "fanout", "replace", "rng_seed", "first_position", "etype_fanouts", "exclude_dst", "exclude_eids")
    SEEDS_FIELD_NUMBER: _ClassVar[int]
    FANOUT_FIELD_NUMBER: _ClassVar[int]
    REPLACE_FIELD_NUMBER: _ClassVar[int]
    RNG_SEED_FIELD_NUMBER: _ClassVar[int]
    FIRST_POSITION_FIELD_NUMBER: _ClassVar[int]
    ETYPE_FANOUTS_FIELD_NUMBER: _ClassVar[int]
    EXCLUDE_DST_FIELD_NUMBER: _ClassVar[int]
    EXCLUDE_EIDS_FIELD_NUMBER: _ClassVar[int]
    seeds: _tensor_pb2.Tensor
    fanout: int
    replace: bool
    rng_seed: int
    first_position: int
    etype_fanouts: _containers.RepeatedScalarFieldContainer[int]
    exclude_dst: _tensor_pb2.Tensor
    exclude_eids: _tensor_pb2.Tensor
    def __init__(self, seeds: _Optional[_Union[_tensor_pb2.Tensor, _Mapping]] = ..., fanout: _Optional[int] = ..., replace: bool = ..., rng_seed: _Optional[int] = ..., first_position: _Optional[int] = ..., etype_fanouts: _Optional[_Iterable[int]] = ..., exclude_dst: _Optional[_Union[_tensor_pb2.Tensor, _Mapping]] = ..., exclude_eids: _Optional[_Union[_tensor_pb2.Tensor, _Mapping]] = ...) -> None: ...

class SampleNeighborsResponse(_message.Message):
    __slots__ = ("offsets", "src", "edge_ids", "bulk_ticket", "bulk_bytes", "bulk")
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    SRC_FIELD_NUMBER: _ClassVar[int]
    EDGE_IDS_FIELD_NUMBER: _ClassVar[int]
    BULK_TICKET_FIELD_NUMBER: _ClassVar[int]
    BULK_BYTES_FIELD_NUMBER: _ClassVar[int]
    BULK_FIELD_NUMBER: _ClassVar[int]
    offsets: _tensor_pb2.Tensor
    src: _tensor_pb2.Tensor
    edge_ids: _tensor_pb2.Tensor
    bulk_ticket: _tensor_pb2.BulkTicket
    bulk_bytes: int
    bulk: bytes
    def __init__(self, offsets: _Optional[_Union[_tensor_pb2.Tensor, _Mapping]] = ..., src: _Optional[_Union[_tensor_pb2.Tensor, _Mapping]] = ..., edge_ids: _Optional[_Union[_tensor_pb2.Tensor, _Mapping]] = ..., bulk_ticket: _Optional[_Union[_tensor_pb2.BulkTicket, _Mapping]] = ..., bulk_bytes: _Optional[int] = ..., bulk: _Optional[bytes] = ...) -> None: ...

class GetNodeDataRequest(_message.Message):
    __slots__ = ("name", "ids", "target")
    NAME_FIELD_NUMBER: _ClassVar[int]
    IDS_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    name: str
    ids: _tensor_pb2.Tensor
    target: NodeDataTarget
    def __init__(self, name: _Optional[str] = ..., ids: _Optional[_Union[_tensor_pb2.Tensor, _Mapping]] = ..., target: _Optional[_Union[NodeDataTarget, _Mapping]] = ...) -> None: ...

class NodeDataTarget(_message.Message):
    __slots__ = ("segment", "offset", "num_rows", "positions")
    SEGMENT_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    NUM_ROWS_FIELD_NUMBER: _ClassVar[int]
    POSITIONS_FIELD_NUMBER: _ClassVar[int]
    segment: str
    offset: int
    num_rows: int
    positions: _tensor_pb2.Tensor
    def __init__(self, segment: _Optional[str] = ..., offset: _Optional[int] = ..., num_rows: _Optional[int] = ..., positions: _Optional[_Union[_tensor_pb2.Tensor, _Mapping]] = ...) -> None: ...

class GetNodeDataResponse(_message.Message):
    __slots__ = ("start", "rows", "rows_written", "bulk_ticket", "bulk_bytes", "bulk")
    START_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    ROWS_WRITTEN_FIELD_NUMBER: _ClassVar[int]
    BULK_TICKET_FIELD_NUMBER: _ClassVar[int]
    BULK_BYTES_FIELD_NUMBER: _ClassVar[int]
    BULK_FIELD_NUMBER: _ClassVar[int]
    start: int
    rows: _tensor_pb2.Tensor
    rows_written: int
    bulk_ticket: _tensor_pb2.BulkTicket
    bulk_bytes: int
    bulk: bytes
    def __init__(self, start: _Optional[int] = ..., rows: _Optional[_Union[_tensor_pb2.Tensor, _Mapping]] = ..., rows_written: _Optional[int] = ..., bulk_ticket: _Optional[_Union[_tensor_pb2.BulkTicket, _Mapping]] = ..., bulk_bytes: _Optional[int] = ..., bulk: _Optional[bytes] = ...) -> None: ...

class GetDegreesRequest(_message.Message):
    __slots__ = ("ids",)
    IDS_FIELD_NUMBER: _ClassVar[int]
    ids: _tensor_pb2.Tensor
    def __init__(self, ids: _Optional[_Union[_tensor_pb2.Tensor, _Mapping]] = ...) -> None: ...

class GetDegreesResponse(_message.Message):
    __slots__ = ("degrees",)
    DEGREES_FIELD_NUMBER: _ClassVar[int]
    degrees: _tensor_pb2.Tensor
    def __init__(self, degrees: _Optional[_Union[_tensor_pb2.Tensor, _Mapping]] = ...) -> None: ...

class GetSplitRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class GetSplitResponse(_message.Message):
    __slots__ = ("ids",)
    IDS_FIELD_NUMBER: _ClassVar[int]
    ids: _tensor_pb2.Tensor
    def __init__(self, ids: _Optional[_Union[_tensor_pb2.Tensor, _Mapping]] = ...) -> None: ...

class AppendEdgesRequest(_message.Message):
    __slots__ = ("batch_id", "src", "dst", "t", "edge_feat")
    BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    SRC_FIELD_NUMBER: _ClassVar[int]
    DST_FIELD_NUMBER: _ClassVar[int]
    T_FIELD_NUMBER: _ClassVar[int]
    EDGE_FEAT_FIELD_NUMBER: _ClassVar[int]
    batch_id: str
    src: _tensor_pb2.Tensor
    dst: _tensor_pb2.Tensor
    t: _tensor_pb2.Tensor
    edge_feat: _tensor_pb2.Tensor
    def __init__(self, batch_id: _Optional[str] = ..., src: _Optional[_Union[_tensor_pb2.Tensor, _Mapping]] = ..., dst: _Optional[_Union[_tensor_pb2.Tensor, _Mapping]] = ..., t: _Optional[_Union[_tensor_pb2.Tensor, _Mapping]] = ..., edge_feat: _Optional[_Union[_tensor_pb2.Tensor, _Mapping]] = ...) -> None: ...

class AppendEdgesResponse(_message.Message):
    __slots__ = ("first_eid", "num_edges", "duplicate", "visible_seq", "appended")
    FIRST_EID_FIELD_NUMBER: _ClassVar[int]
    NUM_EDGES_FIELD_NUMBER: _ClassVar[int]
    DUPLICATE_FIELD_NUMBER: _ClassVar[int]
    VISIBLE_SEQ_FIELD_NUMBER: _ClassVar[int]
    APPENDED_FIELD_NUMBER: _ClassVar[int]
    first_eid: int
    num_edges: int
    duplicate: bool
    visible_seq: int
    appended: int
    def __init__(self, first_eid: _Optional[int] = ..., num_edges: _Optional[int] = ..., duplicate: bool = ..., visible_seq: _Optional[int] = ..., appended: _Optional[int] = ...) -> None: ...

class SampleTemporalRequest(_message.Message):
    __slots__ = ("nodes", "times", "fanout", "strategy", "rng_seed", "first_position", "with_features", "as_of_appended")
    NODES_FIELD_NUMBER: _ClassVar[int]
    TIMES_FIELD_NUMBER: _ClassVar[int]
    FANOUT_FIELD_NUMBER: _ClassVar[int]
    STRATEGY_FIELD_NUMBER: _ClassVar[int]
    RNG_SEED_FIELD_NUMBER: _ClassVar[int]
    FIRST_POSITION_FIELD_NUMBER: _ClassVar[int]
    WITH_FEATURES_FIELD_NUMBER: _ClassVar[int]
    AS_OF_APPENDED_FIELD_NUMBER: _ClassVar[int]
    nodes: _tensor_pb2.Tensor
    times: _tensor_pb2.Tensor
    fanout: int
    strategy: TemporalStrategy
    rng_seed: int
    first_position: int
    with_features: bool
    as_of_appended: int
    def __init__(self, nodes: _Optional[_Union[_tensor_pb2.Tensor, _Mapping]] = ..., times: _Optional[_Union[_tensor_pb2.Tensor, _Mapping]] = ..., fanout: _Optional[int] = ..., strategy: _Optional[_Union[TemporalStrategy, str]] = ..., rng_seed: _Optional[int] = ..., first_position: _Optional[int] = ..., with_features: bool = ..., as_of_appended: _Optional[int] = ...) -> None: ...

class SampleTemporalResponse(_message.Message):
    __slots__ = ("offsets", "nbr", "ts", "eid", "edge_feat", "bulk_ticket", "bulk_bytes", "bulk")
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    NBR_FIELD_NUMBER: _ClassVar[int]
    TS_FIELD_NUMBER: _ClassVar[int]
    EID_FIELD_NUMBER: _ClassVar[int]
    EDGE_FEAT_FIELD_NUMBER: _ClassVar[int]
    BULK_TICKET_FIELD_NUMBER: _ClassVar[int]
    BULK_BYTES_FIELD_NUMBER: _ClassVar[int]
    BULK_FIELD_NUMBER: _ClassVar[int]
    offsets: _tensor_pb2.Tensor
    nbr: _tensor_pb2.Tensor
    ts: _tensor_pb2.Tensor
    eid: _tensor_pb2.Tensor
    edge_feat: _tensor_pb2.Tensor
    bulk_ticket: _tensor_pb2.BulkTicket
    bulk_bytes: int
    bulk: bytes
    def __init__(self, offsets: _Optional[_Union[_tensor_pb2.Tensor, _Mapping]] = ..., nbr: _Optional[_Union[_tensor_pb2.Tensor, _Mapping]] = ..., ts: _Optional[_Union[_tensor_pb2.Tensor, _Mapping]] = ..., eid: _Optional[_Union[_tensor_pb2.Tensor, _Mapping]] = ..., edge_feat: _Optional[_Union[_tensor_pb2.Tensor, _Mapping]] = ..., bulk_ticket: _Optional[_Union[_tensor_pb2.BulkTicket, _Mapping]] = ..., bulk_bytes: _Optional[int] = ..., bulk: _Optional[bytes] = ...) -> None: ...

class GetTemporalInfoRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetTemporalInfoResponse(_message.Message):
    __slots__ = ("num_edges", "num_appended", "num_rows", "num_blocks", "has_edges", "min_t", "max_t", "edge_feat_dim", "seq")
    NUM_EDGES_FIELD_NUMBER: _ClassVar[int]
    NUM_APPENDED_FIELD_NUMBER: _ClassVar[int]
    NUM_ROWS_FIELD_NUMBER: _ClassVar[int]
    NUM_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    HAS_EDGES_FIELD_NUMBER: _ClassVar[int]
    MIN_T_FIELD_NUMBER: _ClassVar[int]
    MAX_T_FIELD_NUMBER: _ClassVar[int]
    EDGE_FEAT_DIM_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    num_edges: int
    num_appended: int
    num_rows: int
    num_blocks: int
    has_edges: bool
    min_t: int
    max_t: int
    edge_feat_dim: int
    seq: int
    def __init__(self, num_edges: _Optional[int] = ..., num_appended: _Optional[int] = ..., num_rows: _Optional[int] = ..., num_blocks: _Optional[int] = ..., has_edges: bool = ..., min_t: _Optional[int] = ..., max_t: _Optional[int] = ..., edge_feat_dim: _Optional[int] = ..., seq: _Optional[int] = ...) -> None: ...

class StepKey(_message.Message):
    __slots__ = ("epoch", "step")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    step: int
    def __init__(self, epoch: _Optional[int] = ..., step: _Optional[int] = ...) -> None: ...

class EmbeddingSpec(_message.Message):
    __slots__ = ("name", "ntype", "dim", "job", "optimizer", "lr", "eps", "beta1", "beta2", "init_low", "init_high", "seed")
    NAME_FIELD_NUMBER: _ClassVar[int]
    NTYPE_FIELD_NUMBER: _ClassVar[int]
    DIM_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    OPTIMIZER_FIELD_NUMBER: _ClassVar[int]
    LR_FIELD_NUMBER: _ClassVar[int]
    EPS_FIELD_NUMBER: _ClassVar[int]
    BETA1_FIELD_NUMBER: _ClassVar[int]
    BETA2_FIELD_NUMBER: _ClassVar[int]
    INIT_LOW_FIELD_NUMBER: _ClassVar[int]
    INIT_HIGH_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    name: str
    ntype: str
    dim: int
    job: str
    optimizer: EmbeddingOptimizer
    lr: float
    eps: float
    beta1: float
    beta2: float
    init_low: float
    init_high: float
    seed: int
    def __init__(self, name: _Optional[str] = ..., ntype: _Optional[str] = ..., dim: _Optional[int] = ..., job: _Optional[str] = ..., optimizer: _Optional[_Union[EmbeddingOptimizer, str]] = ..., lr: _Optional[float] = ..., eps: _Optional[float] = ..., beta1: _Optional[float] = ..., beta2: _Optional[float] = ..., init_low: _Optional[float] = ..., init_high: _Optional[float] = ..., seed: _Optional[int] = ...) -> None: ...

class CreateEmbeddingRequest(_message.Message):
    __slots__ = ("spec",)
    SPEC_FIELD_NUMBER: _ClassVar[int]
    spec: EmbeddingSpec
    def __init__(self, spec: _Optional[_Union[EmbeddingSpec, _Mapping]] = ...) -> None: ...

class CreateEmbeddingResponse(_message.Message):
    __slots__ = ("created", "first_id", "num_rows", "applied")
    CREATED_FIELD_NUMBER: _ClassVar[int]
    FIRST_ID_FIELD_NUMBER: _ClassVar[int]
    NUM_ROWS_FIELD_NUMBER: _ClassVar[int]
    APPLIED_FIELD_NUMBER: _ClassVar[int]
    created: bool
    first_id: int
    num_rows: int
    applied: StepKey
    def __init__(self, created: bool = ..., first_id: _Optional[int] = ..., num_rows: _Optional[int] = ..., applied: _Optional[_Union[StepKey, _Mapping]] = ...) -> None: ...

class PullEmbeddingRequest(_message.Message):
    __slots__ = ("name", "ids", "after")
    NAME_FIELD_NUMBER: _ClassVar[int]
    IDS_FIELD_NUMBER: _ClassVar[int]
    AFTER_FIELD_NUMBER: _ClassVar[int]
    name: str
    ids: _tensor_pb2.Tensor
    after: StepKey
    def __init__(self, name: _Optional[str] = ..., ids: _Optional[_Union[_tensor_pb2.Tensor, _Mapping]] = ..., after: _Optional[_Union[StepKey, _Mapping]] = ...) -> None: ...

class PullEmbeddingResponse(_message.Message):
    __slots__ = ("start", "rows", "bulk_ticket", "bulk_bytes", "bulk")
    START_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    BULK_TICKET_FIELD_NUMBER: _ClassVar[int]
    BULK_BYTES_FIELD_NUMBER: _ClassVar[int]
    BULK_FIELD_NUMBER: _ClassVar[int]
    start: int
    rows: _tensor_pb2.Tensor
    bulk_ticket: _tensor_pb2.BulkTicket
    bulk_bytes: int
    bulk: bytes
    def __init__(self, start: _Optional[int] = ..., rows: _Optional[_Union[_tensor_pb2.Tensor, _Mapping]] = ..., bulk_ticket: _Optional[_Union[_tensor_pb2.BulkTicket, _Mapping]] = ..., bulk_bytes: _Optional[int] = ..., bulk: _Optional[bytes] = ...) -> None: ...

class PushEmbeddingGradRequest(_message.Message):
    __slots__ = ("name", "job", "step", "rank", "world_size", "ids", "grads")
    NAME_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    WORLD_SIZE_FIELD_NUMBER: _ClassVar[int]
    IDS_FIELD_NUMBER: _ClassVar[int]
    GRADS_FIELD_NUMBER: _ClassVar[int]
    name: str
    job: str
    step: StepKey
    rank: int
    world_size: int
    ids: _tensor_pb2.Tensor
    grads: _tensor_pb2.Tensor
    def __init__(self, name: _Optional[str] = ..., job: _Optional[str] = ..., step: _Optional[_Union[StepKey, _Mapping]] = ..., rank: _Optional[int] = ..., world_size: _Optional[int] = ..., ids: _Optional[_Union[_tensor_pb2.Tensor, _Mapping]] = ..., grads: _Optional[_Union[_tensor_pb2.Tensor, _Mapping]] = ...) -> None: ...

class PushEmbeddingGradResponse(_message.Message):
    __slots__ = ("duplicate", "applied", "pending_ranks")
    DUPLICATE_FIELD_NUMBER: _ClassVar[int]
    APPLIED_FIELD_NUMBER: _ClassVar[int]
    PENDING_RANKS_FIELD_NUMBER: _ClassVar[int]
    duplicate: bool
    applied: StepKey
    pending_ranks: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, duplicate: bool = ..., applied: _Optional[_Union[StepKey, _Mapping]] = ..., pending_ranks: _Optional[_Iterable[int]] = ...) -> None: ...

class SnapshotEmbeddingRequest(_message.Message):
    __slots__ = ("name", "step")
    NAME_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    name: str
    step: StepKey
    def __init__(self, name: _Optional[str] = ..., step: _Optional[_Union[StepKey, _Mapping]] = ...) -> None: ...

class SnapshotEmbeddingResponse(_message.Message):
    __slots__ = ("created",)
    CREATED_FIELD_NUMBER: _ClassVar[int]
    created: bool
    def __init__(self, created: bool = ...) -> None: ...

class RestoreEmbeddingRequest(_message.Message):
    __slots__ = ("name", "step")
    NAME_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    name: str
    step: StepKey
    def __init__(self, name: _Optional[str] = ..., step: _Optional[_Union[StepKey, _Mapping]] = ...) -> None: ...

class RestoreEmbeddingResponse(_message.Message):
    __slots__ = ("applied",)
    APPLIED_FIELD_NUMBER: _ClassVar[int]
    applied: StepKey
    def __init__(self, applied: _Optional[_Union[StepKey, _Mapping]] = ...) -> None: ...
