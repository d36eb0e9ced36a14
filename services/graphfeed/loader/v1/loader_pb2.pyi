from graphfeed.common.v1 import tensor_pb2 as _tensor_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class JobSpec(_message.Message):
    __slots__ = ("job_id", "job_seed", "split", "batch_size", "fanouts", "replace", "shuffle", "drop_last", "rank", "world_size", "feature_name", "label_name", "feature_wire_dtype", "etype_fanouts", "seed_edges", "num_negatives", "negative_sampler", "negatives_avoid_positives", "exclude", "skip_features")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_SEED_FIELD_NUMBER: _ClassVar[int]
    SPLIT_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    FANOUTS_FIELD_NUMBER: _ClassVar[int]
    REPLACE_FIELD_NUMBER: _ClassVar[int]
    SHUFFLE_FIELD_NUMBER: _ClassVar[int]
    DROP_LAST_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    WORLD_SIZE_FIELD_NUMBER: _ClassVar[int]
    FEATURE_NAME_FIELD_NUMBER: _ClassVar[int]
    LABEL_NAME_FIELD_NUMBER: _ClassVar[int]
    FEATURE_WIRE_DTYPE_FIELD_NUMBER: _ClassVar[int]
    ETYPE_FANOUTS_FIELD_NUMBER: _ClassVar[int]
    SEED_EDGES_FIELD_NUMBER: _ClassVar[int]
    NUM_NEGATIVES_FIELD_NUMBER: _ClassVar[int]
    NEGATIVE_SAMPLER_FIELD_NUMBER: _ClassVar[int]
    NEGATIVES_AVOID_POSITIVES_FIELD_NUMBER: _ClassVar[int]
    EXCLUDE_FIELD_NUMBER: _ClassVar[int]
    SKIP_FEATURES_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    job_seed: int
    split: str
    batch_size: int
    fanouts: _containers.RepeatedScalarFieldContainer[int]
    replace: bool
    shuffle: bool
    drop_last: bool
    rank: int
    world_size: int
    feature_name: str
    label_name: str
    feature_wire_dtype: str
    etype_fanouts: _containers.RepeatedCompositeFieldContainer[EtypeFanout]
    seed_edges: bool
    num_negatives: int
    negative_sampler: str
    negatives_avoid_positives: bool
    exclude: str
    skip_features: bool
    def __init__(self, job_id: _Optional[str] = ..., job_seed: _Optional[int] = ..., split: _Optional[str] = ..., batch_size: _Optional[int] = ..., fanouts: _Optional[_Iterable[int]] = ..., replace: bool = ..., shuffle: bool = ..., drop_last: bool = ..., rank: _Optional[int] = ..., world_size: _Optional[int] = ..., feature_name: _Optional[str] = ..., label_name: _Optional[str] = ..., feature_wire_dtype: _Optional[str] = ..., etype_fanouts: _Optional[_Iterable[_Union[EtypeFanout, _Mapping]]] = ..., seed_edges: bool = ..., num_negatives: _Optional[int] = ..., negative_sampler: _Optional[str] = ..., negatives_avoid_positives: bool = ..., exclude: _Optional[str] = ..., skip_features: bool = ...) -> None: ...

