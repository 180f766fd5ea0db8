"""What crosses from the caller to hosting processes and back, besides envelopes.

Two things need more than the payload codec:

* the rank function, sent once to each local hosting process. Module-level
  functions travel by reference (their module is imported by name in the
  child, or by file path when the name is not importable, like ``__main__`` or
  a script run by ``simcluster run``). Functions defined inside other functions
  (closures, as in most tests) travel by value: their code object, their
  closure cells and defaults (pickled the same way, recursively), with their
  module's globals imported in the child. This is the pickle that
  ``multiprocessing`` itself uses to start processes, sent parent -> child only,
  over multiprocessing's own launch pipe, never read off a socket.
* exceptions coming back from a rank. They are never pickled: the type is
  found by name among modules the caller has already imported (nothing is
  imported on the say-so of a remote process), rebuilt from its args and
  attributes when those are plain data, and given a traceback rebuilt from the
  remote frames' file names, line numbers and function names, so
  ``traceback.print_exception`` shows the remote source lines. Anything else
  becomes a ``RemoteError`` subclass carrying the same type name and text.

Rule 1: nothing in this module unpickles data that came from a socket.
Rule 2: a rebuilt exception has the same type, ``args`` and ``str`` as the
original whenever its type is importable in the caller.
"""

from __future__ import annotations

import builtins
import importlib
import importlib.util
import io
import linecache
import marshal
import pickle
import sys
import traceback
import types
from typing import Any, Final

from simcluster.transports import wire

from ..errors import UsageTypeError

_EMPTY: Final = "__simcluster_empty_cell__"
_SCRIPT_MODULES: Final = ("__main__", "__mp_main__", "__simcluster_script__")
_MAX_FRAMES: Final = 64


class RemoteError(Exception):
    """An exception from a hosting process whose type could not be rebuilt here.

    A subclass named like the original type is made on the fly, so
    ``type(exc).__name__`` and ``str(exc)`` read as they did remotely;
    ``remote_type`` holds the original ``module.qualname``.
    """

    remote_type: str = ""


class RemoteTraceback(Exception):
    """Holds the formatted traceback of a remote exception (set as its ``__cause__``-like note)."""


# ---- the rank function: by reference, or by value for closures ----


def _found_by_name(fn: types.FunctionType) -> bool:
    """True when ``fn`` is reachable as ``module.qualname`` from an importable module."""
    module = fn.__module__
    if module in _SCRIPT_MODULES or "<locals>" in fn.__qualname__:
        return False
    mod = sys.modules.get(module)
    if mod is None:
        return False
    obj: Any = mod
    for part in fn.__qualname__.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return False
    return obj is fn


def _module_file(fn: types.FunctionType) -> str | None:
    file = fn.__globals__.get("__file__")
    return file if isinstance(file, str) else None


class _Pickler(pickle.Pickler):
    """A pickler that sends functions it cannot name by value (cloudpickle's idea, in small)."""

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, types.ModuleType):  # e.g. torch = pytest.importorskip("torch")
            return (importlib.import_module, (obj.__name__,))
        if type(obj) is types.FunctionType and not _found_by_name(obj):
            cells = tuple(_cell_value(c) for c in obj.__closure__ or ())
            return (_rebuild_function, (
                marshal.dumps(obj.__code__), obj.__module__, _module_file(obj), obj.__name__,
                obj.__qualname__, obj.__defaults__, obj.__kwdefaults__, cells,
                dict(obj.__dict__) or None))
        return NotImplemented


def _cell_value(cell: types.CellType) -> Any:
    try:
        return cell.cell_contents
    except ValueError:  # an empty cell (a variable assigned later)
        return _EMPTY


def dumps(obj: object, what: str) -> bytes:
    """Pickle ``obj`` for a local hosting process, closures by value.

    Raises:
        UsageTypeError: something in it cannot be sent, with what to do instead.
    """
    out = io.BytesIO()
    try:
        _Pickler(out, protocol=pickle.HIGHEST_PROTOCOL).dump(obj)
    except RecursionError:
        raise UsageTypeError(None, f"run({what})", "the rank function refers to itself through a "
                             "closure, which cannot be sent to hosting processes",
                             "define it at module level") from None
    except Exception as exc:
        raise UsageTypeError(None, f"run({what})", "cannot send the rank function and its "
                             f"arguments to the hosting processes ({type(exc).__name__}: {exc})",
                             "define the function at module level and pass plain data in "
                             "args/kwargs, or use transport='memory'") from None
    return out.getvalue()


def loads(data: bytes) -> Any:
    """Unpickle what ``dumps`` made (only ever called on the launch pipe from our parent)."""
    return pickle.loads(data)


