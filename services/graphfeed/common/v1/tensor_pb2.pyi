from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class DType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DTYPE_UNSPECIFIED: _ClassVar[DType]
    DTYPE_BOOL: _ClassVar[DType]
    DTYPE_INT8: _ClassVar[DType]
    DTYPE_UINT8: _ClassVar[DType]
    DTYPE_INT16: _ClassVar[DType]
    DTYPE_INT32: _ClassVar[DType]
    DTYPE_INT64: _ClassVar[DType]
    DTYPE_FLOAT16: _ClassVar[DType]
    DTYPE_FLOAT32: _ClassVar[DType]
    DTYPE_FLOAT64: _ClassVar[DType]
    DTYPE_UINT16: _ClassVar[DType]
    DTYPE_UINT32: _ClassVar[DType]
    DTYPE_UINT64: _ClassVar[DType]
    DTYPE_BFLOAT16: _ClassVar[DType]
DTYPE_UNSPECIFIED: DType
DTYPE_BOOL: DType
DTYPE_INT8: DType
DTYPE_UINT8: DType
DTYPE_INT16: DType
DTYPE_INT32: DType
DTYPE_INT64: DType
DTYPE_FLOAT16: DType
DTYPE_FLOAT32: DType
DTYPE_FLOAT64: DType
DTYPE_UINT16: DType
DTYPE_UINT32: DType
DTYPE_UINT64: DType
DTYPE_BFLOAT16: DType

class Tensor(_message.Message):
    __slots__ = ("dtype", "shape", "data", "shm", "bulk")
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    SHM_FIELD_NUMBER: _ClassVar[int]
    BULK_FIELD_NUMBER: _ClassVar[int]
    dtype: DType
    shape: _containers.RepeatedScalarFieldContainer[int]
    data: bytes
    shm: ShmRef
    bulk: BulkRef
    def __init__(self, dtype: _Optional[_Union[DType, str]] = ..., shape: _Optional[_Iterable[int]] = ..., data: _Optional[bytes] = ..., shm: _Optional[_Union[ShmRef, _Mapping]] = ..., bulk: _Optional[_Union[BulkRef, _Mapping]] = ...) -> None: ...

class BulkRef(_message.Message):
    __slots__ = ("offset",)
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    offset: int
    def __init__(self, offset: _Optional[int] = ...) -> None: ...

class BulkTicket(_message.Message):
    __slots__ = ("ticket", "port", "host")
    TICKET_FIELD_NUMBER: _ClassVar[int]
    PORT_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    ticket: bytes
    port: int
    host: str
    def __init__(self, ticket: _Optional[bytes] = ..., port: _Optional[int] = ..., host: _Optional[str] = ...) -> None: ...

class ShmRef(_message.Message):
    __slots__ = ("segment", "offset", "recycle")
    SEGMENT_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    RECYCLE_FIELD_NUMBER: _ClassVar[int]
    segment: str
    offset: int
    recycle: bool
    def __init__(self, segment: _Optional[str] = ..., offset: _Optional[int] = ..., recycle: bool = ...) -> None: ...

class StepKey(_message.Message):
    __slots__ = ("job_seed", "epoch", "step")
    JOB_SEED_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    job_seed: int
    epoch: int
    step: int
    def __init__(self, job_seed: _Optional[int] = ..., epoch: _Optional[int] = ..., step: _Optional[int] = ...) -> None: ...

class Block(_message.Message):
    __slots__ = ("num_src", "num_dst", "edge_src", "edge_dst", "edge_ids")
    NUM_SRC_FIELD_NUMBER: _ClassVar[int]
    NUM_DST_FIELD_NUMBER: _ClassVar[int]
    EDGE_SRC_FIELD_NUMBER: _ClassVar[int]
    EDGE_DST_FIELD_NUMBER: _ClassVar[int]
    EDGE_IDS_FIELD_NUMBER: _ClassVar[int]
    num_src: int
    num_dst: int
    edge_src: Tensor
    edge_dst: Tensor
    edge_ids: Tensor
    def __init__(self, num_src: _Optional[int] = ..., num_dst: _Optional[int] = ..., edge_src: _Optional[_Union[Tensor, _Mapping]] = ..., edge_dst: _Optional[_Union[Tensor, _Mapping]] = ..., edge_ids: _Optional[_Union[Tensor, _Mapping]] = ...) -> None: ...

class SampledBlocks(_message.Message):
    __slots__ = ("input_nodes", "output_nodes", "blocks", "num_sampled_edges")
    INPUT_NODES_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_NODES_FIELD_NUMBER: _ClassVar[int]
    BLOCKS_FIELD_NUMBER: _ClassVar[int]
    NUM_SAMPLED_EDGES_FIELD_NUMBER: _ClassVar[int]
    input_nodes: Tensor
    output_nodes: Tensor
    blocks: _containers.RepeatedCompositeFieldContainer[Block]
    num_sampled_edges: int
    def __init__(self, input_nodes: _Optional[_Union[Tensor, _Mapping]] = ..., output_nodes: _Optional[_Union[Tensor, _Mapping]] = ..., blocks: _Optional[_Iterable[_Union[Block, _Mapping]]] = ..., num_sampled_edges: _Optional[int] = ...) -> None: ...

class CanonicalEdgeType(_message.Message):
    __slots__ = ("src_type", "relation", "dst_type")
    SRC_TYPE_FIELD_NUMBER: _ClassVar[int]
    RELATION_FIELD_NUMBER: _ClassVar[int]
    DST_TYPE_FIELD_NUMBER: _ClassVar[int]
    src_type: str
    relation: str
    dst_type: str
    def __init__(self, src_type: _Optional[str] = ..., relation: _Optional[str] = ..., dst_type: _Optional[str] = ...) -> None: ...

class GraphTypes(_message.Message):
    __slots__ = ("ntypes", "etypes", "ntype_offsets", "etype_offsets")
    NTYPES_FIELD_NUMBER: _ClassVar[int]
    ETYPES_FIELD_NUMBER: _ClassVar[int]
    NTYPE_OFFSETS_FIELD_NUMBER: _ClassVar[int]
    ETYPE_OFFSETS_FIELD_NUMBER: _ClassVar[int]
    ntypes: _containers.RepeatedScalarFieldContainer[str]
    etypes: _containers.RepeatedCompositeFieldContainer[CanonicalEdgeType]
    ntype_offsets: _containers.RepeatedScalarFieldContainer[int]
    etype_offsets: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, ntypes: _Optional[_Iterable[str]] = ..., etypes: _Optional[_Iterable[_Union[CanonicalEdgeType, _Mapping]]] = ..., ntype_offsets: _Optional[_Iterable[int]] = ..., etype_offsets: _Optional[_Iterable[int]] = ...) -> None: ...

class TypedTensor(_message.Message):
    __slots__ = ("ntype", "tensor")
    NTYPE_FIELD_NUMBER: _ClassVar[int]
    TENSOR_FIELD_NUMBER: _ClassVar[int]
    ntype: str
    tensor: Tensor
    def __init__(self, ntype: _Optional[str] = ..., tensor: _Optional[_Union[Tensor, _Mapping]] = ...) -> None: ...
