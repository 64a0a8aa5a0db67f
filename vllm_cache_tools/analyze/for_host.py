"""``predict --for-host``: the folders another host's vLLM would name for these arguments,
from that host's recorded key inputs (:mod:`.host_record`), without its vLLM.

Each key input is one :class:`HostFactor`: ``recomputed`` here from recorded inputs with the
host's release's recipe (env factors, traced sources, the forward), ``recorded`` (taken as
that host's vLLM computed it: it needs that host's vLLM, torch or device to recompute, and is
valid only while what it depends on is the same), or ``not reproducible`` (the arguments or
environment differ from the record in a way only that host's vLLM can hash). A key is named
when every input it needs is recomputed or recorded; the inputs that were taken on trust are
listed beside it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vllm_cache_tools.analyze.host_record import HostRecord, host_module_path
from vllm_cache_tools.keys.hardware import PLATFORM_ENV
from vllm_cache_tools.keys.recipes import aot_key, model_hash_key
from vllm_cache_tools.keys.versions import backend_key, code_hash, env_hash, recipes_for
from vllm_cache_tools.layout import AOT_DIRNAME, short_key
from vllm_cache_tools.read import jsontext
from vllm_cache_tools.read.aot_model import AotModelInfo, read_aot_model
from vllm_cache_tools.read.errors import ReadError
from vllm_cache_tools.read.manifest import misnamed_snapshot, source_snapshot
from vllm_cache_tools.read.noatime import read_source_text

RECOMPUTED, RECORDED, NOT_REPRODUCIBLE = "recomputed", "recorded", "not reproducible"
VLLM_COMPILE = 3
# Compiler-side variables predict's environment may carry; cache folders do not count.
_INDUCTOR_VARS = ("TORCHINDUCTOR_", "TORCH_COMPILE_", "TRITON_")
_NOT_INDUCTOR = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "TORCHINDUCTOR_COMPILE_THREADS")
# Short argument spellings of vLLM's CLI (vllm/engine/arg_utils.py).
_ALIASES = {"cc": "compilation_config", "tp": "tensor_parallel_size",
            "pp": "pipeline_parallel_size", "dp": "data_parallel_size", "q": "quantization"}
# EngineArgs fields whose config field has another name.
_FIELD_OF = {"attention_backend": ("attention_config", "backend"),
             "kv_cache_dtype": ("cache_config", "cache_dtype")}


@dataclass(frozen=True)
class HostFactor:
    name: str
    """``env_hash``, ``config_hash``, ``compiler_hash``, ``code_hash``, ``model_key``."""
    value: str | None
    status: str
    detail: str


@dataclass(frozen=True)
class HostPrediction:
    record: HostRecord
    factors: tuple[HostFactor, ...]
    backend_key: str | None
    aot_key: str | None
    backend_detail: str
    aot_detail: str
    present: dict[str, bool | None]
    """tree -> whether the folder is in the given root (None: no key or no root)."""

    def factor(self, name: str) -> HostFactor:
        return next(f for f in self.factors if f.name == name)

    def trusted(self, tree: str) -> list[HostFactor]:
        """The inputs of ``tree``'s key that were not recomputed here."""
        names = (("env_hash", "config_hash", "code_hash", "compiler_hash") if tree == "backend"
                 else ("env_hash", "config_hash", "model_key"))
        return [f for f in self.factors if f.name in names and f.status != RECOMPUTED]


def _parse_like(text: str, recorded: Any) -> tuple[Any, str]:
    """``text`` (an environment value) as the type of the recorded factor value."""
    if isinstance(recorded, bool):
        return text.strip().lower() in ("1", "true", "yes", "on"), "bool"
    if isinstance(recorded, int):
        return int(text), "int"
    if isinstance(recorded, float):
        return float(text), "float"
    if recorded is None or isinstance(recorded, str):
        return text, "str"
    raise ValueError(f"a {type(recorded).__name__} value")