_loaded_scripts: dict[str, dict[str, Any]] = {}


def _module_globals(module: str, file: str | None) -> dict[str, Any]:
    """Return the globals of ``module`` in this process, importing it by name or by path."""
    mod = sys.modules.get(module)
    if mod is not None and (module != "__main__" or file is None
                            or getattr(mod, "__file__", None) == file):
        return mod.__dict__
    if module not in _SCRIPT_MODULES:
        try:
            return importlib.import_module(module).__dict__
        except ImportError:
            if file is None:
                raise
    if file is None:
        raise ImportError(f"cannot find module {module!r} in a hosting process; define the rank "
                          "function in an importable module or a script file")
    if file in _loaded_scripts:
        return _loaded_scripts[file]
    name = "__simcluster_script__"
    spec = importlib.util.spec_from_file_location(name, file)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {file!r} in a hosting process")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    _loaded_scripts[file] = mod.__dict__
    return mod.__dict__


def _rebuild_function(code: bytes, module: str, file: str | None, name: str, qualname: str,
                      defaults: tuple[Any, ...] | None, kwdefaults: dict[str, Any] | None,
                      cells: tuple[Any, ...], attrs: dict[str, Any] | None) -> types.FunctionType:
    closure = tuple(types.CellType() if isinstance(v, str) and v == _EMPTY else types.CellType(v)
                    for v in cells) or None
    fn = types.FunctionType(marshal.loads(code), _module_globals(module, file), name, defaults,
                            closure)
    fn.__kwdefaults__ = kwdefaults
    fn.__qualname__ = qualname
    if attrs:
        fn.__dict__.update(attrs)
    return fn


# ---- exceptions: to plain data and back ----


def _sendable(value: object) -> bool:
    """Whether the payload codec can carry ``value``."""
    try:
        wire.pack(value, copy=False)
    except Exception:
        return False
    return True


def _plain(value: object) -> object | None:
    """Return ``value`` if the payload codec can carry it, else None."""
    return value if _sendable(value) else None


def encode_exception(exc: BaseException, cause: bool = False) -> dict[str, Any]:
    """Describe ``exc`` as plain data: type name, args, attributes, frames and text.

    With ``cause``, its ``__cause__`` is described too (one level), for an
    error such as ``RankError`` whose message points at its cause's traceback.
    """
    tb = traceback.extract_tb(exc.__traceback__)[-_MAX_FRAMES:]
    state = {k: v for k, v in getattr(exc, "__dict__", {}).items()
             if not k.startswith("__") and _sendable(v) and k != "remote_traceback"}
    data: dict[str, Any] = {
        "module": type(exc).__module__,
        "qualname": type(exc).__qualname__,
        "args": _plain(list(exc.args)),
        "state": state,
        "str": _safe_str(exc),
        "frames": [[f.filename, f.lineno or 1, f.name] for f in tb],
        "text": "".join(traceback.format_exception(exc)),
    }
    if cause and exc.__cause__ is not None:
        data["cause"] = encode_exception(exc.__cause__)
    return data


