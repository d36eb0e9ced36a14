"""``graphfeed bench fuzz``: random and malformed requests against every RPC of running services.

For each method of each service (found from the generated descriptors, so a new RPC is fuzzed
without a change here) it sends a mix of

* random bytes as the serialized request (undecodable, truncated, or decodable by accident);
* messages built from the descriptor with hostile values: huge and negative integers, unknown
  enum values, long and non-ASCII strings, tensors whose dtype, shape and bytes disagree,
  repeated fields of odd lengths;
* valid-looking requests with one field broken.

It counts the status codes and fails on any INTERNAL or UNKNOWN (graphfeed's own bug, not the
client's), on a call that does not answer within its deadline (a hang), and on a server that
stops answering health checks. The test suite runs it with a few thousand requests per method
(tests/integration/test_fuzz.py); this command runs as many as asked against ``--target``s.
"""

from __future__ import annotations

import argparse
import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import grpc
from google.protobuf.descriptor import Descriptor, FieldDescriptor, MethodDescriptor, ServiceDescriptor
from google.protobuf.message import Message
from google.protobuf.message_factory import GetMessageClass

from graphfeed.bench import harness

BAD_CODES = (grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN)
_INTS = [0, 1, -1, 2, 7, 255, 1 << 31, -(1 << 31), (1 << 63) - 1, -(1 << 63), 1 << 40, 10**6]
_UINTS = [0, 1, 2, 7, 255, 1 << 31, (1 << 64) - 1, 1 << 63, 1 << 40, 10**6]


def _int(rng: random.Random, unsigned: bool, bits: int) -> int:
    """Mostly edge values (0, -1, 2**31, 2**63 - 1, ...) that fit the field, sometimes any."""
    lo, hi = (0, (1 << bits) - 1) if unsigned else (-(1 << (bits - 1)), (1 << (bits - 1)) - 1)
    if rng.random() < 0.7:
        return rng.choice([v for v in (*_INTS, *_UINTS) if lo <= v <= hi])
    return rng.randint(lo, hi)


def _string(rng: random.Random) -> str:
    kind = rng.random()
    if kind < 0.3:
        return rng.choice(
            ["", "train", "feat", "label", "x" * 20_000, "../../etc/passwd", "graphfeed-seg-1o0000abcd-1-00000000"]
        )
    if kind < 0.6:
        return "".join(chr(rng.randrange(32, 0x2FFF)) for _ in range(rng.randrange(0, 40)))
    return "".join(rng.choice("abcdefghij_-.0123456789") for _ in range(rng.randrange(0, 300)))


_BITS = {
    FieldDescriptor.TYPE_INT32: (False, 32),
    FieldDescriptor.TYPE_SINT32: (False, 32),
    FieldDescriptor.TYPE_SFIXED32: (False, 32),
    FieldDescriptor.TYPE_INT64: (False, 64),
    FieldDescriptor.TYPE_SINT64: (False, 64),
    FieldDescriptor.TYPE_SFIXED64: (False, 64),
    FieldDescriptor.TYPE_UINT32: (True, 32),
    FieldDescriptor.TYPE_FIXED32: (True, 32),
    FieldDescriptor.TYPE_UINT64: (True, 64),
    FieldDescriptor.TYPE_FIXED64: (True, 64),
}


def _scalar(rng: random.Random, f: FieldDescriptor) -> object:
    t = f.type
    if t in _BITS:
        return _int(rng, *_BITS[t])
    if t == FieldDescriptor.TYPE_BOOL:
        return rng.random() < 0.5
    if t in (FieldDescriptor.TYPE_FLOAT, FieldDescriptor.TYPE_DOUBLE):
        return rng.choice([0.0, -1.0, 1e30, float("nan"), float("inf"), rng.random()])
    if t == FieldDescriptor.TYPE_STRING:
        return _string(rng)
    if t == FieldDescriptor.TYPE_BYTES:
        return rng.randbytes(rng.choice([0, 1, 7, 8, 64, rng.randrange(0, 4096)]))
    if t == FieldDescriptor.TYPE_ENUM:
        values = [v.number for v in f.enum_type.values]
        return rng.choice(values) if rng.random() < 0.8 else rng.randrange(-5, 1000)  # unknown values are legal proto3
    raise AssertionError(f"unhandled field type {t} of {f.full_name}")


def random_message(rng: random.Random, desc: Descriptor, depth: int = 0) -> Message:
    """A message of type ``desc`` with each field set (or not) to a hostile random value."""
    msg = GetMessageClass(desc)()
    for f in desc.fields:
        if rng.random() < 0.35:
            continue
        if f.type == FieldDescriptor.TYPE_MESSAGE:
            if depth >= 3:
                continue
            if f.label == FieldDescriptor.LABEL_REPEATED:
                for _ in range(rng.choice([0, 1, 2, 5])):
                    getattr(msg, f.name).add().CopyFrom(random_message(rng, f.message_type, depth + 1))
            else:
                getattr(msg, f.name).CopyFrom(random_message(rng, f.message_type, depth + 1))
        elif f.label == FieldDescriptor.LABEL_REPEATED:
            getattr(msg, f.name).extend(_scalar(rng, f) for _ in range(rng.choice([0, 1, 2, 3, 40, 64])))
        else:
            setattr(msg, f.name, _scalar(rng, f))
    return msg


