"""loader.proto's JobSpec <-> :class:`~graphfeed.loader.job.JobSpec`, field by field by name.

Both directions go over the dataclass's fields, so a field added to JobSpec (and to the proto,
under the same name) travels without touching this module. The proto's own semantics are
kept: a field with presence (``optional``, e.g. ``label_name``) that is unset takes JobSpec's
default, so "" can still mean "none"; a field marked ``proto_empty_is_default`` in JobSpec
(``feature_name``) takes the default when empty; every other field is taken as sent.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from graphfeed.loader.job import JobSpec
from graphfeed.loader.v1 import loader_pb2 as pb

__all__ = ["job_from_proto", "job_to_proto"]


_MESSAGES = {"etype_fanouts": (pb.EtypeFanout, ("layer", "etype", "fanout"))}
"""Repeated message fields: JobSpec holds each entry as a tuple of the message's fields in this order."""


def job_to_proto(job: JobSpec) -> pb.JobSpec:
    """loader.proto's JobSpec with every field set (``label_name`` too, so "" means "no labels")."""
    values = {f.name: getattr(job, f.name) for f in dataclasses.fields(job)}
    for name, (message, names) in _MESSAGES.items():
        values[name] = [message(**dict(zip(names, entry))) for entry in values[name]]
    return pb.JobSpec(**values)


def job_from_proto(msg: pb.JobSpec) -> JobSpec:
    """The domain job; an empty feature_name means "feat"; label_name is "label" when unset, "" for none."""
    values: dict[str, Any] = {}
    for f in dataclasses.fields(JobSpec):
        wire = msg.DESCRIPTOR.fields_by_name[f.name]
        value = getattr(msg, f.name)
        unset = wire.has_presence and not msg.HasField(f.name)
        if unset or (f.metadata.get("proto_empty_is_default") and not value):
            value = f.default
        values[f.name] = value if isinstance(value, str | int | float) else tuple(value)  # a repeated field
    for name, (_, names) in _MESSAGES.items():
        values[name] = tuple(tuple(getattr(m, n) for n in names) for m in values[name])
    return JobSpec(**values)