class EdgePairs(_message.Message):
    __slots__ = ("etype", "src", "dst", "eids", "neg_src", "neg_dst", "excluded_edges")
    ETYPE_FIELD_NUMBER: _ClassVar[int]
    SRC_FIELD_NUMBER: _ClassVar[int]
    DST_FIELD_NUMBER: _ClassVar[int]
    EIDS_FIELD_NUMBER: _ClassVar[int]
    NEG_SRC_FIELD_NUMBER: _ClassVar[int]
    NEG_DST_FIELD_NUMBER: _ClassVar[int]
    EXCLUDED_EDGES_FIELD_NUMBER: _ClassVar[int]
    etype: int
    src: _tensor_pb2.Tensor
    dst: _tensor_pb2.Tensor
    eids: _tensor_pb2.Tensor
    neg_src: _tensor_pb2.Tensor
    neg_dst: _tensor_pb2.Tensor
    excluded_edges: int
    def __init__(self, etype: _Optional[int] = ..., src: _Optional[_Union[_tensor_pb2.Tensor, _Mapping]] = ..., dst: _Optional[_Union[_tensor_pb2.Tensor, _Mapping]] = ..., eids: _Optional[_Union[_tensor_pb2.Tensor, _Mapping]] = ..., neg_src: _Optional[_Union[_tensor_pb2.Tensor, _Mapping]] = ..., neg_dst: _Optional[_Union[_tensor_pb2.Tensor, _Mapping]] = ..., excluded_edges: _Optional[int] = ...) -> None: ...

class EtypeFanout(_message.Message):
    __slots__ = ("layer", "etype", "fanout")
    LAYER_FIELD_NUMBER: _ClassVar[int]
    ETYPE_FIELD_NUMBER: _ClassVar[int]
    FANOUT_FIELD_NUMBER: _ClassVar[int]
    layer: int
    etype: str
    fanout: int
    def __init__(self, layer: _Optional[int] = ..., etype: _Optional[str] = ..., fanout: _Optional[int] = ...) -> None: ...

class DescribeJobRequest(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: JobSpec
    def __init__(self, job: _Optional[_Union[JobSpec, _Mapping]] = ...) -> None: ...

class DescribeJobResponse(_message.Message):
    __slots__ = ("steps_per_epoch", "seeds_per_epoch", "feature_row_shape", "feature_dtype", "num_classes", "num_nodes", "types", "typed_feature_shapes", "seed_etype")
    STEPS_PER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    SEEDS_PER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    FEATURE_ROW_SHAPE_FIELD_NUMBER: _ClassVar[int]
    FEATURE_DTYPE_FIELD_NUMBER: _ClassVar[int]
    NUM_CLASSES_FIELD_NUMBER: _ClassVar[int]
    NUM_NODES_FIELD_NUMBER: _ClassVar[int]
    TYPES_FIELD_NUMBER: _ClassVar[int]
    TYPED_FEATURE_SHAPES_FIELD_NUMBER: _ClassVar[int]
    SEED_ETYPE_FIELD_NUMBER: _ClassVar[int]
    steps_per_epoch: int
    seeds_per_epoch: int
    feature_row_shape: _containers.RepeatedScalarFieldContainer[int]
    feature_dtype: _tensor_pb2.DType
    num_classes: int
    num_nodes: int
    types: _tensor_pb2.GraphTypes
    typed_feature_shapes: _containers.RepeatedCompositeFieldContainer[TypedShape]
    seed_etype: str
    def __init__(self, steps_per_epoch: _Optional[int] = ..., seeds_per_epoch: _Optional[int] = ..., feature_row_shape: _Optional[_Iterable[int]] = ..., feature_dtype: _Optional[_Union[_tensor_pb2.DType, str]] = ..., num_classes: _Optional[int] = ..., num_nodes: _Optional[int] = ..., types: _Optional[_Union[_tensor_pb2.GraphTypes, _Mapping]] = ..., typed_feature_shapes: _Optional[_Iterable[_Union[TypedShape, _Mapping]]] = ..., seed_etype: _Optional[str] = ...) -> None: ...

class TypedShape(_message.Message):
    __slots__ = ("ntype", "row_shape")
    NTYPE_FIELD_NUMBER: _ClassVar[int]
    ROW_SHAPE_FIELD_NUMBER: _ClassVar[int]
    ntype: str
    row_shape: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, ntype: _Optional[str] = ..., row_shape: _Optional[_Iterable[int]] = ...) -> None: ...

