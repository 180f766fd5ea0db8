"""Which modules the build compiles with mypyc; read by ``setup.py`` and by ``_build``.

No imports of the package here: ``setup.py`` loads this file before the package exists.
"""

import hashlib
import json
import os

COMPILED = ("engine.kernel", "engine.task", "engine.meetings", "engine.protocol", "engine.rendezvous", "engine.delivery", "engine.flows", "engine.diagnostics",
            "engine.assembly",
            "hosting.hosted_engine", "matching", "request", "engine.ports", "_p2p_calls", "transports.wire",
            "_coll_context", "collectives._chunks", "collectives._reduction", "collectives.barrier", "collectives.broadcast",
            "collectives.reduce", "collectives.all_reduce", "collectives.reduce_scatter", "collectives.all_gather",
            "collectives.gather", "collectives.scatter", "collectives.all_to_all", "collectives.scan")
"""The hot path, as modules of the ``simcluster`` package: the kernel with its tasks and its
analytic collectives' meetings, the point-to-point protocol
with its handshakes and its in-process delivery (with a platform's flows),
diagnostics, the engine (in-process and hosted), matching, requests, the built-in models' port
state (``engine.ports``: the charge of every message), the awaitables ``Comm.send`` and ``recv``
return under ``checks="off"`` (``_p2p_calls``), the payload codec, and the
collective algorithms with the steps they share and the context they talk through (not ``collectives._methods``: ``Comm``'s methods,
which users subclass)."""


def source(name: str) -> str:
    """The path of module ``name``'s source, relative to the package directory."""
    return name.replace(".", "/") + ".py"

GROUP = "simcluster._native"
"""mypyc's group name: the shared library is ``simcluster/_native__mypyc*.so``."""

RECORD = "_compiled.json"
"""Written beside the modules by a build that compiled every one: the compiler, the Python ABI
(the extension suffix) and the sha256 of every source of the package. Every source, not only the
compiled ones: mypyc bakes in what they import from the others (a NamedTuple's field positions,
``Final`` constants), so an edit anywhere can leave a compiled module stale."""


def source_hashes(package: str) -> dict[str, str]:
    """The sha256 of every ``.py`` file under ``package`` (links followed), by ``/``-path relative to it."""
    hashes = {}
    for folder, dirs, files in os.walk(package, followlinks=True):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for file in sorted(files):
            if file.endswith(".py"):
                path = os.path.join(folder, file)
                with open(path, "rb") as f:
                    digest = hashlib.sha256(f.read()).hexdigest()
                hashes[os.path.relpath(path, package).replace(os.sep, "/")] = digest
    return hashes


def build_key(compiler: str, abi: str, sources: dict[str, str], build_script: str) -> str:
    """One hash of everything a compiled build depends on: equal keys, identical builds."""
    text = json.dumps([compiler, abi, sorted(sources.items()), build_script])
    return hashlib.sha256(text.encode()).hexdigest()


def stale_extensions(package: str, suffix: str) -> list[str]:
    """The compiled modules (``*suffix`` files) under ``package`` that ``COMPILED`` no longer names.

    An editable build leaves its extensions in the source tree; one left from
    an earlier, longer list would be imported instead of its ``.py`` file.
    mypyc's shared library (``_native__mypyc*``) is never stale.
    """
    keep = {source(name)[:-len(".py")] for name in COMPILED}
    stale = []
    for folder, _, files in os.walk(package, followlinks=True):
        for file in files:
            path = os.path.join(folder, file)
            module = os.path.relpath(path, package).replace(os.sep, "/")[:-len(suffix)]
            if file.endswith(suffix) and module not in keep and not file.startswith("_native__mypyc"):
                stale.append(path)
    return sorted(stale)
