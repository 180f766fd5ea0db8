"""Which build is active: the compiled hot path (mypyc) or the same modules interpreted.

``import simcluster`` imports this module first. It uses the compiled
modules only when the build compiled every one of them for this Python and
every ``.py`` of the package is unchanged since (the build records their
sha256: the compiled modules bake in what they import from the others);
otherwise, and whenever
``SIMCLUSTER_PURE_PYTHON=1`` is set, it makes Python load the ``.py`` files,
so an edited source in an editable install is never shadowed by a stale
extension. Either way the behaviour is the same; only the speed differs.
An interpreted build that was not chosen says so in one line on stderr.
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from . import _build_manifest as manifest

__all__ = ["Build", "active", "describe"]

HERE = Path(__file__).resolve().parent
REBUILD = "reinstall with a C compiler present (pip install -e '.[test]' in a checkout) for the compiled build"


@dataclass(frozen=True)
class Build:
    """The build in use: ``compiled`` or not, the compiler, and why the modules run interpreted."""

    compiled: bool
    compiler: str
    reason: str  # why interpreted; empty when compiled


def decide(package: Path, environ: dict[str, str] | os._Environ[str]) -> Build:
    """Decide the build for the package directory ``package`` (a pure function of its files)."""
    if environ.get("SIMCLUSTER_PURE_PYTHON") == "1":
        return Build(False, "", "SIMCLUSTER_PURE_PYTHON=1")
    try:
        record = json.loads((package / manifest.RECORD).read_text())
        compiler, sources = str(record["compiler"]), dict(record["sources"])
    except (OSError, ValueError, KeyError, TypeError):
        return Build(False, "", "the install compiled nothing (no C compiler or mypyc at build time)")
    abi = record.get("abi")
    if abi is None:
        return Build(False, "", "the compiled modules were built by an older simcluster")
    suffixes = importlib.machinery.EXTENSION_SUFFIXES
    if abi not in suffixes:
        return Build(False, "", f"the compiled modules are for another Python ({abi})")
    for name in manifest.COMPILED:
        source = package / manifest.source(name)
        if not any(source.with_suffix(suffix).exists() for suffix in suffixes):
            return Build(False, "", f"the compiled {name} is missing for this Python")
    now = manifest.source_hashes(str(package))
    for path, digest in sorted(sources.items()):
        # A file the install left out cannot be imported, so it cannot make anything stale.
        if path in now and now[path] != digest:
            return Build(False, "", f"{path} changed since it was compiled")
    return Build(True, compiler, "")


class _SourceFirst(importlib.abc.MetaPathFinder):
    """Finds the compiled modules' ``.py`` files, ahead of their extensions."""

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        package, _, name = fullname.partition(".")
        if package != __package__ or name not in manifest.COMPILED:
            return None
        return importlib.util.spec_from_file_location(fullname, HERE / manifest.source(name))


def _activate() -> Build:
    build = decide(HERE, os.environ)
    if not build.compiled:
        sys.meta_path.insert(0, _SourceFirst())
        if build.reason != "SIMCLUSTER_PURE_PYTHON=1":
            # A line on stderr, not a warning: under ``-W error`` (pytest's filter among them)
            # a warning at import would make ``import simcluster`` itself fail.
            sys.stderr.write(f"simcluster runs interpreted, about 4x slower per message "
                             f"(docs/build.md): {build.reason}; {REBUILD}, or set "
                             "SIMCLUSTER_PURE_PYTHON=1 to choose the interpreted build and silence "
                             "this\n")
    return build


active: Build = _activate()
"""The build this process uses."""


def describe() -> str:
    """One line for ``simcluster --version``: which build runs, and why."""
    if active.compiled:
        return f"compiled ({active.compiler}, {len(manifest.COMPILED)} modules)"
    return f"interpreted ({active.reason})"