def _env_factor(rec: HostRecord, env: Mapping[str, str], recipe: Any) -> HostFactor:
    if rec.env is None:
        return HostFactor("env_hash", None, NOT_REPRODUCIBLE, "the record has no env factors "
                          "(make the profile with the vLLM arguments: host-profile -- ARGS)")
    factors = dict(rec.env)
    changed, failed = [], []
    for name in sorted(factors):
        here = env.get(name)
        if here is None or here == rec.process_env.get(name):
            continue
        try:
            factors[name], kind = _parse_like(here, factors[name])
            changed.append(f"{name}={here} (as {kind})")
        except ValueError as exc:
            failed.append(f"{name}={here}: recorded as {exc}")
    kept = sorted(k for k in rec.process_env if k in factors and k not in env)
    value = env_hash(recipe, factors)
    if failed:
        return HostFactor("env_hash", None, NOT_REPRODUCIBLE,
                          "only that host's vLLM parses " + "; ".join(failed))
    detail = f"{recipe.env_hash} over the {len(factors)} recorded env factors"
    if rec.platform_env:
        detail += "; set by that host's vLLM platform: " + ", ".join(
            f"{k}={v}" for k, v in sorted(rec.platform_env.items()) if k in factors)
    machine = [f"{k}={factors[k]} ({PLATFORM_ENV[k]})" for k in sorted(PLATFORM_ENV)
               if k in factors and factors[k] not in (None, False, "auto", "")
               and k not in rec.platform_env]
    if machine:
        detail += "; hardware-driven: " + ", ".join(machine)
    if changed:
        detail += "; set here: " + ", ".join(changed) + " (parsed like the recorded value, " \
                  "not by that host's vLLM)"
    if kept:
        detail += "; kept from the record: " + ", ".join(kept)
    return HostFactor("env_hash", value, RECOMPUTED, detail.replace("; ; ", "; "))


def _arg_pairs(args: Sequence[str]) -> tuple[str | None, list[tuple[str, Any]]]:
    """(model, [(EngineArgs field, value)]) of ``vllm serve`` style arguments."""
    model, out, i = None, [], 0
    while i < len(args):
        a = args[i]
        if not a.startswith("-"):
            model = model or a
            i += 1
            continue
        name, eq, val = a.lstrip("-").partition("=")
        name = _ALIASES.get(name, name).replace("-", "_")
        if eq:
            value: Any = val
        elif i + 1 < len(args) and not args[i + 1].startswith("-"):
            value, i = args[i + 1], i + 1
        else:
            value = not name.startswith("no_")
            name = name[3:] if name.startswith("no_") else name
        if name == "model":
            model = str(value)
        else:
            out.append((name, value))
        i += 1
    return model, out


def _same_value(given: Any, recorded: Any) -> bool:
    if isinstance(given, bool) or isinstance(recorded, bool):
        return str(given).lower() == str(recorded).lower()
    if isinstance(given, str) and given.lstrip().startswith("{"):
        try:
            obj = jsontext.loads(given, "a given value")
        except ValueError:
            return False
        return isinstance(recorded, dict) and all(
            _same_value(v, recorded.get(k)) for k, v in obj.items())
    g, r = str(given), str(recorded)
    if g == r or r.endswith("." + g) or r.lower().endswith("." + g.lower()):
        return True  # torch.bfloat16, AttentionBackendEnum.TRITON_ATTN
    try:
        return float(g) == float(r)
    except ValueError:
        return False


def _recorded_field(rec: HostRecord, name: str) -> tuple[bool, Any]:
    if name in _FIELD_OF:
        part, fld = _FIELD_OF[name]
        f = rec.config_fields.get(part) or {}
        return (fld in f), f.get(fld)
    if name in rec.config_fields and name.endswith("_config"):  # -cc '{...}'
        return True, rec.config_fields[name]
    for fields in rec.config_fields.values():
        if name in fields:
            return True, fields[name]
    return False, None


def _config_factor(rec: HostRecord, args: Sequence[str], where: str) -> HostFactor:
    if rec.config_hash is None:
        return HostFactor("config_hash", None, NOT_REPRODUCIBLE, "the record has no config "
                          "hash (make the profile with the vLLM arguments)")
    if rec.args is not None:
        if list(args) == list(rec.args):
            return HostFactor("config_hash", rec.config_hash, RECORDED,
                              f"the profile's, for the same arguments; {where}")
        return HostFactor("config_hash", None, NOT_REPRODUCIBLE,
                          f"the profile was made for other arguments ({' '.join(rec.args)}); "
                          f"{where}")
    model, pairs = _arg_pairs(args)
    differ = []
    if model is not None and not _same_value(model, (rec.config_fields.get("model_config")
                                                     or {}).get("model")):
        differ.append(f"model {model}")
    for name, value in pairs:
        known, recorded = _recorded_field(rec, name)
        if not known:
            differ.append(f"--{name.replace('_', '-')} (no such field recorded)")
        elif not _same_value(value, recorded):
            differ.append(f"--{name.replace('_', '-')} {value} (recorded: {recorded})")
    if differ:
        return HostFactor("config_hash", None, NOT_REPRODUCIBLE,
                          "arguments differ from the recorded start: " + "; ".join(differ)
                          + f"; {where}")
    return HostFactor("config_hash", rec.config_hash, RECORDED,
                      "the recorded start's: every argument given equals its recorded field "
                      "(arguments not given are assumed at the values that start had); "
                      + where)


