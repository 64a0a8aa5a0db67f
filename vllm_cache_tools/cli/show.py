"""``vllm-cache show KEY|PATH``: everything known about one entry."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from vllm_cache_tools.cli.common import console, print_json, redact_json
from vllm_cache_tools.cli.ls import RootOpt
from vllm_cache_tools.keys.entry_proof import prove_entry
from vllm_cache_tools.keys.source_link import same_source_aot_keys
from vllm_cache_tools.layout import COMPILE_CACHE_DIRNAME, short_key
from vllm_cache_tools.store.entries import read_entry
from vllm_cache_tools.store.lookup import locate_entry
from vllm_cache_tools.store.scan import scan
from vllm_cache_tools.store.types import Entry
from vllm_cache_tools.store.usage import apply_usage, usage
from vllm_cache_tools.units import human_age, human_size
from vllm_cache_tools.views.payloads import entry_detail, key_proof_document


def show(
    ref: Annotated[str, typer.Argument(metavar="KEY|PATH", help="Entry key, unique key prefix, "
                                       "or a path inside the entry.")],
    root: RootOpt = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    env: Annotated[bool, typer.Option("--env", help="Also print every raw env factor "
                                      "(human output; --json always has them).")] = False,
) -> None:
    """Show one entry: hashes, raw env factors, traced files, graphs and ranges, artifacts."""
    path = locate_entry(ref, root)
    entry = read_entry(path, deep=True)
    # The recorder's ledger, as ls reads it: hits, misses and a later last use.
    cc = path.parent if entry.layout == "backend" else path.parent.parent
    if cc.name == COMPILE_CACHE_DIRNAME:
        entry = apply_usage([entry], usage(cc))[0]
    data = entry_detail(entry)
    if entry.layout == "backend" and entry.factors is not None:
        # Proof, not timestamps: which AOT entries hold these exact compile-time sources.
        siblings = scan(path.parent, check_in_use=False).entries if path.parent.name == \
            COMPILE_CACHE_DIRNAME else ()
        data["same_sources_aot"] = same_source_aot_keys(entry, siblings, read_entry)
    data["key_proof"] = key_proof_document(prove_entry(entry, _backend_siblings(entry, path)))
    if cc.name == COMPILE_CACHE_DIRNAME:
        from vllm_cache_tools.fleet.placed import read_placement

        data["placed"] = read_placement(cc, entry.layout, entry.key)
    # Factors and manifests are vLLM's (or an older recorder's) files: they may hold a secret.
    data = redact_json(data)
    if json_out:
        print_json(data)
        return
    _render(data, show_env=env)


def _backend_siblings(entry: Entry, path: Path) -> list[Entry]:
    """Backend entries of the root that may be an AOT entry's sibling: those whose graph
    was traced from the file of its compiled forward (read in full)."""
    info = entry.aot_info
    cc = path.parent.parent
    if entry.layout != "aot" or info is None or not info.filename \
            or cc.name != COMPILE_CACHE_DIRNAME:
        return []
    tail = info.filename.split("site-packages/")[-1]
    return [read_entry(b.path, deep=True) for b in scan(cc, check_in_use=False).entries
            if b.layout == "backend" and b.model and tail in b.model]


def _kv(con: Any, key: str, value: Any) -> None:
    con.print(f"  {key:<18} {value if value not in (None, '', []) else '-'}", markup=False)


def _render_placed(con: Any, placed: dict[str, Any] | None) -> None:
    """Where unpack / pull placed the entry from, who signed it, its provenance."""
    if not placed:
        return
    _kv(con, "placed from", f"{placed.get('source')} at {placed.get('placed_at')}")
    sig = placed.get("signature") or {}
    status = sig.get("status")
    if status == "trusted":
        text = f"trusted: {sig.get('signer')} (key {sig.get('fingerprint')})"
    elif status == "unchecked":
        text = f"key {sig.get('fingerprint')}, not checked (placed without a trust policy)"
    elif status:
        text = str(status)
    else:
        text = "not checked (placed without a trust policy)"
    _kv(con, "signer", text)
    prov = placed.get("provenance")
    if prov:
        from vllm_cache_tools.fleet.provenance import provenance_line

        _kv(con, "provenance", provenance_line(prov))
        if prov.get("serve_args"):
            _kv(con, "serve args", " ".join(map(str, prov["serve_args"])))


def _render(d: dict[str, Any], show_env: bool) -> None:
    from rich.markup import escape

    # markup off (or escaped) wherever the text is the cache's: a path or value holding
    # "[abc]" was taken for a style tag and dropped
    con = console()
    con.print(f"{d['layout']} entry {d['key']}", style="bold", markup=False)
    _kv(con, "path", d["path"])
    state = d["state"] + (f" ({d['state_detail']})" if d.get("state_detail") else "")
    _kv(con, "state", state)
    _kv(con, "size", f"{human_size(d['size_bytes'])} apparent, "
        f"{human_size(d['disk_bytes'])} on disk, {d['files']} files")
    _kv(con, "ranks", ", ".join(d["ranks"]))
    _kv(con, "prefixes", ", ".join(d["prefixes"]))
    _kv(con, "created", f"{d['created']} ({d['created_source']})")
    _kv(con, "modified", d["modified"])
    _kv(con, "last used", f"{d['last_used']} (from {d['last_used_source']})")
    if d.get("hits") is not None:
        _kv(con, "ledger", f"{d['hits']} hits, {d['misses']} misses (recorder)")
    _kv(con, "torch", d["torch_version"])
    _kv(con, "vllm", d["vllm_version"] or "unknown (not recorded by vLLM)")
    _kv(con, "hardware", d["hardware"])
    _kv(con, "model", d["model"])
    kp = d.get("key_proof")
    if kp:
        _kv(con, "key proof", kp["status"] + f" ({kp['how']})"
            + (f": its content gives {kp['derived']}" if kp["status"] == "mismatch" else ""))
    _render_placed(con, d.get("placed"))
    if d["layout"] == "backend":
        h = d.get("hashes")
        if h:
            con.print("[bold]key factors[/bold] (cache_key_factors.json)")
            for k in ("env", "config", "code", "compiler"):
                _kv(con, f"{k} hash", h[k])
            chk = d.get("key_check")
            if chk:
                verdict = "matches the folder name" if chk["matches"] else (
                    f"DOES NOT match the folder name (got {chk['recomputed_key']})")
                _kv(con, "re-hashed key", f"{chk['recomputed_key']}: {verdict}")
        env = d.get("env_factors") or {}
        if env:
            con.print(f"[bold]env factors[/bold] ({len(env)} variables hashed into the env "
                      "hash" + (")" if show_env else "; --env lists them)"))
            if show_env:
                for k, v in sorted(env.items()):
                    con.print(f"  {k} = {v!r}", markup=False)
        for p in d.get("prefix_dirs", []):
            con.print(f"{p['rank']}/{p['prefix']}", style="bold", markup=False)
            _kv(con, "files", ", ".join(p["files"]))
            _kv(con, "submodules", ", ".join(p["submodules"]))
            if p["compiled"] is not None:
                for r in p["compiled"]:
                    _kv(con, f"range {r['range']}", f"graph {r['graph_index']} "
                        f"{r['compiler']} -> {r['artifact']}")
            else:
                _kv(con, "compiled graphs", "none here (stored in the AOT mega artifact)")
            if p["missing_artifacts"]:
                _kv(con, "MISSING", ", ".join(p["missing_artifacts"]))
            same = d.get("same_sources_aot")
            if same is not None and p is d["prefix_dirs"][0]:
                con.print("  compiled from the same sources as AOT entries (code hash "
                          "reproduced from their pickled sources): "
                          + (", ".join(map(short_key, same)) or "none in this root"))
            con.print(f"  graph source files ({len(p['graph_files'])}):")
            for f in p["graph_files"]:
                con.print(f"    {f}", markup=False)
    else:
        for r in d.get("ranks_detail", []):
            _kv(con, r["rank"], f"model {human_size(r['size_bytes'])}"
                + (f"  ERROR: {r['error']}" if r["error"] else ""))
        if d.get("code"):
            c = d["code"]
            _kv(con, "compiled fn", f"{c['qualname']} at {c['filename']}:{c['firstlineno']}")
            s = d["system"]
            _kv(con, "system", f"python {s['python']}, torch {s['torch']}, cuda {s['cuda']}, "
                f"triton {s['triton']}, gpu {s['gpu']}, device {s['device_type']}"
                # torch._dynamo.graph_utils._graph_device_type: the first node's value; an
                # int input gives "cpu". SystemInfo.check_compatibility then compares only
                # the Python and torch versions (not CUDA, Triton or the GPU name).
                + (" (torch's guess from the graph's first value, not the hardware: on load "
                   "torch then checks only Python and torch versions)"
                   if s["device_type"] == "cpu" and s.get("gpu") not in (None, "", "None")
                   else ""))
        comp = d.get("compiled")
        if comp:
            _kv(con, "prefix", comp["prefix"])
            _kv(con, "submodules", ", ".join(comp["submodules"]))
            _kv(con, "compiled ranges", ", ".join(comp["compiled_ranges"]))
            _kv(con, "artifact", human_size(comp["artifact_bytes"]))
        srcs = d.get("traced_sources", [])
        if srcs:
            mods = sorted({s["module"] for s in srcs})
            con.print(f"[bold]traced sources[/bold] ({len(srcs)} functions in {len(mods)} "
                      "modules, compile-time copies kept in model):")
            for m in mods:
                con.print(f"    {m}", markup=False)
    mans = d.get("manifests") or []
    if mans:
        con.print(f"[bold]recorder manifests[/bold] ({len(mans)}):")
        for m in mans:
            where = f"{m['rank']}/{m['prefix']}" if m["prefix"] else m["rank"]
            t = m.get("timings") or {}
            con.print(f"    {m['digest']}  {where}  {m['created']}  {t.get('event', '')}  "
                      f"vllm {m['vllm']}", markup=False)
    for p in d.get("problems", []):
        con.print(f"  [yellow]problem[/yellow] {escape(str(p['kind']))}: "
                  f"{escape(str(p['path']))}: {escape(str(p['detail']))}")
    _ = human_age
