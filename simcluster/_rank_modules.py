"""Which modules each rank of a launched script imports for itself, and which the ranks share.

Every process of an ``mpiexec`` or ``torchrun`` job imports its own copy of
every module, so module globals are per process: accelerate's
``PartialState``, ignite's ``idist`` model, Lightning's
``rank_zero_only.rank``, a Megatron-style ``parallel_state``, an
``lru_cache``'d world size. ``simcluster mpirun`` and ``simcluster torchrun``
run every rank in one process, so they do what SMPI does for global
variables: each rank gets its own copy of the modules it imports, swapped
into ``sys.modules`` whenever the rank runs (``mpirun.RankState``).

The line is drawn per top-level package, once per run, the first time it is
imported (``ModulePolicy.private``):

1. ``private=`` / ``--private PKG`` makes a package private, ``shared=`` /
   ``--shared PKG`` shared, whatever the rules below say.
2. Shared: the standard library, simcluster, ``mpi4py`` (simcluster's), and
   ``SHARED`` (test runners and packaging tools, which keep no per-process
   state a distributed program reads and are large).
3. Shared: a package first imported by a shared one (torch importing
   sympy): the shared package keeps references to it, and two copies would
   mix objects of both.
4. Shared: a package with compiled extension modules (torch, numpy, ...):
   an extension module is loaded once per process, and its state in C
   cannot be copied.
5. Private: every other module, installed or not (the script's own
   modules, accelerate, ignite, ...).

Modules imported before the run started stay shared (the ranks' function
may already hold them). Copies share their compiled code: a module's code
object is read from disk and unmarshalled once per run (``CodeCache``), so
a copy costs running its body, not compiling it.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
import types
from collections.abc import Iterable
from typing import Any, Final

SHARED: Final = frozenset({
    "simcluster", "transports", "mpi4py",
    "_pytest", "pytest", "pluggy", "py", "hypothesis", "sortedcontainers",  # the test runner
    "setuptools", "pkg_resources", "_distutils_hack", "pip", "distutils",  # packaging tools
    "mypy", "mypyc", "mypy_extensions", "typing_extensions",
    # clients and parsers that frameworks import and keep no per-process state in that a
    # distributed program reads; large, so a copy per rank would cost memory for nothing
    "urllib3", "requests", "certifi", "idna", "charset_normalizer", "botocore", "boto3",
    "s3transfer", "jmespath", "dateutil", "six", "packaging", "yaml", "filelock", "fsspec",
    "jinja2", "markupsafe", "sympy", "mpmath", "networkx",
})
"""Top-level packages every rank shares besides the standard library and compiled packages."""

_EXTENSIONS: Final = tuple(importlib.machinery.EXTENSION_SUFFIXES)
_STDLIB: Final = frozenset(getattr(sys, "stdlib_module_names", ())) | frozenset(sys.builtin_module_names)
_LOADER_FRAMES: Final = frozenset({"importlib", "simcluster", "transports", "_frozen_importlib",
                                   "_frozen_importlib_external"})
"""Frames skipped when looking for the module that imports another: the import machinery's and ours."""


def _top(name: str) -> str:
    return name.partition(".")[0]


def _stdlib(top: str) -> bool:
    if _STDLIB:
        return top in _STDLIB or top.startswith("_frozen")
    module = sys.modules.get(top)  # Python 3.10 lacks sys.stdlib_module_names: judge by the file
    file = getattr(module, "__file__", None)
    if not isinstance(file, str):
        return True
    import sysconfig

    stdlib = os.path.join(os.path.realpath(sysconfig.get_paths()["stdlib"]), "")
    real = os.path.realpath(file)
    return real.startswith(stdlib) and "site-packages" not in real


def has_extensions(module: types.ModuleType) -> bool:
    """Whether ``module`` is, or is a package holding, a compiled extension module."""
    file = getattr(module, "__file__", None)
    if isinstance(file, str) and file.endswith(_EXTENSIONS):
        return True
    paths = getattr(module, "__path__", None)
    if paths is None:
        return not isinstance(file, str)  # built in: compiled into the interpreter
    for root in list(paths):
        for _folder, dirs, files in os.walk(root):
            if any(f.endswith(_EXTENSIONS) for f in files):
                return True
            dirs[:] = [d for d in dirs if d != "__pycache__"]
    return False


