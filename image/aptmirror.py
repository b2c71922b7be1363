"""The Debian archive this machine's apt is configured with: where ``make image`` debootstraps from and where
``.ci/install-runtime`` fetches containerd, so that the repository names no package mirror of its own and works
behind whichever mirror (a proxy, a snapshot, a local copy) the machine already uses.

apt's sources are read in apt's order: ``/etc/apt/sources.list``, then ``/etc/apt/sources.list.d/`` by file name,
``*.list`` in the one-line format (``deb [options] URI suite component...``) and ``*.sources`` in the deb822 format
(stanzas of ``Types:``, ``URIs:``, ``Suites:``, ``Components:``, ``Enabled:``); other files there are ignored, as apt
ignores them. The answer is the URI of the first enabled ``deb`` entry of the Debian archive proper: one that has a
Debian release among its suites (``bookworm``, ``trixie-updates``, ``stable``...; not ``bookworm-security``, which
is another archive) and the ``main`` component.

``python3 -m image.aptmirror [ETC_APT]`` prints it (exit 1 with the reason when there is none); it needs nothing but
Python's standard library, so ``.ci/install-runtime`` runs it with the system's Python.
"""

from __future__ import annotations

import glob
import os
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

# Debian's release names and suite classes; an entry's suite is one of these, or one with a suffix below.
RELEASES = frozenset({"buster", "bullseye", "bookworm", "trixie", "forky", "duke", "sid", "stable", "oldstable",
                      "oldoldstable", "testing", "unstable", "experimental"})
SUFFIXES = ("", "-updates", "-backports", "-proposed-updates")


class NoMirror(LookupError):
    """No Debian archive among apt's sources; the message says where it looked and what to do."""


@dataclass(frozen=True)
class Entry:
    """One source of apt's: a ``deb`` line, or one URI of a deb822 stanza."""

    types: tuple[str, ...]
    uri: str
    suites: tuple[str, ...]
    components: tuple[str, ...]
    enabled: bool = True


def source_files(etc_apt: str) -> list[str]:
    """The files apt reads its sources from, in apt's order."""
    listed = os.path.join(etc_apt, "sources.list")
    parts = os.path.join(etc_apt, "sources.list.d")
    files = [listed] if os.path.isfile(listed) else []
    return files + sorted(glob.glob(os.path.join(parts, "*.list")) + glob.glob(os.path.join(parts, "*.sources")),
                          key=os.path.basename)


def one_line_entries(text: str) -> Iterator[Entry]:
    """The entries of a ``sources.list`` file (``deb [opt=value ...] URI suite [component ...]``)."""
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        kind, _, rest = line.partition(" ")
        rest = rest.strip()
        if rest.startswith("["):                       # options: [arch=amd64 signed-by=...]
            rest = rest.partition("]")[2]
        words = rest.split()
        if len(words) >= 2:
            yield Entry((kind,), words[0], (words[1],), tuple(words[2:]))


def deb822_entries(text: str) -> Iterator[Entry]:
    """The entries of a ``*.sources`` file: each stanza (blank lines between them) once per URI."""
    stanzas: list[dict[str, str]] = [{}]
    name = ""
    for line in text.splitlines():
        if not line.strip():
            stanzas.append({})
        elif line.startswith("#"):
            continue
        elif line[0].isspace():                        # a continuation line (a key block in Signed-By)
            if name in stanzas[-1]:
                stanzas[-1][name] += "\n" + line.strip()
        else:
            key, _, value = line.partition(":")
            name = key.strip().lower()
            stanzas[-1][name] = value.strip()
    for fields in stanzas:
        enabled = fields.get("enabled", "yes").lower() not in ("no", "false", "0")
        for uri in fields.get("uris", "").split():
            yield Entry(tuple(fields.get("types", "").split()), uri, tuple(fields.get("suites", "").split()),
                        tuple(fields.get("components", "").split()), enabled)


def is_debian_archive(entry: Entry) -> bool:
    """A binary-package source of the Debian archive proper (not its security archive, not a third party's)."""
    release = any(suite.removesuffix(suffix) in RELEASES and suite.endswith(suffix)
                  for suite in entry.suites for suffix in SUFFIXES)
    return entry.enabled and "deb" in entry.types and release and "main" in entry.components


def entries(path: str) -> Iterator[Entry]:
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    return deb822_entries(text) if path.endswith(".sources") else one_line_entries(text)


def debian_mirror(etc_apt: str = "/etc/apt") -> str:
    """The URI of the first Debian archive among apt's sources (no trailing slash), or :class:`NoMirror`."""
    files = source_files(etc_apt)
    for path in files:
        for entry in entries(path):
            if is_debian_archive(entry):
                return entry.uri.rstrip("/")
    looked = ", ".join(files) if files else f"no {etc_apt}/sources.list nor {etc_apt}/sources.list.d/*.list|*.sources"
    raise NoMirror(f"no Debian archive (a 'deb' entry with a Debian suite such as bookworm and the main component) "
                   f"in apt's sources ({looked}); add the mirror this machine should use to them")


def main(argv: Sequence[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    try:
        print(debian_mirror(*args[:1]))
    except NoMirror as e:
        print(f"aptmirror: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