class StreamMinibatchesRequest(_message.Message):
    __slots__ = ("job", "epoch", "start_step")
    JOB_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    START_STEP_FIELD_NUMBER: _ClassVar[int]
    job: JobSpec
    epoch: int
    start_step: int
    def __init__(self, job: _Optional[_Union[JobSpec, _Mapping]] = ..., epoch: _Optional[int] = ..., start_step: _Optional[int] = ...) -> None: ...

class MinibatchStats(_message.Message):
    __slots__ = ("cache_hits", "cache_misses", "remote_feature_bytes", "sample_seconds", "gather_seconds")
    CACHE_HITS_FIELD_NUMBER: _ClassVar[int]
    CACHE_MISSES_FIELD_NUMBER: _ClassVar[int]
    REMOTE_FEATURE_BYTES_FIELD_NUMBER: _ClassVar[int]
    SAMPLE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    GATHER_SECONDS_FIELD_NUMBER: _ClassVar[int]
    cache_hits: int
    cache_misses: int
    remote_feature_bytes: int
    sample_seconds: float
    gather_seconds: float
    def __init__(self, cache_hits: _Optional[int] = ..., cache_misses: _Optional[int] = ..., remote_feature_bytes: _Optional[int] = ..., sample_seconds: _Optional[float] = ..., gather_seconds: _Optional[float] = ...) -> None: ...

class Minibatch(_message.Message):
    __slots__ = ("step_key", "steps_per_epoch", "blocks", "input_features", "labels", "stats", "typed_features", "typed_labels", "pairs", "bulk_ticket", "bulk_bytes", "bulk")
    STEP_KEY_FIELD_NUMBER: _ClassVar[int]
    STEPS_PER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    BLOCKS_FIELD_NUMBER: _ClassVar[int]
    INPUT_FEATURES_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    STATS_FIELD_NUMBER: _ClassVar[int]
    TYPED_FEATURES_FIELD_NUMBER: _ClassVar[int]
    TYPED_LABELS_FIELD_NUMBER: _ClassVar[int]
    PAIRS_FIELD_NUMBER: _ClassVar[int]
    BULK_TICKET_FIELD_NUMBER: _ClassVar[int]
    BULK_BYTES_FIELD_NUMBER: _ClassVar[int]
    BULK_FIELD_NUMBER: _ClassVar[int]
    step_key: _tensor_pb2.StepKey
    steps_per_epoch: int
    blocks: _tensor_pb2.SampledBlocks
    input_features: _tensor_pb2.Tensor
    labels: _tensor_pb2.Tensor
    stats: MinibatchStats
    typed_features: _containers.RepeatedCompositeFieldContainer[_tensor_pb2.TypedTensor]
    typed_labels: _containers.RepeatedCompositeFieldContainer[_tensor_pb2.TypedTensor]
    pairs: EdgePairs
    bulk_ticket: _tensor_pb2.BulkTicket
    bulk_bytes: int
    bulk: bytes
    def __init__(self, step_key: _Optional[_Union[_tensor_pb2.StepKey, _Mapping]] = ..., steps_per_epoch: _Optional[int] = ..., blocks: _Optional[_Union[_tensor_pb2.SampledBlocks, _Mapping]] = ..., input_features: _Optional[_Union[_tensor_pb2.Tensor, _Mapping]] = ..., labels: _Optional[_Union[_tensor_pb2.Tensor, _Mapping]] = ..., stats: _Optional[_Union[MinibatchStats, _Mapping]] = ..., typed_features: _Optional[_Iterable[_Union[_tensor_pb2.TypedTensor, _Mapping]]] = ..., typed_labels: _Optional[_Iterable[_Union[_tensor_pb2.TypedTensor, _Mapping]]] = ..., pairs: _Optional[_Union[EdgePairs, _Mapping]] = ..., bulk_ticket: _Optional[_Union[_tensor_pb2.BulkTicket, _Mapping]] = ..., bulk_bytes: _Optional[int] = ..., bulk: _Optional[bytes] = ...) -> None: ...
