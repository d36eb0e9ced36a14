from graphfeed.common.v1 import tensor_pb2 as _tensor_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class SampleBlocksRequest(_message.Message):
    __slots__ = ("seeds", "fanouts", "replace", "step_key", "etype_fanouts", "exclude_dst", "exclude_eids")
    SEEDS_FIELD_NUMBER: _ClassVar[int]
    FANOUTS_FIELD_NUMBER: _ClassVar[int]
    REPLACE_FIELD_NUMBER: _ClassVar[int]
    STEP_KEY_FIELD_NUMBER: _ClassVar[int]
    ETYPE_FANOUTS_FIELD_NUMBER: _ClassVar[int]
    EXCLUDE_DST_FIELD_NUMBER: _ClassVar[int]
    EXCLUDE_EIDS_FIELD_NUMBER: _ClassVar[int]
    seeds: _tensor_pb2.Tensor
    fanouts: _containers.RepeatedScalarFieldContainer[int]
    replace: bool
    step_key: _tensor_pb2.StepKey
    etype_fanouts: _containers.RepeatedScalarFieldContainer[int]
    exclude_dst: _tensor_pb2.Tensor
    exclude_eids: _tensor_pb2.Tensor
    def __init__(self, seeds: _Optional[_Union[_tensor_pb2.Tensor, _Mapping]] = ..., fanouts: _Optional[_Iterable[int]] = ..., replace: bool = ..., step_key: _Optional[_Union[_tensor_pb2.StepKey, _Mapping]] = ..., etype_fanouts: _Optional[_Iterable[int]] = ..., exclude_dst: _Optional[_Union[_tensor_pb2.Tensor, _Mapping]] = ..., exclude_eids: _Optional[_Union[_tensor_pb2.Tensor, _Mapping]] = ...) -> None: ...

class SampleBlocksResponse(_message.Message):
    __slots__ = ("blocks", "bulk_ticket", "bulk_bytes", "bulk")
    BLOCKS_FIELD_NUMBER: _ClassVar[int]
    BULK_TICKET_FIELD_NUMBER: _ClassVar[int]
    BULK_BYTES_FIELD_NUMBER: _ClassVar[int]
    BULK_FIELD_NUMBER: _ClassVar[int]
    blocks: _tensor_pb2.SampledBlocks
    bulk_ticket: _tensor_pb2.BulkTicket
    bulk_bytes: int
    bulk: bytes
    def __init__(self, blocks: _Optional[_Union[_tensor_pb2.SampledBlocks, _Mapping]] = ..., bulk_ticket: _Optional[_Union[_tensor_pb2.BulkTicket, _Mapping]] = ..., bulk_bytes: _Optional[int] = ..., bulk: _Optional[bytes] = ...) -> None: ...
