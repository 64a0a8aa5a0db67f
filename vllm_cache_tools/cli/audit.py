"""``vllm-cache audit``: flag entries reused across starts whose recorded factors differ
outside vLLM's key (possible false hits)."""

from __future__ import annotations

from dataclasses import asdict, replace
from typing import Annotated

import typer

from vllm_cache_tools.analyze.audit import AuditReport, audit
from vllm_cache_tools.cli.common import print_json, warn, warn_unread, write_out
from vllm_cache_tools.cli.ls import RootOpt
from vllm_cache_tools.cli.render import shown_keys
from vllm_cache_tools.layout import short_key
from vllm_cache_tools.read.manifest import read_manifests
from vllm_cache_tools.store.locate import display_path
from vllm_cache_tools.store.scan import scan
from vllm_cache_tools.views.payloads import with_schema


def _short(v: object, n: int = 60) -> str:
    s = repr(v) if not isinstance(v, str) else v
    return s if len(s) <= n else s[: n - 3] + "..."


def _render(r: AuditReport, keys: dict[str, str]) -> None:
    w = write_out  # secrets hidden (old manifests may hold them in clear)
    w(f"audited {r.entries} entries under {display_path(r.root)}: {r.with_manifests} with "
      f"recorder manifests, {r.reused} reused by starts with different records\n")
    if not r.with_manifests:
        w("no manifests: install vllm-cache-tools in vLLM's environment (the recorder plugin "
          "is on by default) and start vLLM\n")
    possible = r.possible_false_hits
    if not possible:
        w("no possible false hits\n")
    else:
        w(f"{len(possible)} possible false hit(s): changed between starts that reused the "
          "same entry, but not part of vLLM's key\n")
    ignored = [f for f in r.findings if f not in possible]
    for title, group in (("", possible), ("ignored by vLLM on purpose (declared VLLM_* "
                                          "variables outside its env hash):", ignored)):
        if title and group:
            w(title + "\n")
        for f in group:
            key = keys.get(f.key, f.key)
            where = f"{f.rank}/{f.prefix}" if f.prefix else f.rank
            w(f"  {f.layout:<8} {key:<12} {where:<18} {f.item}: {_short(f.old)} -> "
              f"{_short(f.new)}  (manifests {f.old_manifest} -> {f.new_manifest})\n")


def audit_cmd(
    root: RootOpt = None,
    json_out: Annotated[bool, typer.Option("--json", help="Machine-readable report.")] = False,
) -> None:
    """Compare the recorder manifests of starts that reused the same entry and flag every
    recorded factor that changed although the key did not (config fields, env, versions,
    Inductor options, traced files): a "possible false hit", where vLLM may have reused a
    compiled graph built for other settings. Exit 0 when none, 1 when some were found."""
    info = scan(root, check_in_use=False)
    warn_unread(info.problems)  # a symlinked torch_compile_cache: 0 entries, not a clean root
    # Only the manifests are needed: no deep read of the artifacts.
    entries, problems = [], []
    for e in info.entries:
        ms, bad = read_manifests(e.path, e.layout)
        entries.append(replace(e, manifests=tuple(ms)))
        problems += [f"{short_key(e.key)}: {b}" for b in bad]
    # A manifest not read is a start not compared: said, so "none" is not taken as proof.
    for p in problems:
        warn(f"{p} (not audited)")
    report = audit(info.root, entries)
    if json_out:
        print_json(with_schema("audit", {
            "root": display_path(report.root), "entries": report.entries,
            "with_manifests": report.with_manifests, "reused": report.reused,
            "findings": [asdict(f) for f in report.findings], "problems": problems}))
    else:
        _render(report, shown_keys(e.key for e in info.entries))
        if problems:
            write_out(f"{len(problems)} manifest(s) could not be read and were not compared "
                      "(see the warnings)\n")
    raise typer.Exit(1 if report.possible_false_hits else 0)
