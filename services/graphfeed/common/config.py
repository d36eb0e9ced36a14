"""Settings plumbing: one pydantic-settings class per service, exposed as CLI flags too.

Each service defines ``<Service>Settings(ServiceSettings)`` with ``env_prefix =
"GRAPHFEED_<SERVICE>_"``. ``graphfeed serve <service> --flag value`` flags are generated from the
fields (help text from each field's description, "required" or the default); a flag given on
the command line overrides the environment. Nothing is read at import time: :func:`settings_from_args` runs in ``main``.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import typing
from pathlib import Path

from pydantic import BeforeValidator, Field, ValidationError
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, SettingsConfigDict

from graphfeed.common.security import ClientSecurity, ServerSecurity

_S = typing.TypeVar("_S", bound=BaseSettings)


class ServiceSettings(BaseSettings):
    """Fields every server has."""

    model_config = SettingsConfigDict(extra="forbid", strict=False)

    host: str = Field(default="127.0.0.1", description="Address the gRPC server binds to.")
    port: int = Field(
        default=0, ge=0, le=65535, description="gRPC port; 0 picks a free one (printed in the READY line)."
    )
    metrics_host: str = Field(default="127.0.0.1", description="Address of the Prometheus /metrics endpoint.")
    metrics_port: int = Field(
        default=0, ge=-1, le=65535, description="Prometheus port; 0 picks a free one, -1 disables it."
    )
    health_port: int = Field(
        default=0,
        ge=-1,
        le=65535,
        description="Port of a second gRPC server that answers only grpc.health.v1 (its own threads, so probes are "
        "answered while every handler streams); 0 picks a free one (printed in the READY line), -1 disables it. "
        'Health name "" is SERVING once the peers answer; "graphfeed.liveness" while the process runs.',
    )
    health_host: str = Field(
        default="",
        description="Address the health server binds to; empty: the gRPC server's (host). A loader sidecar binds its "
        "gRPC port to 127.0.0.1 (only its trainer dials it) and its health port where the kubelet's probes reach it.",
    )
    max_workers: int = Field(default=16, ge=1, description="gRPC handler threads.")
    max_connection_age_s: float = Field(
        default=60.0,
        ge=0,
        description="Seconds after which a client connection is asked to close (GOAWAY), so long-lived clients "
        "re-resolve dns:/// targets and spread over new replicas; 0 never.",
    )
    max_connection_age_grace_s: float = Field(
        default=0.0,
        ge=0,
        description="Seconds calls still running on such a connection get before it is cut; 0 no limit "
        "(a minibatch stream is never cut).",
    )
    grace_s: float = Field(default=5.0, ge=0, description="Seconds in-flight calls get to finish on SIGTERM.")
    log_level: str = Field(default="INFO", description="Python logging level.")
    shm_dir: str = Field(
        default="/dev/shm",
        description="Shared-memory directory for bulk tensors with same-host peers that offer it "
        "(this server's responses, and what its own clients offer); empty disables.",
    )
    shm_client_quota_mb: float = Field(
        default=0,
        ge=0,
        description="Shared-memory bytes (MiB) one client may hold unclaimed before its responses go inline "
        "instead; 0: a quarter of shm_dir's size. Some room (1/16, at most 64 MiB) is always kept free.",
    )

    bulk_port: int = Field(
        default=0,
        ge=-1,
        le=65535,
        description="Port of the bulk plane (on host): large answers' bytes go over a plain TCP stream (TLS with "
        "tls_cert) to clients that offer to read them, instead of through gRPC; 0 picks a free one (announced in "
        "each answer), -1 disables it.",
    )
    bulk_host: str = Field(
        default="",
        description="Address clients reach the bulk plane at, put in each ticket (in Kubernetes the pod IP); empty: "
        "the host each client dialed for gRPC. Clients that dial a name resolving to several servers (dns:/// round "
        "robin over samplers) get plane answers only from servers that set it.",
    )

    @property
    def shm_client_quota_bytes(self) -> int:
        return int(self.shm_client_quota_mb * (1 << 20))

    tls_cert: str = Field(
        default="", description="PEM certificate: TLS on the gRPC port (the health port stays plaintext for probes)."
    )
    tls_key: str = Field(default="", description="PEM private key of tls_cert.")
    tls_client_ca: str = Field(
        default="", description="CA that signs client certificates: mutual TLS (clients without one are refused)."
    )
    auth_tokens_file: str = Field(
        default="", description="Accepted bearer tokens, one per line, re-read on change; empty: none needed."
    )
    allowed_identities: list[str] = Field(
        default_factory=list,
        description="Client certificate CNs/SANs allowed to call (with tls_client_ca); empty: any the CA signed.",
    )
    tls_ca: str = Field(default="", description="CA this process's clients verify servers with: TLS to its peers.")
    tls_client_cert: str = Field(default="", description="PEM certificate this process's clients present (mutual TLS).")
    tls_client_key: str = Field(default="", description="PEM private key of tls_client_cert.")
    token_file: str = Field(
        default="", description="File whose first line is the bearer token this process's clients send."
    )
    reflection: bool = Field(
        default=True,
        description="Serve gRPC reflection (grpcurl list/describe); it asks for the same token or certificate as "
        "every other call. false removes it.",
    )

    def server_security(self) -> ServerSecurity:
        return ServerSecurity.of(
            self.tls_cert, self.tls_key, self.tls_client_ca, self.auth_tokens_file, self.allowed_identities
        )

    def client_security(self) -> ClientSecurity:
        return ClientSecurity.of(self.tls_ca, self.tls_client_cert, self.tls_client_key, self.token_file)


class PeerServiceSettings(ServiceSettings):
    """Fields of a server that needs peers (sampler, loader): it listens at once, answers health
    NOT_SERVING and UNAVAILABLE until they answer, and reconnects when their graph changes."""

    peer_backoff_max_s: float = Field(
        default=10.0, gt=0, description="Longest wait between two tries to reach the peers at start-up, in seconds."
    )
    peer_check_interval_s: float = Field(
        default=10.0,
        gt=0,
        description="Seconds between checks that the peers still serve the graph version this server started with "
        "(a changed version: NOT_SERVING while it reconnects).",
    )


def split_commas(value: typing.Any) -> typing.Any:
    """``["a:1,b:2"]`` (a flag's form) or ``"a:1,b:2"`` -> ``["a:1", "b:2"]``: a list setting's
    ``BeforeValidator``, so its flag takes comma-separated values as well as separate ones."""
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list):
        return value
    return [part for item in items for part in (item.split(",") if isinstance(item, str) else [item]) if part != ""]


def field_from(source: type, name: str, **overrides: typing.Any) -> typing.Any:
    """A settings field declared by dataclass ``source``'s field ``name``: its default (or
    default factory) and ``metadata["description"]``, then ``overrides`` (pydantic ``Field``
    keywords), so a settings class repeats neither. A field with no default stays required."""
    (spec,) = [f for f in dataclasses.fields(source) if f.name == name]
    kw: dict[str, typing.Any] = {"description": spec.metadata.get("description")}
    if "default" in overrides or "default_factory" in overrides:
        pass
    elif spec.default is not dataclasses.MISSING:
        kw["default"] = spec.default
    elif spec.default_factory is not dataclasses.MISSING:
        kw["default_factory"] = spec.default_factory
    return Field(**{**kw, **overrides})


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _help(cls: type[BaseSettings], name: str, info: FieldInfo) -> str:
    """The field's description, its env var, and "required" or its default (one made by a
    factory is the description's to state; None and "" go without saying)."""
    text = f"{info.description or ''} [env {cls.model_config.get('env_prefix', '')}{name.upper()}]"
    if info.is_required():
        return text + " (required)"
    if info.default_factory is None and info.default not in (None, ""):
        return text + f" (default {info.default!r})"
    return text


