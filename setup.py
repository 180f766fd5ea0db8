"""Build script: compiles simcluster's hot path with mypyc where a C compiler is present.

Everything else about the package is declared in pyproject.toml. The modules
named in ``simcluster/_build_manifest.py`` (the engine's hot path and the
collective algorithms) are compiled to C extensions; ``simcluster/_build.py``
decides at import time whether to use them. Where mypyc or a C compiler is
missing, or the build fails, the install still succeeds with the same ``.py``
files running interpreted, and ``import simcluster`` says so in one line on stderr.
``SIMCLUSTER_PURE_PYTHON=1`` at build time skips the compilation.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import sysconfig
from pathlib import Path

from setuptools import setup
from setuptools.command.build_ext import build_ext

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "simcluster"))
import _build_manifest as manifest  # noqa: E402  (the list of compiled modules, shared with runtime)

sys.path.pop(0)


def _say(message: str) -> None:
    print(f"simcluster build: {message}", file=sys.stderr)


def _extensions() -> list:
    if not {"build_ext", "build", "bdist_wheel", "editable_wheel", "install", "develop"} & set(sys.argv):
        return []  # metadata only (egg_info, dist_info): nothing to compile yet
    if os.environ.get("SIMCLUSTER_PURE_PYTHON") == "1":
        _say("SIMCLUSTER_PURE_PYTHON=1: not compiling; the modules run interpreted")
        return []
    try:
        from mypyc.build import mypycify
    except ImportError as e:
        _say(f"mypyc is not available ({e}); the modules run interpreted")
        return []
    if "editable_wheel" in sys.argv and _unchanged_since_last_compile():
        _say("nothing changed since the last compile: the compiled modules in simcluster/ stay "
             f"(delete simcluster/{manifest.RECORD} to force a rebuild)")
        return []
    _say(f"compiling {len(manifest.COMPILED)} modules with mypyc, then C: about 2 minutes on a "
         "2-core machine (a reinstall in a checkout with nothing changed reuses them)")
    paths = [f"simcluster/{manifest.source(name)}" for name in manifest.COMPILED]
    # The build environment has only the build requirements: optional and runtime libraries
    # the modules import are typed as Any there, which changes nothing in the compiled code.
    options = ["--ignore-missing-imports", "--no-warn-unused-ignores"]
    try:
        extensions = mypycify(options + paths, opt_level="3", debug_level="1", group_name=manifest.GROUP,
                              strict_dunder_typing=False)
    except BaseException as e:  # mypyc reports type errors with SystemExit
        _say(f"mypyc could not compile the modules ({e!r}); they run interpreted")
        return []
    for extension in extensions:
        extension.optional = True  # a failed C build leaves the interpreted modules, not a failed install
    return extensions


class BuildExt(build_ext):
    """Builds the compiled modules; records their sources' hashes only when every one was built."""

    def run(self) -> None:
        super().run()
        if not self.extensions:
            return
        built = [Path(self.build_lib) / self.get_ext_filename(self.get_ext_fullname(e.name))
                 for e in self.extensions]
        missing = [str(p) for p in built if not p.exists()]
        targets = [Path(self.build_lib) / "simcluster"]
        if self.inplace or self.editable_mode:
            targets.append(HERE / "simcluster")
        if missing:
            _say(f"the C build failed ({', '.join(missing)} missing); the modules run interpreted. "
                 "Install a C compiler and reinstall for the compiled build")
            for target in targets:
                (target / manifest.RECORD).unlink(missing_ok=True)
            return
        record = _record()
        for target in targets:
            target.mkdir(parents=True, exist_ok=True)
            (target / manifest.RECORD).write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
        if self.inplace or self.editable_mode:
            for path in manifest.stale_extensions(str(HERE / "simcluster"), sysconfig.get_config_var("EXT_SUFFIX")):
                _say(f"removing {os.path.relpath(path, HERE)}: a module this build no longer compiles")
                os.unlink(path)


def _record() -> dict:
    """What a complete build depends on: the compiler, the Python ABI, every source, this script."""
    compiler, abi = _compiler_version(), sysconfig.get_config_var("EXT_SUFFIX")
    sources = manifest.source_hashes(str(HERE / "simcluster"))
    script = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()
    return {"compiler": compiler, "abi": abi, "sources": sources,
            "key": manifest.build_key(compiler, abi, sources, script)}


def _unchanged_since_last_compile() -> bool:
    """Whether the checkout's compiled modules were built from exactly what is here now."""
    package = HERE / "simcluster"
    try:
        key = json.loads((package / manifest.RECORD).read_text())["key"]
    except (OSError, ValueError, KeyError, TypeError):
        return False
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    built = all((package / manifest.source(name)).with_suffix(suffix).exists() for name in manifest.COMPILED)
    native = any(package.glob(f"{manifest.GROUP.rpartition('.')[2]}__mypyc*{suffix}"))
    return built and native and key == _record()["key"]


def _compiler_version() -> str:
    try:
        import mypy.version
        return f"mypyc {mypy.version.__version__}"
    except ImportError:
        return "mypyc"


setup(ext_modules=_extensions(), cmdclass={"build_ext": BuildExt})
