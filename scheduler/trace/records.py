"""The production trace's CSV files: one checked record per node (:class:`TraceNode`) or pod (:class:`TracePod`),
read and written as the trace has them.

**CSV.** Nodes ``sn,cpu_milli,memory_mib,gpu,model``; pods ``name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,
qos,pod_phase,creation_time,deletion_time,scheduled_time``. A header row names the columns (any order; columns
beyond these are ignored). The published pod lists do not all have every column (the multi-GPU variants, for one,
have only ``name,cpu_milli,memory_mib,num_gpu,gpu_milli``); ``name``, ``cpu_milli`` and ``num_gpu`` are required,
and a missing column reads as :data:`POD_DEFAULTS` says. Empty cells mean: no model (a CPU-only node), no
``gpu_spec`` (any model), no ``deletion_time`` / ``scheduled_time`` (the trace's Pending pods have none).
``gpu_spec`` is ``|``-separated; empty segments are dropped as the trace's own converter does
(``pod_csv_to_yaml.py``). Integers may carry a ``.0`` (pandas writes a column with empty cells as floats). The
trace's own rules are checked: ``gpu_milli`` is 0 without GPUs, 1..1000 for one GPU and 1000 for several; a GPU node
has a model and a CPU-only node none; names are unique DNS subdomains (they become object names); models and
``gpu_spec`` entries are label values (they are matched against the ``gpu-model`` label). A bad cell is a ValueError
naming the file, line and column.

Separate because the simulator, the generator and the command line exchange traces as these records, and the rules
here are the trace's, not the cluster's.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
POD_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "gpu_spec", "qos", "pod_phase",
               "creation_time", "deletion_time", "scheduled_time")
# what a pods CSV without the column reads as (the paper's converter, pod_csv_to_yaml.py, fills the same gaps)
POD_DEFAULTS: Mapping[str, str] = {
    "memory_mib": "0: no memory request",
    "gpu_milli": "1000 per GPU (whole cards) for a pod with GPUs, 0 without",
    "gpu_spec": "empty: any GPU model",
    "qos": "LS, the trace's most common class (the simulator does not read it)",
    "pod_phase": "Pending (the simulator does not read it)",
    "creation_time": "the row's position in the file (0, 1, 2, ...): file order is arrival order",
    "deletion_time": "empty: never deleted",
    "scheduled_time": "empty: not scheduled yet",
}

_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_LABEL_VALUE = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_INTEGER = re.compile(r"([+-]?\d+)(?:\.0*)?")


class _FieldError(ValueError):
    """A value that breaks the trace's rules; ``field`` names the dataclass field (or the CSV column)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def _check_name(field: str, name: str) -> None:
    if len(name) > 253 or not _DNS_SUBDOMAIN.fullmatch(name):
        raise _FieldError(field, f"{name!r:.80} is not a valid object name (a DNS subdomain: lowercase letters, "
                                 "digits, '-' and '.')")


def _check_label_value(field: str, value: str) -> None:
    if len(value) > 63 or not _LABEL_VALUE.fullmatch(value):
        raise _FieldError(field, f"{value!r:.80} is not a label value (at most 63 letters, digits, '-', '_', '.')")


def _check_at_least(field: str, value: int, low: int) -> None:
    if value < low:
        raise _FieldError(field, f"{value} is below {low}")


@dataclass(frozen=True)
class TraceNode:
    """One row of the nodes CSV; the rules of the module docstring are checked on construction."""

    name: str
    cpu_milli: int
    memory_mib: int
    gpus: int
    model: str

    def __post_init__(self) -> None:
        _check_name("name", self.name)
        _check_at_least("cpu_milli", self.cpu_milli, 0)
        _check_at_least("memory_mib", self.memory_mib, 0)
        _check_at_least("gpus", self.gpus, 0)
        if self.gpus and not self.model:
            raise _FieldError("model", "a node with GPUs needs its GPU model")
        if self.model and not self.gpus:
            raise _FieldError("model", f"{self.model!r:.40} given for a node without GPUs (leave it empty)")
        if self.model:
            _check_label_value("model", self.model)