class ModulePolicy:
    """One run's line between the modules each rank imports for itself and those the ranks share.

    ``install`` starts watching imports (which module imports a package
    first) and sharing compiled code between copies; ``uninstall`` stops.
    """

    def __init__(self, shared: Iterable[str] = (), private: Iterable[str] = ()) -> None:
        self.shared_names = frozenset(shared)
        self.private_names = frozenset(private)
        self.decided: dict[str, bool] = {}  # top-level package -> private?
        self.by_shared: set[str] = set()  # top-level packages first imported by a shared module
        self.before: frozenset[str] = frozenset()  # top-level packages imported before the run
        self._watch = _ImportWatch(self)
        self._cache = CodeCache()

    def install(self) -> None:
        self.before = frozenset(_top(name) for name in sys.modules)
        sys.meta_path.insert(0, self._watch)
        self._cache.install()

    def uninstall(self) -> None:
        if self._watch in sys.meta_path:
            sys.meta_path.remove(self._watch)
        self._cache.uninstall()

    def private(self, name: str) -> bool:
        """Whether module ``name`` (imported during the run) is one each rank has a copy of."""
        top = _top(name)
        got = self.decided.get(top)
        if got is None:
            got = self.decided[top] = self._decide(top)
        return got

    def _decide(self, top: str) -> bool:
        if top in self.private_names:
            return True
        if (top in self.shared_names or top in self.before or top in SHARED or top == "__main__"
                or top in self.by_shared or _stdlib(top)):
            return False
        module = sys.modules.get(top)
        if not isinstance(module, types.ModuleType):
            return False  # something other than a module put into sys.modules: leave it alone
        return not has_extensions(module)

    def first_import(self, top: str) -> None:
        """A rank imports top-level package ``top`` for the first time: note who imports it."""
        if top in self.decided or top in self.by_shared:
            return
        from .engine import sync as _sync

        if _sync.current() is None:  # imported by simcluster itself, outside every rank
            self.by_shared.add(top)
            return
        importer = _importer(sys._getframe(2))
        # code run outside sys.modules (a script, a runner's exec'd module) is the rank's own
        if importer is not None and importer in sys.modules and importer != "__main__" \
                and not self.private(importer):
            self.by_shared.add(top)


def _importer(frame: types.FrameType | None) -> str | None:
    """The top-level package of the code that runs an import, past the import machinery's frames."""
    while frame is not None:
        name = frame.f_globals.get("__name__")
        if isinstance(name, str):
            top = _top(name)
            if top not in _LOADER_FRAMES and not (top in _STDLIB and top != "__main__"):
                return top
        frame = frame.f_back
    return None


class _ImportWatch(importlib.abc.MetaPathFinder):
    """First on ``sys.meta_path`` during a run: sees each import that is not in ``sys.modules`` yet."""

    def __init__(self, policy: ModulePolicy) -> None:
        self.policy = policy

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> None:
        if path is None:  # a top-level module: which code imports it decides rule 3
            self.policy.first_import(fullname)
        return None  # the other finders find it


class CodeCache:
    """While installed, each source file's code object is read and unmarshalled once.

    ``SourceFileLoader.get_code`` is wrapped: the second rank that imports a
    module gets the code object the first one got (code objects are
    immutable; each copy makes its own functions and classes from it).
    """

    def __init__(self) -> None:
        self.codes: dict[str, types.CodeType] = {}
        self._original: Any = None
        self._own = False

    def install(self) -> None:
        loader = importlib.machinery.SourceFileLoader
        self._own = "get_code" in loader.__dict__
        original = self._original = loader.get_code
        codes = self.codes

        def get_code(loader_self: Any, fullname: str) -> Any:
            path = loader_self.path
            code = codes.get(path)
            if code is None:
                code = original(loader_self, fullname)
                if code is not None:
                    codes[path] = code
            return code

        setattr(loader, "get_code", get_code)  # noqa: B010 - a method replaced for the run

    def uninstall(self) -> None:
        if self._original is None:
            return
        loader = importlib.machinery.SourceFileLoader
        if self._own:
            setattr(loader, "get_code", self._original)  # noqa: B010
        else:
            delattr(loader, "get_code")  # noqa: B010
        self._original = None
        self.codes.clear()
