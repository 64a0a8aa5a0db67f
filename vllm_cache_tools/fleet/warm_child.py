"""Run by ``vllm-cache warm`` with the interpreter of the user's vLLM environment (its
source passed with ``-c``: this package need not be installed there; standard library and
vLLM only).

Builds vLLM's engine for ``vllm serve`` arguments (or the ``LLM`` class's, ``usage=llm``)
with ``--load-format dummy`` appended, so no weights are read: vLLM 0.32's ``LoadConfig``
adds no hash factors, so the compile cache keys are those of a start with real weights (the
fleet tests prove it per version against a real start). Engine start-up profiles and
compiles the model, which fills the cache; then the engine is shut down without serving.
Prints ``VLLM_CACHE_TOOLS_WARM {json}`` when done."""

from __future__ import annotations

import json
import sys
import time


def build_engine_args(args: list[str], usage: str) -> tuple[object, object]:
    # As the probe builds its config (vllm_cache_tools/live/probe.py build_config).
    from vllm.engine.arg_utils import AsyncEngineArgs, EngineArgs
    from vllm.usage.usage_lib import UsageContext
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    argv = list(args)
    if argv and not argv[0].startswith("-"):
        argv = ["--model", argv[0], *argv[1:]]  # `vllm serve MODEL ...`
    argv += ["--load-format", "dummy"]  # the last one given wins
    cls = AsyncEngineArgs if usage == "serve" else EngineArgs
    ns = cls.add_cli_args(FlexibleArgumentParser()).parse_args(argv)
    ctx = UsageContext.OPENAI_API_SERVER if usage == "serve" else UsageContext.LLM_CLASS
    return cls.from_cli_args(ns), ctx


def main() -> None:
    req = json.loads(sys.argv[1])
    t0 = time.time()
    try:
        import vllm  # noqa: F401
    except ModuleNotFoundError as exc:  # one line, no traceback: warm names the interpreter
        if exc.name not in ("vllm", "torch"):
            raise
        print(f"No module named {exc.name!r}", file=sys.stderr, flush=True)
        sys.exit(2)
    engine_args, ctx = build_engine_args(req["args"], req.get("usage", "serve"))
    from vllm.v1.engine.llm_engine import LLMEngine

    engine = LLMEngine.from_engine_args(engine_args, usage_context=ctx)
    ready = time.time()
    try:
        engine.engine_core.shutdown()
    except Exception as exc:  # the cache is written; a noisy shutdown changes nothing
        print(f"VLLM_CACHE_TOOLS_WARM_NOTE shutdown: {type(exc).__name__}: {exc}",
              flush=True)
    print("VLLM_CACHE_TOOLS_WARM " + json.dumps({"engine_s": round(ready - t0, 3)}),
          flush=True)


if __name__ == "__main__":
    main()
