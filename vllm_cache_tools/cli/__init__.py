"""The ``vllm-cache`` command: a thin typer app over the library. One module per verb."""

from __future__ import annotations

import sys

import typer

from vllm_cache_tools.cli import audit as _audit
from vllm_cache_tools.cli import diff_graph as _diff_graph
from vllm_cache_tools.cli import explain as _explain
from vllm_cache_tools.cli import log as _log
from vllm_cache_tools.cli import ls as _ls
from vllm_cache_tools.cli import predict as _predict
from vllm_cache_tools.cli import prune as _prune
from vllm_cache_tools.cli import rm as _rm
from vllm_cache_tools.cli import show as _show
from vllm_cache_tools.cli import verify as _verify
from vllm_cache_tools.cli.common import fail

app = typer.Typer(
    name="vllm-cache",
    help="Inspect and manage vLLM's torch.compile cache "
         "($VLLM_CACHE_ROOT/torch_compile_cache).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
app.command("ls")(_ls.ls)
app.command("show")(_show.show)
app.command(
    "predict",
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
)(_predict.predict_cmd)
app.command("log")(_log.log)
app.command(
    "explain",
    context_settings={"allow_extra_args": False, "ignore_unknown_options": True},
)(_explain.explain)
app.command("diff-graph")(_diff_graph.diff_graph)
app.command("prune")(_prune.prune)
app.command("rm")(_rm.rm)
app.command("verify")(_verify.verify_cmd)
app.command("audit")(_audit.audit_cmd)


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        sys.exit(130)
    except BrokenPipeError:
        sys.exit(0)
    except Exception as exc:  # last resort: one line, never a traceback
        fail(f"internal error: {type(exc).__name__}: {exc}", code=3)