def _safe_str(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception:
        return f"<unprintable {type(exc).__name__}>"


def _find_type(module: str, qualname: str) -> type[BaseException] | None:
    mod = builtins if module == "builtins" else sys.modules.get(module)
    obj: Any = mod
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
    if isinstance(obj, type) and issubclass(obj, BaseException):
        return obj
    return None


def decode_exception(data: dict[str, Any], where: str) -> BaseException:
    """Rebuild an exception described by ``encode_exception``, traceback included.

    ``where`` (e.g. ``"process 1 (pid 42)"``) is added as a note.
    """
    cls = _find_type(str(data.get("module")), str(data.get("qualname")))
    args = data.get("args")
    args = tuple(args) if isinstance(args, list) else None
    raw_state = data.get("state")
    state: dict[str, Any] = raw_state if isinstance(raw_state, dict) else {}
    text = str(data.get("str", ""))
    exc: Any = _rebuilt(cls, args, state, text) if cls is not None else None
    if exc is None:
        name = str(data.get("qualname", "Error")).rpartition(".")[2] or "Error"
        remote = type(name, (RemoteError,), {"remote_type": f"{data.get('module')}.{data.get('qualname')}"})
        exc = remote(text)
    frames = data.get("frames")
    if isinstance(frames, list):
        tb = _fake_traceback(frames)
        if tb is not None:
            exc = exc.with_traceback(tb)
    remote_text = str(data.get("text", ""))
    try:
        exc.remote_traceback = remote_text
    except (AttributeError, TypeError):
        pass
    try:
        exc.remote_where = where
    except (AttributeError, TypeError):
        pass
    cause = data.get("cause")
    if isinstance(cause, dict):
        exc.__cause__ = decode_exception(cause, where)
    return exc  # type: ignore[no-any-return]


def _rebuilt(cls: type[BaseException], args: tuple[Any, ...] | None, state: dict[str, Any],
             text: str) -> BaseException | None:
    """Try the constructor, then a bare instance with args and attributes; keep the first that
    prints as the original did."""
    if args is not None:
        try:
            exc = cls(*args)
            if state:
                exc.__dict__.update(state)
            if _safe_str(exc) == text:
                return exc
        except Exception:
            pass
    try:
        exc = cls.__new__(cls)
        BaseException.__init__(exc, *(args if args is not None else (text,)))
        if state:
            exc.__dict__.update(state)
    except Exception:
        return None
    return exc if _safe_str(exc) == text else None


class _Raise(Exception):
    pass


def _statement(filename: str, lineno: int) -> str:
    """A raise statement as wide as the real line, so tracebacks underline nothing."""
    line = linecache.getline(filename, lineno).rstrip()
    width = len(line.strip())
    return "raise (__exc__" + " " * max(0, width - 15) + ")"


def _fake_traceback(frames: list[Any]) -> types.TracebackType | None:
    """Build a traceback whose entries point at the remote frames' files, lines and names."""
    tb: types.TracebackType | None = None
    for entry in reversed(frames):
        try:
            filename, lineno, name = str(entry[0]), max(int(entry[1]), 1), str(entry[2])
            code = compile("\n" * (lineno - 1) + _statement(filename, lineno), filename, "exec")
            code = code.replace(co_name=name)
            try:
                exec(code, {"__exc__": _Raise, "__name__": "__simcluster_remote__"})
            except _Raise as caught:
                inner = caught.__traceback__
                assert inner is not None and inner.tb_next is not None
                frame_tb = inner.tb_next
            tb = types.TracebackType(tb, frame_tb.tb_frame, frame_tb.tb_lasti, frame_tb.tb_lineno)
        except Exception:
            continue
    return tb


# ---- return values: what the codec would flatten ----

_TAG: Final = "\x00simcluster"  # the one key of a dict standing for a richer value


def lower_result(value: Any, depth: int = 0) -> Any:
    """Spell namedtuples, sets and frozensets in a rank's return value as tagged dicts.

    The payload codec sends a namedtuple as a plain tuple and refuses sets;
    return values are not messages, so they keep their types as they do on
    the memory transport (``raise_result`` undoes this in the caller).
    """
    if depth > 64:
        return value
    t = type(value)
    if t is list:
        return [lower_result(v, depth + 1) for v in value]
    if t is dict:
        return {k: lower_result(v, depth + 1) for k, v in value.items()}
    if t is tuple:
        return tuple(lower_result(v, depth + 1) for v in value)
    if isinstance(value, tuple) and hasattr(t, "_fields"):
        return {_TAG: ["namedtuple", t.__module__, t.__qualname__,
                       [lower_result(v, depth + 1) for v in value]]}
    if t is set or t is frozenset:
        return {_TAG: [t.__name__, [lower_result(v, depth + 1) for v in value]]}
    return value


def raise_result(value: Any, depth: int = 0) -> Any:
    """Undo ``lower_result``: rebuild namedtuples whose type this process knows, and sets."""
    if depth > 64:
        return value
    t = type(value)
    if t is list:
        return [raise_result(v, depth + 1) for v in value]
    if t is tuple:
        return tuple(raise_result(v, depth + 1) for v in value)
    if t is dict:
        tagged = value.get(_TAG) if len(value) == 1 else None
        if isinstance(tagged, list) and tagged:
            return _untag(tagged, depth)
        return {k: raise_result(v, depth + 1) for k, v in value.items()}
    return value


def _untag(tagged: list[Any], depth: int) -> Any:
    kind = tagged[0]
    if kind == "namedtuple" and len(tagged) == 4:
        items = [raise_result(v, depth + 1) for v in tagged[3]]
        mod = sys.modules.get(str(tagged[1]))
        cls: Any = mod
        for part in str(tagged[2]).split("."):
            cls = getattr(cls, part, None)
        if isinstance(cls, type) and issubclass(cls, tuple) and hasattr(cls, "_make"):
            try:
                return cls._make(items)
            except Exception:
                pass
        return tuple(items)
    if kind in ("set", "frozenset") and len(tagged) == 2:
        items = [raise_result(v, depth + 1) for v in tagged[1]]
        try:
            return set(items) if kind == "set" else frozenset(items)
        except TypeError:
            return items
    return {_TAG: tagged}