@dataclass(frozen=True)
class TracePod:
    """One row of the pods CSV (``phase`` is the ``pod_phase`` column); checked on construction."""

    name: str
    cpu_milli: int
    memory_mib: int
    num_gpu: int
    gpu_milli: int
    gpu_spec: tuple[str, ...]
    qos: str
    phase: str
    creation_time: int
    deletion_time: int | None
    scheduled_time: int | None

    def __post_init__(self) -> None:
        _check_name("name", self.name)
        _check_at_least("cpu_milli", self.cpu_milli, 0)
        _check_at_least("memory_mib", self.memory_mib, 0)
        _check_at_least("num_gpu", self.num_gpu, 0)
        if self.num_gpu == 0 and self.gpu_milli != 0:
            raise _FieldError("gpu_milli", f"{self.gpu_milli} for a pod without GPUs (num_gpu 0): must be 0")
        if self.num_gpu == 1 and not 1 <= self.gpu_milli <= 1000:
            raise _FieldError("gpu_milli", f"{self.gpu_milli} for one GPU: must be 1..1000")
        if self.num_gpu > 1 and self.gpu_milli != 1000:
            raise _FieldError("gpu_milli", f"{self.gpu_milli} for {self.num_gpu} GPUs: only one GPU can be shared, "
                                           "several are whole (1000)")
        if self.gpu_spec and not self.num_gpu:
            raise _FieldError("gpu_spec", "a GPU model constraint on a pod without GPUs")
        for model in self.gpu_spec:
            _check_label_value("gpu_spec", model)
        if not self.qos:
            raise _FieldError("qos", "empty")
        if not self.phase:
            raise _FieldError("phase", "empty")


_NODE_FIELD_COLUMNS = {"name": "sn", "gpus": "gpu"}
_POD_FIELD_COLUMNS = {"phase": "pod_phase"}


def _integer(column: str, text: str) -> int:
    m = _INTEGER.fullmatch(text.strip())
    if not m:
        raise _FieldError(column, f"{text!r:.40} is not an integer" if text.strip() else "empty (an integer is due)")
    return int(m.group(1))


def _optional_integer(column: str, text: str) -> int | None:
    return _integer(column, text) if text.strip() else None


def _node_row(cells: Mapping[str, str]) -> TraceNode:
    return TraceNode(cells["sn"].strip(), _integer("cpu_milli", cells["cpu_milli"]),
                     _integer("memory_mib", cells["memory_mib"]), _integer("gpu", cells["gpu"]),
                     cells["model"].strip())


def _pod_defaults(ordinal: int) -> dict[str, str]:
    """The cells of :data:`POD_DEFAULTS` for the ``ordinal``-th row (0-based) of a file without those columns;
    gpu_milli's depends on the row's num_gpu, so it is left to :func:`_pod_row`."""
    return {"memory_mib": "0", "gpu_spec": "", "qos": "LS", "pod_phase": "Pending", "creation_time": str(ordinal),
            "deletion_time": "", "scheduled_time": ""}


def _pod_row(cells: Mapping[str, str]) -> TracePod:
    spec = tuple(m.strip() for m in cells["gpu_spec"].split("|") if m.strip())
    num_gpu = _integer("num_gpu", cells["num_gpu"])
    milli = cells.get("gpu_milli")
    return TracePod(cells["name"].strip(), _integer("cpu_milli", cells["cpu_milli"]),
                    _integer("memory_mib", cells["memory_mib"]), num_gpu,
                    _integer("gpu_milli", milli) if milli is not None else 1000 if num_gpu else 0, spec,
                    cells["qos"].strip(), cells["pod_phase"].strip(),
                    _integer("creation_time", cells["creation_time"]),
                    _optional_integer("deletion_time", cells["deletion_time"]),
                    _optional_integer("scheduled_time", cells["scheduled_time"]))


Row = TypeVar("Row", TraceNode, TracePod)


