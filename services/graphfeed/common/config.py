"""Settings plumbing: one pydantic-settings class per service, exposed as CLI flags too.

Each service defines ``<Service>Settings(ServiceSettings)`` with ``env_prefix =
"GRAPHFEED_<SERVICE>_"``. ``graphfeed serve <service> --flag value`` flags are generated from the
fields (help text from each field's description); a flag given on the command line overrides
the environment. Nothing is read at import time: :func:`settings_from_args` runs in ``main``.
"""

from __future__ import annotations

import argparse
import typing
from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class ServiceSettings(BaseSettings):
    """Fields every server has."""

    model_config = SettingsConfigDict(extra="forbid", strict=False)

    host: str = Field("127.0.0.1", description="Address the gRPC server binds to.")
    port: int = Field(0, ge=0, le=65535, description="gRPC port; 0 picks a free one (printed in the READY line).")
    metrics_host: str = Field("127.0.0.1", description="Address of the Prometheus /metrics endpoint.")
    metrics_port: int = Field(0, ge=-1, le=65535, description="Prometheus port; 0 picks a free one, -1 disables it.")
    max_workers: int = Field(16, ge=1, description="gRPC handler threads.")
    grace_s: float = Field(5.0, ge=0, description="Seconds in-flight calls get to finish on SIGTERM.")
    log_level: str = Field("INFO", description="Python logging level.")
    shm_dir: str = Field(
        "/dev/shm",
        description="Shared-memory directory for bulk tensors with same-host peers that offer it "
        "(this server's responses, and what its own clients offer); empty disables.",
    )


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def add_settings_arguments(parser: argparse.ArgumentParser, cls: type[BaseSettings]) -> None:
    """Adds one optional flag per settings field (default None = keep env/default)."""
    for name, info in cls.model_fields.items():
        ann = info.annotation
        origin = typing.get_origin(ann)
        help_text = (info.description or "") + f" [env {cls.model_config.get('env_prefix', '')}{name.upper()}]"
        if ann is bool:
            parser.add_argument(_flag(name), dest=name, default=None, action=argparse.BooleanOptionalAction, help=help_text)
        elif origin in (list, tuple):
            (item,) = {a for a in typing.get_args(ann) if a is not Ellipsis}
            parser.add_argument(_flag(name), dest=name, default=None, nargs="+", type=item, help=help_text)
        else:
            args = [a for a in typing.get_args(ann) if a is not type(None)] if origin else [ann]
            conv = args[0] if args and args[0] in (int, float, str, Path) else str
            parser.add_argument(_flag(name), dest=name, default=None, type=conv, help=help_text + f" (default {info.default!r})")


def settings_from_args(cls: type[BaseSettings], args: argparse.Namespace) -> BaseSettings:
    """Settings from the environment, overridden by flags that were given."""
    given = {k: v for k, v in vars(args).items() if k in cls.model_fields and v is not None}
    return cls(**given)