def _compiler_factor(rec: HostRecord, env: Mapping[str, str]) -> HostFactor:
    set_here = sorted(k for k in env if k.startswith(_INDUCTOR_VARS) and k not in _NOT_INDUCTOR)
    if rec.compiler_hash is None:
        return HostFactor("compiler_hash", None, NOT_REPRODUCIBLE,
                          "the record has no Inductor factors (no backend manifest)")
    if set_here:
        return HostFactor("compiler_hash", None, NOT_REPRODUCIBLE,
                          "set here: " + ", ".join(set_here) + "; only that host's torch "
                          "turns them into Inductor's config")
    p, v = rec.platform, rec.versions
    what = ", ".join(f"{k} {x}" for k, x in (("device", p.get("device")),
                                             ("CUDA", p.get("cuda")),
                                             ("torch", v.get("torch")),
                                             ("triton", v.get("triton"))) if x)
    how = ("from the profile's Inductor factors" if rec.source == "host-profile"
           else "as that host's torch computed it")
    return HostFactor("compiler_hash", rec.compiler_hash,
                      RECOMPUTED if rec.source == "host-profile" else RECORDED,
                      f"{how}: CacheBase.get_system() and torch_key() of {what}")


def _aot_sources(cc: Path, keys: Sequence[str], qualname: str
                 ) -> tuple[str, AotModelInfo] | None:
    """An AOT artifact here of that forward: the one at ``keys`` first, else the newest."""
    top = cc / AOT_DIRNAME
    try:
        others = sorted(top.iterdir(), key=lambda p: -p.stat().st_mtime)
    except OSError:
        return None
    for d in [top / k for k in keys if k] + others:
        for model in sorted(d.glob("rank_*/model")):
            try:
                info = read_aot_model(model, full=True)
            except ReadError:
                continue
            if info.qualname == qualname and info.inlined_sources:
                return d.name, info
    return None


def _code_from_aot(rec: HostRecord, recipe: Any, cc: Path | None, aot_key_guess: str | None
                   ) -> HostFactor:
    """A profile's code hash: the traced sources an AOT artifact here holds, at the paths
    that host imports them from (the link FACTS.md verified: same modules, same contents)."""
    if cc is None or rec.forward is None or not rec.module_paths:
        return HostFactor("code_hash", None, NOT_REPRODUCIBLE,
                          "only a compile names the traced files: give a backend manifest "
                          "of that host, or a root here holding an AOT entry of this model")
    found = _aot_sources(cc, [aot_key_guess or ""], rec.forward[0])
    if found is None:
        return HostFactor("code_hash", None, NOT_REPRODUCIBLE,
                          f"no AOT entry of {rec.forward[0]} here to read the traced "
                          "sources from")
    key, info = found
    files: dict[str, str | None] = {}
    for s in info.inlined_sources:
        path = host_module_path(rec, s.module)
        if path is None:
            return HostFactor("code_hash", None, NOT_REPRODUCIBLE,
                              f"{s.module} is not among the modules that host imported")
        files.setdefault(path, s.content)
    return HostFactor("code_hash", code_hash(recipe, files), RECOMPUTED,
                      f"{recipe.code_hash} over the {len(files)} traced files of AOT entry "
                      f"{short_key(key)} here, at that host's paths (under "
                      f"{rec.platform.get('prefix')}); assumes that host's files equal "
                      "those copies")


def _code_factor(rec: HostRecord, recipe: Any, cc: Path | None = None,
                 aot_key_guess: str | None = None) -> HostFactor:
    if rec.compilation_mode is not None and rec.compilation_mode != VLLM_COMPILE:
        return HostFactor("code_hash", None, RECOMPUTED, "no backend tree outside "
                          "VLLM_COMPILE mode")
    if not rec.traced_files:
        return _code_from_aot(rec, recipe, cc, aot_key_guess)
    cc = Path(rec.compile_cache) if rec.compile_cache else None
    files: dict[str, str | None] = {}
    missing = misnamed = 0
    for path, sha in rec.traced_files:
        text = source_snapshot(cc, sha) if cc is not None and sha else None
        if text is None and cc is not None and sha and misnamed_snapshot(cc, sha):
            misnamed += 1  # not the recorder's: skipped
        if text is None and sha:
            local = read_source_text(path)  # the same path here, with the same content
            ok = local is not None and hashlib.sha256(local.encode()).hexdigest() == sha
            text = local if ok else None
        missing += text is None and sha is not None
        files[path] = text
    value = code_hash(recipe, files)
    if missing or value != rec.code_hash:
        why = (f"{missing} of {len(files)} traced files' contents are not here" if missing
               else "recomputing it gave another value")
        if misnamed:
            why += (f" ({misnamed} recorder snapshot(s) whose content is not their name's "
                    "sha256 were skipped)")
        return HostFactor("code_hash", rec.code_hash, RECORDED,
                          f"as that host's vLLM logged it; {why}; valid while those files "
                          "are unchanged there")
    return HostFactor("code_hash", value, RECOMPUTED,
                      f"{recipe.code_hash} over {len(files)} traced files, paths as on that "
                      "host (recorder source snapshots)")