def add_settings_argument(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup,
    cls: type[BaseSettings],
    name: str,
    *,
    flag: str | None = None,
    hidden: bool = False,
) -> None:
    """Adds the flag of field ``name`` (default ``--<name with dashes>``) to ``parser`` or a group.

    Its default is None, meaning "not given": the environment or the field's default applies.
    ``hidden`` leaves it out of ``--help``.
    """
    info = cls.model_fields[name]
    ann = info.annotation
    origin = typing.get_origin(ann)
    kw: dict[str, typing.Any] = {"dest": name, "default": None}
    kw["help"] = argparse.SUPPRESS if hidden else _help(cls, name, info)
    if ann is bool:
        kw["action"] = argparse.BooleanOptionalAction
    elif origin in (list, tuple):
        (item,) = {a for a in typing.get_args(ann) if a is not Ellipsis}
        # A field with a before-validator parses its own text (e.g. split_commas: "10,5").
        own_parser = any(isinstance(m, BeforeValidator) for m in info.metadata)
        kw.update(nargs="+", type=str if own_parser else item)
    else:
        args = [a for a in typing.get_args(ann) if a is not type(None)] if origin else [ann]
        kw["type"] = args[0] if args and args[0] in (int, float, str, Path) else str
    flag = flag or _flag(name)
    parser.add_argument(flag, metavar=flag.lstrip("-").replace("-", "_").upper(), **kw)


def add_settings_arguments(
    parser: argparse.ArgumentParser, cls: type[BaseSettings], *, skip: typing.Collection[str] = ()
) -> None:
    """Adds one flag per settings field, in field order, but those in ``skip`` (see :func:`add_settings_argument`)."""
    for name in cls.model_fields:
        if name not in skip:
            add_settings_argument(parser, cls, name)


def settings_from_args(cls: type[_S], args: argparse.Namespace) -> _S:
    """Settings from the environment, overridden by flags that were given. Missing or bad
    values end the program with one line per problem naming the flag and its env var (exit 2,
    as argparse does), not a pydantic traceback."""
    given = {k: v for k, v in vars(args).items() if k in cls.model_fields and v is not None}
    try:
        return cls(**given)
    except ValidationError as exc:
        prefix = cls.model_config.get("env_prefix", "")
        lines = []
        for err in exc.errors():
            name = str(err["loc"][0]) if err["loc"] else ""
            where = f"{_flag(name)} (env {prefix}{name.upper()})" if name else cls.__name__
            lines.append(f"graphfeed: {where}: {'is required' if err['type'] == 'missing' else err['msg']}")
        print("\n".join(lines), file=sys.stderr)
        raise SystemExit(2) from None