def _read_csv(path: str, columns: Sequence[str], build: Callable[[Mapping[str, str]], Row],
              field_columns: Mapping[str, str], optional: Iterable[str] = (),
              defaults: Callable[[int], Mapping[str, str]] | None = None) -> list[Row]:
    """Rows of a trace CSV; ValueError "<path>: line L, column C (<name>): <problem>" for the first bad cell.
    ``optional`` columns may be missing from the header: their cells are then ``defaults(row ordinal)``'s (a
    column ``defaults`` has no cell for is left out of the row's cells)."""
    out: list[Row] = []
    reader = None
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            reader = csv.reader(f)
            header = [h.strip() for h in next(reader, [])]
            if not any(header):
                raise ValueError(f"{path}: line 1: no header row (expected {','.join(columns)})")
            index: dict[str, int] = {}
            for i, name in enumerate(header):
                if name in index:
                    raise ValueError(f"{path}: line 1, column {i + 1}: column {name!r:.40} appears twice")
                index[name] = i
            allowed = set(optional)
            for name in columns:
                if name not in index and name not in allowed:
                    raise ValueError(f"{path}: line 1: the header has no column {name!r} "
                                     f"(expected {','.join(columns)})")
            present = [name for name in columns if name in index]
            first_seen: dict[str, int] = {}
            for row in reader:
                line = reader.line_num
                if not any(cell.strip() for cell in row):
                    continue                                   # a blank line
                if len(row) != len(header):
                    raise ValueError(f"{path}: line {line}, column {min(len(row), len(header)) + 1}: {len(row)} "
                                     f"cells where the header has {len(header)}")
                cells = {name: row[index[name]] for name in present}
                if defaults is not None and len(present) < len(columns):
                    filled = defaults(len(out))
                    cells.update({n: filled[n] for n in columns if n not in cells and n in filled})
                try:
                    item = build(cells)
                except _FieldError as e:
                    column = field_columns.get(e.field, e.field)
                    where = (f"column {index[column] + 1} ({column})" if column in index
                             else f"{column} (the missing column's default)")
                    raise ValueError(f"{path}: line {line}, {where}: {e.message}") from None
                if item.name in first_seen:
                    column = field_columns.get("name", "name")
                    raise ValueError(f"{path}: line {line}, column {index[column] + 1} ({column}): {item.name!r} "
                                     f"again (first on line {first_seen[item.name]})")
                first_seen[item.name] = line
                out.append(item)
    except csv.Error as e:
        raise ValueError(f"{path}: line {reader.line_num if reader else 1}: not CSV: {e}") from None
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not UTF-8 text: {e.reason}") from None
    return out


def read_nodes(path: str) -> list[TraceNode]:
    """The nodes CSV (``openb_node_list_*.csv``), in file order."""
    return _read_csv(path, NODE_COLUMNS, _node_row, _NODE_FIELD_COLUMNS)


def read_pods(path: str) -> list[TracePod]:
    """The pods CSV (``openb_pod_list_*.csv``, any of the published column sets), in file order (the trace's is
    arrival order)."""
    return _read_csv(path, POD_COLUMNS, _pod_row, _POD_FIELD_COLUMNS, POD_DEFAULTS, _pod_defaults)


def _write_csv(path: str, columns: Sequence[str], rows: Iterable[Sequence[object]]) -> None:
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(columns)
        writer.writerows(["" if cell is None else cell for cell in row] for row in rows)


def write_nodes(path: str, nodes: Sequence[TraceNode]) -> None:
    """The nodes CSV as the trace writes it (empty model for a CPU-only node)."""
    _write_csv(path, NODE_COLUMNS, ((n.name, n.cpu_milli, n.memory_mib, n.gpus, n.model) for n in nodes))


def write_pods(path: str, pods: Sequence[TracePod]) -> None:
    """The pods CSV as the trace writes it (empty cells for no gpu_spec and missing times)."""
    _write_csv(path, POD_COLUMNS, ((p.name, p.cpu_milli, p.memory_mib, p.num_gpu, p.gpu_milli, "|".join(p.gpu_spec),
                                    p.qos, p.phase, p.creation_time, p.deletion_time, p.scheduled_time)
                                   for p in pods))