def _model_factor(rec: HostRecord) -> HostFactor:
    ver = rec.versions.get("vllm")
    if rec.forward is None or not ver:
        return HostFactor("model_key", None, NOT_REPRODUCIBLE, "the record names no compiled "
                          "forward (no AOT manifest of that start)")
    q, line = rec.forward
    return HostFactor("model_key", model_hash_key(ver, q, line), RECOMPUTED,
                      f"vLLM {ver}, {q} at line {line}")


def predict_for_host(rec: HostRecord, vllm_args: Sequence[str],
                     env: Mapping[str, str] | None = None,
                     compile_cache: Path | None = None,
                     local_vllm: str | None = None) -> HostPrediction:
    """Both keys that host's vLLM would name for ``vllm_args`` in ``env`` (variables set
    here that vLLM hashes override the record's); ``compile_cache``: where to look for the
    folders; ``local_vllm``: this environment's vLLM release, if any (said when the config
    cannot be recomputed)."""
    env = dict(env or {})
    ver = rec.versions.get("vllm") or "0.33.0"
    recipe = recipes_for(ver)
    where = (f"recomputing it needs vLLM {ver}'s config code on a "
             f"{rec.platform.get('device_type') or 'its'} platform"
             + (f" (here: vLLM {local_vllm})" if local_vllm else ""))
    f_env = _env_factor(rec, env, recipe)
    f_cfg = _config_factor(rec, vllm_args, where)
    if f_cfg.value and "; set here: " in f_env.detail:
        f_cfg = HostFactor(f_cfg.name, f_cfg.value, f_cfg.status, f_cfg.detail + "; a "
                           "variable set here may change the config there too: not checked")
    f_comp = _compiler_factor(rec, env)
    f_model = _model_factor(rec)
    bkey = akey = None
    if rec.mega_aot and rec.aot_inductor_repr is None:
        adetail = ("not named: the Inductor factors enter this AOT key (mega artifact) and "
                   "the record has only their hash")
    elif all(f.value for f in (f_env, f_cfg, f_model)):
        akey = aot_key(str(f_env.value), str(f_cfg.value), str(f_model.value),
                       rec.aot_inductor_repr if rec.mega_aot else None)
        adetail = ""
    else:
        adetail = "not named: " + ", ".join(f.name for f in (f_env, f_cfg, f_model)
                                             if not f.value)
    f_code = _code_factor(rec, recipe, compile_cache, akey)
    factors = (f_env, f_cfg, f_comp, f_code, f_model)
    if rec.compilation_mode is not None and rec.compilation_mode != VLLM_COMPILE:
        bdetail = "not VLLM_COMPILE mode: no backend tree"
    elif all(f.value for f in (f_env, f_cfg, f_code, f_comp)):
        bkey = backend_key(recipe, f_env.value, str(f_cfg.value), f_code.value, f_comp.value)
        bdetail = ""
    else:
        bdetail = "not named: " + ", ".join(f.name for f in (f_env, f_cfg, f_code, f_comp)
                                             if not f.value)
    for tree, key in (("backend", bkey), ("aot", akey)):
        if key and rec.recorded_keys.get(tree):
            same = key == rec.recorded_keys[tree]
            note = ("the recorded start's folder" if same else
                    f"not the recorded start's folder ({rec.recorded_keys[tree][:12]})")
            if tree == "backend":
                bdetail = note
            else:
                adetail = note
    present: dict[str, bool | None] = {"backend": None, "aot": None}
    if compile_cache is not None:
        if bkey:
            present["backend"] = (compile_cache / bkey).is_dir()
        if akey:
            present["aot"] = (compile_cache / AOT_DIRNAME / akey).is_dir()
    return HostPrediction(rec, factors, bkey, akey, bdetail, adetail, present)


__all__ = ["NOT_REPRODUCIBLE", "RECOMPUTED", "RECORDED", "HostFactor", "HostPrediction",
           "predict_for_host"]
