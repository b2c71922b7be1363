"""The Debian mirror this machine's apt uses, read the way its sources name it (no mirror host of our own): for a
debootstrap of this release that fetches from where the machine's packages come from.

Both forms of apt source are read: the one-line ``deb [options] URI suite components`` of /etc/apt/sources.list and
sources.list.d/*.list, then the deb822 paragraphs (``Types``, ``URIs``, ``Suites``, ``Enabled``) of
sources.list.d/*.sources, files in name order as apt reads them.
"""

from __future__ import annotations

import glob
import os
import re

APT_ETC = "/etc/apt"


def codename(os_release: str = "/etc/os-release") -> str | None:
    """This release's codename (``VERSION_CODENAME``: bookworm on Debian 12); None when it names none."""
    try:
        with open(os_release, encoding="utf-8") as f:
            for line in f:
                key, _, value = line.strip().partition("=")
                if key == "VERSION_CODENAME":
                    return value.strip("\"'") or None
    except OSError:
        return None
    return None


def debian_mirror(suite: str | None = None, apt_etc: str = APT_ETC) -> str | None:
    """The URI of the first ``deb`` source for ``suite`` (this release's codename by default), as apt reads them;
    None when none names it."""
    suite = suite or codename()
    if not suite:
        return None
    one_line = [os.path.join(apt_etc, "sources.list"), *sorted(glob.glob(os.path.join(apt_etc, "sources.list.d",
                                                                                        "*.list")))]
    for path in one_line:
        for uri, suites in _one_line_sources(path):
            if suite in suites:
                return uri
    for path in sorted(glob.glob(os.path.join(apt_etc, "sources.list.d", "*.sources"))):
        for uri, suites in _deb822_sources(path):
            if suite in suites:
                return uri
    return None


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError:
        return ""


def _one_line_sources(path: str) -> list[tuple[str, list[str]]]:
    out = []
    for line in _read(path).splitlines():
        line = re.sub(r"\[[^]]*\]", "", line.split("#", 1)[0]).split()    # options ([arch=...]) and comments go
        if len(line) >= 3 and line[0] == "deb":
            out.append((line[1], [line[2]]))
    return out


def _deb822_sources(path: str) -> list[tuple[str, list[str]]]:
    out = []
    for paragraph in re.split(r"\n[ \t]*\n", _read(path)):
        fields: dict[str, str] = {}
        key = ""
        for line in paragraph.splitlines():
            if line.lstrip().startswith("#"):
                continue
            if line[:1] in (" ", "\t") and key:                            # a continuation line
                fields[key] += " " + line.strip()
                continue
            key, _, value = line.partition(":")
            key = key.strip().lower()
            fields[key] = value.strip()
        uris = fields.get("uris", "").split()
        if "deb" in fields.get("types", "").split() and uris and fields.get("enabled", "yes").lower() != "no":
            out.append((uris[0], fields.get("suites", "").split()))
    return out
