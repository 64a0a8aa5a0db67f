"""``vllm-cache ls``: every entry of both trees with sizes, ages, ranks and state. The verb's
options live here; what it does is :mod:`vllm_cache_tools.cli.ls_run`, imported when it runs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from vllm_cache_tools.cli.options import RootOpt, StorageOpt

__all__ = ["LS_COLUMNS", "RootOpt", "ls", "model_label"]  # noqa: F822 (the first and last: __getattr__)


def ls(
    refs: Annotated[list[str] | None, typer.Argument(
        metavar="KEY", help="Only these entries: keys, unique key prefixes (as listed) "
        "or paths inside entries.", show_default=False)] = None,
    root: RootOpt = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
    = False,
    sort: Annotated[str, typer.Option(
        "--sort", help="size | modified | last-used | key")] = "last-used",
    filter_expr: Annotated[str | None, typer.Option(
        "--filter", help="Conditions joined by commas, e.g. 'layout=aot,size>1M,age>7d'. "
        "Fields: key layout state model hardware torch vllm rank prefix path (= != ~ !~), "
        "size disk files (> < >= <= = !=), age mage (since last use / modification).")]
    = None,
    rescan: Annotated[bool, typer.Option(
        "--rescan", help="Walk every file of every entry afresh (sizes, counts and times "
        "new) instead of trusting the listing index's watched folders; an entry's files are "
        "parsed again where the walk finds a folder, key file or temporary file changed "
        "since its record; then the index is rewritten.")] = False,
    by_owner: Annotated[bool, typer.Option(
        "--by-owner", help="Print usage per owner (user owning the entries' files) instead "
        "of entries.")] = False,
    wide: Annotated[bool, typer.Option(
        "--wide", "-w", help="Every column, however wide the terminal (piped output always "
        "has every column).")] = False,
    all_caches: Annotated[bool, typer.Option(
        "--all-caches", help="Every JIT cache of this host, per kind: vLLM's compile cache, "
        "Inductor, Triton, FlashInfer, DeepGEMM, CUDA's ComputeCache and vLLM's other "
        "folders, each where its owner puts it (env var, else default), with size, files, "
        "age, last use, owner, and the parts of those we understand.")] = False,
    trust: Annotated[Path | None, typer.Option(
        "--trust", metavar="ALLOWED_SIGNERS", help="ls URL only: judge each entry's "
        "signature by this OpenSSH allowed_signers file (default $VLLM_CACHE_TOOLS_TRUST) and "
        "show its signer, or why it would be refused, in a SIGNER column.",
        show_default=False, readable=False, resolve_path=False)] = None,
    storage_option: StorageOpt = None,
) -> None:
    """List the compile-cache entries under a vLLM cache root.

    On a terminal the table fits its width by leaving out columns (torch, hardware, files,
    ranks, hits, layout, in that order); piped, it has every column, one line per entry. Keys
    are the shortest prefixes that name one entry (AOT keys at least 12 hex digits): paste
    them into show, rm or explain.

    The first listing of a root walks every file; later ones re-read only entries whose
    folders or key files changed (an index in the user cache dir; --rescan skips it)."""
    from vllm_cache_tools.cli.ls_run import run_ls

    run_ls(refs, root, json_out=json_out, sort=sort, filter_expr=filter_expr, rescan=rescan,
           by_owner=by_owner, wide=wide, all_caches=all_caches, trust=trust,
           storage_option=storage_option)


def __getattr__(name: str) -> Any:
    """``LS_COLUMNS`` and ``model_label``, from :mod:`.ls_run` when asked: the verbs that take
    ``RootOpt`` from here import neither the listing nor rich's tables."""
    from vllm_cache_tools.cli import ls_run

    if name == "LS_COLUMNS":
        return ls_run.ls_columns()
    if name == "model_label":
        return ls_run.model_label
    raise AttributeError(name)
