"""Regenerate the Python modules from the .proto sources in this directory (``make proto``).

The sources stay here, in ``proto/``; the generated modules go into the package ``koordlet._proto`` (the directory
``koordlet/_proto/``), never into a top-level ``proto`` package: that name belongs to proto-plus, which many Google
client libraries install, and two distributions writing one top-level package overwrite each other's files.

Every ``proto/<dir>/<name>.proto`` gets ``koordlet/_proto/<dir>/<name>_pb2.py``; the sources listed in ``GRPC`` also
get ``*_pb2_grpc.py`` stubs (gRPC services we serve or call; NRI's services run over our own ttRPC instead). Each
generated module gets a ``.pyi`` type stub from mypy-protobuf (pinned with grpcio-tools), so that mypy checks every
message field and constructor argument the agent uses (``make lint``).

protoc names a file, and writes its imports, by the file's path under an include directory. ``proto/`` is given as
the include directory *mapped to* ``koordlet/_proto`` (``-Ikoordlet/_proto=proto``, protoc's virtual path), so the
sources compile as ``koordlet/_proto/<dir>/<name>.proto``: the output lands in the package and the generated imports
already read ``from koordlet._proto.cri import api_pb2``, with nothing rewritten after protoc. (That virtual path is
also the file's name in protobuf's descriptor pool and in the "source:" line of each module; the proto packages,
message names and so everything on the wire are the sources' own.)
``tests/unit/test_proto.py`` runs this into a scratch directory and checks the committed files match.
"""

from __future__ import annotations

import pathlib
import shutil
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
SOURCES = "proto"                       # the .proto sources, relative to ROOT
PACKAGE = "koordlet._proto"             # where the generated modules go
PACKAGE_DIR = PACKAGE.replace(".", "/")
GRPC: frozenset[str] = frozenset({"proto/podresources/api.proto", "proto/cri/api.proto"})


def sources() -> list[str]:
    """The .proto sources, as paths relative to the repository root (``proto/cri/api.proto``)."""
    return sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / SOURCES).rglob("*.proto"))


def target(src: str) -> str:
    """The name protoc compiles ``src`` as, and the directory (under the output) its modules go to:
    ``proto/cri/api.proto`` -> ``koordlet/_proto/cri/api.proto``."""
    return PACKAGE_DIR + "/" + pathlib.PurePosixPath(src).relative_to(SOURCES).as_posix()


def generate(out: pathlib.Path) -> None:
    """Run protoc (from grpcio-tools, pinned in pyproject so the output is reproducible) into ``out``: the modules
    land in ``out/koordlet/_proto/`` (``out`` is the repository root for ``make proto``)."""
    from importlib.resources import files

    from grpc_tools import protoc

    include = str(files("grpc_tools") / "_proto")
    mypy, mypy_grpc = _plugin("protoc-gen-mypy"), _plugin("protoc-gen-mypy_grpc")
    for src in sources():
        args = ["protoc", f"-I{PACKAGE_DIR}={ROOT / SOURCES}", f"-I{include}", f"--python_out={out}",
                f"--plugin=protoc-gen-mypy={mypy}", f"--mypy_out={out}"]
        if src in GRPC:
            args += [f"--grpc_python_out={out}", f"--plugin=protoc-gen-mypy_grpc={mypy_grpc}",
                     f"--mypy_grpc_out={out}"]
        if protoc.main(args + [target(src)]) != 0:
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
