"""``mpi4py._mpiabi`` under ``simcluster mpirun``: which MPI ABI the ``MPI`` module is built for.

mpi4py picks one compiled ``MPI`` extension per MPI ABI (``mpich``, ``openmpi``,
``impi``, ``msmpi``, the standard ``mpiabi``) from ``MPI4PY_MPIABI``, or from
the symbols of the MPI library it would load. simcluster's ``MPI`` follows
MPICH's ABI (MPICH's constants and handle values), so the library that
``MPI.__file__`` names answers ``mpich``; any other library is inspected as
mpi4py does (``dlopen`` and its symbols). The finder finds
``mpi4py.MPI``: simcluster's, whatever ABI is registered for it.

Rule 1: the same functions, registry and environment variables as mpi4py's,
so code and tests that drive them see mpi4py's answers.
"""

from __future__ import annotations

import ctypes
import importlib.machinery
import importlib.util
import os
import sys
import warnings
from typing import Any

MPIABI: str | None = None
LIBMPI: str | None = None
LIBMPI_PATH: list[str] = []
LIBMPI_MODE: int | None = None

_registry: dict[str, list[str]] = {}


def _verbose_info(message: str, verbosity: int = 1) -> None:
    if sys.flags.verbose >= verbosity:
        print(f"# [{__name__}] {message}", file=sys.stderr)


def _site_prefixes() -> list[str]:
    site = sys.modules.get("site")
    if site is None:
        return []
    prefixes = [sys.exec_prefix] if sys.exec_prefix != sys.base_exec_prefix else []
    if site.ENABLE_USER_SITE:
        prefixes.append(os.path.abspath(site.USER_BASE or ""))
    if sys.base_exec_prefix in site.PREFIXES:
        prefixes.append(sys.base_exec_prefix)
    return prefixes


def _dlopen_rpath() -> list[str]:
    """The folders searched for the MPI library, in mpi4py's order."""
    rpath: list[str] = []

    def add(*parts: str) -> None:
        path = os.path.join(*parts)
        if path not in rpath:
            rpath.append(path)

    for prefix in _site_prefixes():
        if os.name != "posix":
            add(prefix, "DLLs")
            add(prefix, "Library", "bin")
        elif prefix != "/usr":
            add(prefix, "lib")
    add("")
    if os.name == "nt":
        impi_root, msmpi_bin = os.environ.get("I_MPI_ROOT"), os.environ.get("MSMPI_BIN")
        kind = os.environ.get("I_MPI_LIBRARY_KIND") or "release"
        if not msmpi_bin and os.environ.get("MSMPI_ROOT"):
            msmpi_bin = os.path.join(os.environ["MSMPI_ROOT"], "bin")
        if impi_root:
            add(impi_root, "bin", "mpi", kind)
            add(impi_root, "bin", kind)
            add(impi_root, "bin")
        if msmpi_bin:
            add(msmpi_bin)
    if sys.platform == "darwin":
        for folder in ("/usr/local/lib", "/opt/homebrew/lib", "/opt/local/lib"):
            add(folder)
    return rpath


def _simulated(libmpi: str | None) -> bool:
    mpi = sys.modules.get(f"{__spec__.parent if __spec__ else 'mpi4py'}.MPI")
    return libmpi is None or mpi is not None and os.path.abspath(libmpi) == os.path.abspath(
        getattr(mpi, "__file__", "") or "")


def _get_mpiabi_from_libmpi(libmpi: str | None = None) -> str:
    """The ABI of ``libmpi``: ``mpich`` for simcluster's MPI, else by the library's symbols."""
    if _simulated(libmpi):
        return "mpich"  # simcluster.MPI has MPICH's constants and handles
    lib = ctypes.CDLL(libmpi, mode=LIBMPI_MODE or getattr(os, "RTLD_LOCAL", 0))
    get_version = getattr(lib, "MPI_Abi_get_version", None)
    if get_version:
        major, minor = ctypes.c_int(0), ctypes.c_int(0)
        if get_version(ctypes.byref(major), ctypes.byref(minor)) == 0 and major.value > 0:
            return "mpiabi"
    if os.name == "posix":
        return "openmpi" if hasattr(lib, "ompi_mpi_comm_self") else "mpich"
    return "msmpi" if hasattr(lib, "MSMPI_Get_version") else "impi"


def _get_mpiabi_from_string(string: str) -> str:
    """``"Open MPI"`` -> ``openmpi``, ``"I_MPI"`` -> ``mpich`` on POSIX (``impi`` elsewhere)."""
    mpiabi = string.translate({ord(c): "" for c in " -_"}).lower()
    if os.name == "posix":
        return "mpich" if mpiabi == "impi" else mpiabi
    return "impi" if mpiabi == "mpich" else mpiabi


def _get_mpiabi() -> str:
    """The ABI in use: ``MPIABI``/``MPI4PY_MPIABI``, else the library's; remembered once found."""
    mpiabi: str | None = getattr(_get_mpiabi, "mpiabi", None)
    if mpiabi is None:
        named = MPIABI or os.environ.get("MPI4PY_MPIABI")
        libmpi = LIBMPI or os.environ.get("MPI4PY_LIBMPI")
        mpiabi = (_get_mpiabi_from_string(named) if named is not None
                  else _get_mpiabi_from_libmpi(libmpi))
        _get_mpiabi.mpiabi = mpiabi  # type: ignore[attr-defined]
    return mpiabi


def _register(module: str, mpiabi: str) -> None:
    mpiabi = _get_mpiabi_from_string(mpiabi)
    registered = _registry.setdefault(module, [])
    if mpiabi not in registered:
        registered.append(mpiabi)


def _get_mpiabi_suffix(module: str) -> str | None:
    if module not in _registry:
        return None
    mpiabi = _get_mpiabi()
    if mpiabi not in _registry[module]:
        return None
    return f".{mpiabi}" if mpiabi else ""


class _Finder:
    """Find a module built for the MPI ABI in use; ``mpi4py.MPI`` is simcluster's."""

    @classmethod
    def find_spec(cls, fullname: str, path: Any, target: Any = None) -> Any:
        suffix = _get_mpiabi_suffix(fullname)
        if suffix is None:
            return None
        _verbose_info(f"MPI ABI extension module: {fullname!r}")
        _verbose_info(f"MPI ABI extension suffix: {suffix!r}")
        package = __spec__.parent if __spec__ else "mpi4py"
        mpi = sys.modules.get(f"{package}.MPI")
        if fullname == f"{package}.MPI" and mpi is not None:
            return mpi.__spec__  # simcluster's MPI serves every ABI mpi4py knows
        name = fullname.rpartition(".")[2]
        for entry in path or ():
            for ext in importlib.machinery.EXTENSION_SUFFIXES:
                location = os.path.join(entry, f"{name}{suffix}{ext}")
                if os.path.isfile(location):
                    return importlib.util.spec_from_file_location(fullname, location)
        warnings.warn(f"unsupported MPI ABI {suffix[1:]!r}", category=RuntimeWarning, stacklevel=2)
        return None


def _install_finder() -> None:
    if _Finder not in sys.meta_path:
        sys.meta_path.append(_Finder)  # type: ignore[arg-type]
