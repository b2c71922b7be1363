"""Regenerate the Python modules from the .proto sources in this directory (``make proto``).

Every ``*.proto`` under ``proto/`` gets a ``*_pb2.py`` beside it; the sources listed in ``GRPC`` also get
``*_pb2_grpc.py`` stubs (gRPC services we serve or call; NRI's services run over our own ttRPC instead).
Paths are given relative to the repository root, so generated imports read ``from proto.x import y_pb2``.
``tests/unit/test_proto.py`` runs this into a scratch directory and checks the committed files match.
"""

from __future__ import annotations

import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
GRPC: frozenset[str] = frozenset({"proto/podresources/api.proto"})


def sources() -> list[str]:
    return sorted(str(p.relative_to(ROOT)) for p in (ROOT / "proto").rglob("*.proto"))


def generate(out: pathlib.Path) -> None:
    """Run protoc (from grpcio-tools, pinned in pyproject so the output is reproducible) into ``out``."""
    from importlib.resources import files

    from grpc_tools import protoc

    include = str(files("grpc_tools") / "_proto")
    for src in sources():
        args = ["protoc", f"-I{ROOT}", f"-I{include}", f"--python_out={out}"]
        if src in GRPC:
            args.append(f"--grpc_python_out={out}")
        if protoc.main(args + [str(ROOT / src)]) != 0:
            raise RuntimeError(f"protoc failed on {src}")


if __name__ == "__main__":
    generate(pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT)