def request_bytes(rng: random.Random, method: MethodDescriptor, valid: list[bytes]) -> bytes:
    """One fuzzed request for ``method``: random bytes, a random message, or a valid one
    (from ``valid``) with some of its bytes flipped or cut."""
    kind = rng.random()
    if kind < 0.3 or (not valid and kind < 0.4):
        return rng.randbytes(rng.choice([0, 1, 2, 5, 16, rng.randrange(0, 2048)]))
    if kind < 0.8 or not valid:
        return random_message(rng, method.input_type).SerializeToString()
    data = bytearray(rng.choice(valid))
    if data and rng.random() < 0.5:
        for _ in range(rng.randrange(1, 4)):
            data[rng.randrange(len(data))] = rng.randrange(256)
    else:
        del data[rng.randrange(len(data) + 1) :]
    return bytes(data)


@dataclass
class FuzzReport:
    """What one method answered."""

    method: str
    requests: int = 0
    codes: Counter[str] = field(default_factory=Counter)
    bad: list[tuple[str, str]] = field(default_factory=list)  # (code, details) of INTERNAL/UNKNOWN/hangs


def fuzz_method(
    channel: grpc.Channel,
    service: ServiceDescriptor,
    method: MethodDescriptor,
    n: int,
    seed: int,
    valid: list[bytes] | None = None,
    timeout_s: float = 10.0,
) -> FuzzReport:
    """Sends ``n`` fuzzed requests to one method (a server stream is read for at most 3 messages)."""
    rng = random.Random(f"{seed}/{method.full_name}")  # noqa: S311 - test data, not secrets
    path = f"/{service.full_name}/{method.name}"
    identity: Callable[[bytes], bytes] = lambda b: b  # noqa: E731 - raw bytes both ways
    stream = method.server_streaming
    call = (channel.unary_stream if stream else channel.unary_unary)(
        path, request_serializer=identity, response_deserializer=identity
    )
    report = FuzzReport(method.full_name)
    for _ in range(n):
        req = request_bytes(rng, method, valid or [])
        report.requests += 1
        try:
            if stream:
                responses = call(req, timeout=timeout_s)
                for i, _msg in enumerate(responses):
                    if i >= 2:
                        responses.cancel()
                        break
            else:
                call(req, timeout=timeout_s)
            report.codes["OK"] += 1
        except grpc.RpcError as e:
            code = e.code()
            report.codes[code.name] += 1
            if code in BAD_CODES or code == grpc.StatusCode.DEADLINE_EXCEEDED:
                report.bad.append((code.name, (e.details() or "")[:300]))
    return report


def fuzz_service(
    address: str,
    service: ServiceDescriptor,
    n: int,
    seed: int = 0,
    valid: dict[str, list[bytes]] | None = None,
    timeout_s: float = 10.0,
) -> list[FuzzReport]:
    """Every method of ``service`` at ``address``, ``n`` requests each; a call not answered
    within ``timeout_s`` counts as a hang."""
    with grpc.insecure_channel(address) as channel:
        return [
            fuzz_method(channel, service, m, n, seed, (valid or {}).get(m.name), timeout_s) for m in service.methods
        ]


def _services() -> dict[str, ServiceDescriptor]:
    from graphfeed.graph_store.v1 import graph_store_pb2
    from graphfeed.loader.v1 import loader_pb2
    from graphfeed.sampler.v1 import sampler_pb2

    mods = {"graph-store": graph_store_pb2, "sampler": sampler_pb2, "loader": loader_pb2}
    return {name: next(iter(m.DESCRIPTOR.services_by_name.values())) for name, m in mods.items()}


def run(args: argparse.Namespace) -> int:
    services = _services()
    failed = 0
    for target in args.target:
        kind, _, address = target.partition("=")
        start = time.perf_counter()
        for r in fuzz_service(address, services[kind], args.requests, args.seed):
            failed += len(r.bad)
            print(f"{r.method}: {r.requests} requests, {dict(r.codes)}, {len(r.bad)} INTERNAL/UNKNOWN/hangs")
            for code, details in r.bad[:5]:
                print(f"    {code}: {details}")
        print(f"{kind} at {address}: {time.perf_counter() - start:.1f}s")
    return 1 if failed else 0


def register(sub: argparse._SubParsersAction) -> None:
    help = "random and malformed requests against every RPC of running services"
    harness.register(sub, "fuzz", __doc__, help, add_arguments, run)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--target",
        action="append",
        required=True,
        metavar="SERVICE=HOST:PORT",
        help="graph-store=..., sampler=... or loader=...; repeat for several",
    )
    p.add_argument("--requests", type=int, default=20_000, help="requests per method (default 20000)")
