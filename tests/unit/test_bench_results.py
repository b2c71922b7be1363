"""bench/run.py (``make bench``): RESULTS.md is the benchmarks' own output with the facts of the run, and a partial
run rewrites only its own sections."""

from __future__ import annotations

import importlib.util
import os
import re
import sys
from pathlib import Path

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _runner():
    spec = importlib.util.spec_from_file_location("bench_run", os.path.join(ROOT, "bench", "run.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_run"] = module          # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_sections_are_the_output_with_date_commit_and_load_and_partial_runs_keep_the_rest(tmp_path, capsys):
    run = _runner()
    (tmp_path / "fast.py").write_text("import sys\nprint('ratio=1.23x', sys.argv[1:])\n")
    (tmp_path / "broken.py").write_text("import sys\nprint('half a line')\nsys.exit('refused: no cgroups')\n")
    benches = (run.Bench("fast", "Fast one", ("--cycles", "3"), str(tmp_path)),
               run.Bench("broken", "Broken one", (), str(tmp_path)))
    results = str(tmp_path / "RESULTS.md")

    assert run.main([], benches, results) == 1
    text = Path(results).read_text()
    assert text.startswith(run.HEADER)
    fast = re.search(r"## Fast one\n\n(.*)\n\n```text\nratio=1.23x \['--cycles', '3'\]\n```", text)
    assert fast, text
    facts = fast.group(1)
    assert "fast.py --cycles 3`" in facts
    assert re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC", facts)
    assert re.search(r"commit [0-9a-f]{10}(-dirty)?", facts)
    assert re.search(r"load \d+\.\d\d → \d+\.\d\d", facts)
    assert f"{os.cpu_count()} CPUs" in facts
    assert "**exit status 1**" in text and "refused: no cgroups" in text and "half a line" in text

    (tmp_path / "fast.py").write_text("print('ratio=9.99x')\n")
    broken_before = run._sections(text)["broken"]
    assert run.main(["fast"], benches, results) == 0
    text = Path(results).read_text()
    assert "ratio=9.99x" in text and "ratio=1.23x" not in text
    assert run._sections(text)["broken"] == broken_before          # not re-run, kept as it was
    assert text.index("## Fast one") < text.index("## Broken one")  # the list's order, whatever ran

    assert run.main(["nope"], benches, results) == 2
    assert "unknown benchmark(s): nope" in capsys.readouterr().err
