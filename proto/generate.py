"""Regenerate the Python modules from the .proto sources in this directory (``make proto``).

Every ``*.proto`` under ``proto/`` gets a ``*_pb2.py`` beside it; the sources listed in ``GRPC`` also get
``*_pb2_grpc.py`` stubs (gRPC services we serve or call; NRI's services run over our own ttRPC instead). Each
generated module gets a ``.pyi`` type stub from mypy-protobuf (pinned with grpcio-tools), so that mypy checks
every message field and constructor argument the agent uses (``make lint``).
Paths are given relative to the repository root, so generated imports read ``from proto.x import y_pb2``.
``tests/unit/test_proto.py`` runs this into a scratch directory and checks the committed files match.
"""

from __future__ import annotations

import pathlib
import shutil
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
GRPC: frozenset[str] = frozenset({"proto/podresources/api.proto", "proto/cri/api.proto"})


def sources() -> list[str]:
    return sorted(str(p.relative_to(ROOT)) for p in (ROOT / "proto").rglob("*.proto"))


def generate(out: pathlib.Path) -> None:
    """Run protoc (from grpcio-tools, pinned in pyproject so the output is reproducible) into ``out``."""
    from importlib.resources import files

    from grpc_tools import protoc

    include = str(files("grpc_tools") / "_proto")
    mypy, mypy_grpc = _plugin("protoc-gen-mypy"), _plugin("protoc-gen-mypy_grpc")
    for src in sources():
        args = ["protoc", f"-I{ROOT}", f"-I{include}", f"--python_out={out}",
                f"--plugin=protoc-gen-mypy={mypy}", f"--mypy_out={out}"]
        if src in GRPC:
            args += [f"--grpc_python_out={out}", f"--plugin=protoc-gen-mypy_grpc={mypy_grpc}",
                     f"--mypy_grpc_out={out}"]
        if protoc.main(args + [str(ROOT / src)]) != 0:
            raise RuntimeError(f"protoc failed on {src}")


def _plugin(name: str) -> str:
    """mypy-protobuf's protoc plugin: beside this interpreter (a venv's bin/, also when it is not on PATH)."""
    beside = pathlib.Path(sys.executable).parent / name
    found = str(beside) if beside.exists() else shutil.which(name)
    if found is None:
        raise RuntimeError(f"{name} not found: install mypy-protobuf (the test extra)")
    return found


if __name__ == "__main__":
    generate(pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT)
