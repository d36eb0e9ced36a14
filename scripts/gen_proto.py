#!/usr/bin/env python3
"""Regenerates the Python protobuf/gRPC code from proto/ (the only copy of the contracts).

    python scripts/gen_proto.py           # rewrite services/graphfeed/<svc>/v1/*_pb2*.py(i)
    python scripts/gen_proto.py --check   # exit 1 if the committed code is stale

Proto files live at proto/graphfeed/<svc>/v1/*.proto (package graphfeed.<svc>.v1); the
generated modules land in the Python package graphfeed.<svc>.v1, i.e. services/graphfeed/<svc>/v1/.
"""

from __future__ import annotations

import argparse
import filecmp
import os
import shutil
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PROTO_ROOT = REPO / "proto"
PY_ROOT = REPO / "services" / "graphfeed"  # the services/ portion of the `graphfeed` namespace
GENERATED_SUFFIXES = ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py")


def proto_files() -> list[Path]:
    return sorted(PROTO_ROOT.glob("graphfeed/**/*.proto"))


def generate(out_dir: Path) -> list[Path]:
    """Runs protoc into out_dir; returns generated files relative to out_dir/graphfeed."""
    import grpc_tools
    from grpc_tools import protoc

    include = Path(grpc_tools.__file__).parent / "_proto"
    args = [
        "protoc",
        f"-I{PROTO_ROOT}",
        f"-I{include}",
        f"--python_out={out_dir}",
        f"--pyi_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        *[str(p.relative_to(PROTO_ROOT)) for p in proto_files()],
    ]
    cwd = os.getcwd()
    os.chdir(PROTO_ROOT)
    try:
        if protoc.main(args) != 0:
            raise SystemExit("protoc failed")
    finally:
        os.chdir(cwd)
    root = out_dir / "graphfeed"
    return sorted(p.relative_to(root) for p in root.rglob("*") if p.name.endswith(GENERATED_SUFFIXES))


def committed() -> list[Path]:
    return sorted(p.relative_to(PY_ROOT) for p in PY_ROOT.glob("*/v1/*") if p.name.endswith(GENERATED_SUFFIXES))


def stale_files() -> list[str]:
    """Generated files that differ from, are missing from, or are extra in the checkout."""
    with tempfile.TemporaryDirectory() as tmp:
        fresh = generate(Path(tmp))
        diffs = [
            str(rel)
            for rel in fresh
            if not (PY_ROOT / rel).exists()
            or not filecmp.cmp(Path(tmp) / "graphfeed" / rel, PY_ROOT / rel, shallow=False)
        ]
        extra = [str(rel) for rel in committed() if rel not in set(fresh)]
    return diffs + extra


def write() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        fresh = generate(Path(tmp))
        for rel in committed():
            (PY_ROOT / rel).unlink()
        for rel in fresh:
            dst = PY_ROOT / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(Path(tmp) / "graphfeed" / rel, dst)
            init = dst.parent / "__init__.py"
            if not init.exists():
                init.write_text('"""Generated protobuf and gRPC code (scripts/gen_proto.py). Do not edit."""\n')
    print(f"generated {len(fresh)} files under {PY_ROOT.relative_to(REPO)}/*/v1/")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="fail if the generated code is stale")
    args = parser.parse_args()
    if args.check:
        stale = stale_files()
        if stale:
            print("stale generated code (run: python scripts/gen_proto.py):", *stale, sep="\n  ")
            return 1
        print("generated code is up to date")
        return 0
    write()
    return 0


if __name__ == "__main__":
    sys.exit(main())
