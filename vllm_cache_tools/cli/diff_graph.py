"""``vllm-cache diff-graph A B``: the two entries' computation graphs, noise normalised."""

from __future__ import annotations

from typing import Annotated

import typer

from vllm_cache_tools.analyze.graph_diff import diff_graphs
from vllm_cache_tools.cli.common import fail, print_json, write_out
from vllm_cache_tools.cli.ls import RootOpt
from vllm_cache_tools.read.noatime import read_noatime
from vllm_cache_tools.store.lookup import locate_entry
from vllm_cache_tools.views.payloads import with_schema


def _graph_text(ref: str, root: object, rank: str, prefix: str) -> tuple[str, str]:
    path = locate_entry(ref, root)  # type: ignore[arg-type]
    graph = path / rank / prefix / "computation_graph.py"
    if not graph.is_file():
        fail(f"{path.name}: no {rank}/{prefix}/computation_graph.py (backend entries of "
             "VLLM_COMPILE mode have one)")
    return read_noatime(graph).decode("utf-8", errors="replace"), f"{path.name}/{rank}/{prefix}"


def diff_graph(
    a: Annotated[str, typer.Argument(metavar="A", help="Entry key, prefix or path.")],
    b: Annotated[str, typer.Argument(metavar="B", help="Entry key, prefix or path.")],
    root: RootOpt = None,
    rank: Annotated[str, typer.Option("--rank", help="Rank folder.")] = "rank_0_0",
    prefix: Annotated[str, typer.Option("--prefix", help="Model part.")] = "backbone",
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Unified diff of two entries' computation_graph.py, with object addresses and
    renumbered generated names normalised, and a summary (ops added/removed, shape changes).
    Exit status: 0 identical after normalising, 1 different, 2 usage error."""
    ta, na = _graph_text(a, root, rank, prefix)
    tb, nb = _graph_text(b, root, rank, prefix)
    d = diff_graphs(ta, tb, na, nb)
    if json_out:
        print_json(with_schema("diff-graph", {
            "old": na, "new": nb, "identical": d.identical, "ops_added": d.ops_added,
            "ops_removed": d.ops_removed, "shapes_added": list(d.shapes_added),
            "shapes_removed": list(d.shapes_removed), "diff": d.diff}))
    else:
        if d.identical:
            write_out("graphs identical after normalising addresses and generated names\n")
        else:
            write_out(d.diff)
            write_out("\nsummary:\n")
            for k, v in d.ops_added.items():
                write_out(f"  + {v} x {k}\n")
            for k, v in d.ops_removed.items():
                write_out(f"  - {v} x {k}\n")
            for s in d.shapes_removed:
                write_out(f"  shape - {s}\n")
            for s in d.shapes_added:
                write_out(f"  shape + {s}\n")
    raise typer.Exit(0 if d.identical else 1)
