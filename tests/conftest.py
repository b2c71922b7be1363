"""Suite-wide fixtures and one guard: the tests write nothing into the checkout.

Every test keeps its files under ``tmp_path`` (or a ``tempfile`` directory it removes); a run that leaves a new
file in the checkout (a metric cache or prediction checkpoints in ``./var/``, a report, a socket) fails at the
end of the session with the list of those files. Interpreter and tool caches are allowed (see ``_ALLOWED``),
and so are source files (``*.py``, ``*.pyi``, ...) appearing while the suite runs, which are someone editing the
tree, not a test writing into it.
"""

from __future__ import annotations

import os
import tempfile

import pytest

from tests.realcgroup import real_tree  # noqa: F401  (fixture shared by integration tests)

# Hypothesis, once for every property test (test modules set no home directory or database of their own):
# - no example database (``database=None``): a run neither reads nor leaves failing examples anywhere; a failure
#   prints its falsifying example and the ``@reproduce_failure`` blob to replay it (``print_blob``);
# - its other caches (the Unicode character map, ...) would go to ./.hypothesis: they go to one directory per user
#   in the temp dir instead, the same on every run (so runs do not accumulate directories) and not shared between
#   a root run and a user run.
_HYPOTHESIS_HOME = os.path.join(tempfile.gettempdir(), f"koordlet-py-hypothesis-{os.getuid()}")
os.environ.setdefault("HYPOTHESIS_STORAGE_DIRECTORY", _HYPOTHESIS_HOME)
try:
    from hypothesis import settings as hypothesis_settings
    from hypothesis.configuration import set_hypothesis_home_dir
except ImportError:                                        # hypothesis not installed: nothing to redirect
    pass
else:
    set_hypothesis_home_dir(os.environ["HYPOTHESIS_STORAGE_DIRECTORY"])
    hypothesis_settings.register_profile("koordlet", database=None, print_blob=True)
    hypothesis_settings.load_profile("koordlet")

CHECKOUT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_ALLOWED_DIRS = {".git", ".venv", ".venv-min", "__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache"}
_SOURCE_SUFFIXES = (".py", ".pyi", ".proto", ".md", ".toml", ".yaml", ".yml", ".json", ".cfg", ".txt", ".swp", "~")


def _files(root: str) -> set[str]:
    found: set[str] = set()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in _ALLOWED_DIRS and not d.endswith(".egg-info")]
        rel = os.path.relpath(dirpath, root)
        for name in filenames + [d for d in dirnames if not os.listdir(os.path.join(dirpath, d))]:
            found.add(os.path.normpath(os.path.join(rel, name)))
    return found


def pytest_sessionstart(session: pytest.Session) -> None:
    if not hasattr(session.config, "workerinput"):        # the xdist controller (or a plain run) only
        session.config.stash[_BEFORE] = _files(CHECKOUT)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    before = session.config.stash.get(_BEFORE, None)
    if before is None:
        return
    new = sorted(p for p in _files(CHECKOUT) - before
                 if not (p.endswith(_SOURCE_SUFFIXES) and not p.startswith("var" + os.sep)))
    if new:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        message = "the tests wrote into the checkout (keep test files under tmp_path): " + ", ".join(new)
        if reporter is not None:
            reporter.write_line(message, red=True, bold=True)
        else:
            print(message)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


_BEFORE = pytest.StashKey[set]()


@pytest.fixture(autouse=True, scope="session")
def _state_directory(tmp_path_factory: pytest.TempPathFactory):
    """Host mode keeps its state under ``$STATE_DIRECTORY`` (``koordlet.ops.config.state_directory``; systemd sets it
    from the unit's StateDirectory=): point it at a temp dir for the whole session, so no agent the suite starts,
    in-process or as a subprocess (which inherits it), writes into /var/lib/koordlet or ~/.local/state."""
    saved = os.environ.get("STATE_DIRECTORY")
    os.environ["STATE_DIRECTORY"] = str(tmp_path_factory.mktemp("state"))
    yield
    if saved is None:
        os.environ.pop("STATE_DIRECTORY", None)
    else:
        os.environ["STATE_DIRECTORY"] = saved
