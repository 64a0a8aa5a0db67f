"""What the fuzzer feeds and to which reader: each target has a corpus of real files (the
shipped sample cache and logs, the GPU fixture's Triton metadata, the seeds kept under
tests/fuzz/seeds/ and, with ``--harness``, the real-vLLM test caches) and one function that
reads a mutated file the way the tool does. The contract under test: every reader returns or
raises :class:`~vllm_cache_tools.read.errors.ReadError`; anything else is a finding."""

from __future__ import annotations

import glob
import io
import os
import tarfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tests.fuzz import hostile
from tests.fuzz.mutate import line_hot_offsets, pickle_hot_offsets, pickle_skeleton

REPO = Path(__file__).resolve().parent.parent.parent
SAMPLE = REPO / "examples" / "sample_cache"
LOGS = REPO / "examples" / "sample_logs"
SEEDS = Path(__file__).resolve().parent / "seeds"
HARNESS = Path(os.environ.get("VCT_TEST_HOME", Path.home() / ".cache" /
                              "vllm-cache-tools-tests")) / "caches"


@dataclass
class Target:
    name: str
    dictionary: str
    """Key of :data:`tests.fuzz.mutate.DICTIONARIES`."""
    weight: float
    """Share of the inputs."""
    run: Callable[[bytes, Path, bytes], None]
    """(mutated input, scratch folder, the real file it came from)."""
    corpus: list[bytes] = field(default_factory=list)
    hot: list[list[int]] = field(default_factory=list)
    """Per corpus file: offsets where mutations matter (opcodes, structural characters)."""


def _files(*patterns: str, harness: bool, harness_patterns: tuple[str, ...] = ()) -> list[bytes]:
    paths: list[str] = []
    for p in patterns:
        paths += sorted(glob.glob(p, recursive=True))
    if harness:
        for p in harness_patterns:
            paths += sorted(glob.glob(str(HARNESS / "*" / "root" / p), recursive=True))
    out, seen = [], set()
    for p in paths:
        data = Path(p).read_bytes()
        if data not in seen:
            seen.add(data)
            out.append(data)
    return out


def _hostile_seeds(kind: str, limit: int = 256 * 1024) -> list[bytes]:
    out = []
    for k, build in hostile.ARTIFACTS.values():
        if k == kind:
            data = build()
            if len(data) <= limit:
                out.append(data)
    return out


def _triton_jsons() -> list[bytes]:
    tgz = REPO / "tests" / "fixtures" / "gpu" / "h200-triton-cache.tar.gz"
    out = []
    with tarfile.open(tgz) as tar:
        for m in tar.getmembers():
            if m.isfile() and m.name.endswith(".json") and len(out) < 40:
                f = tar.extractfile(m)
                if f is not None:
                    out.append(f.read())
    return out


# ---------------------------------------------------------------------------------- readers


def _write(folder: Path, name: str, data: bytes) -> Path:
    p = folder / name
    p.write_bytes(data)
    return p


def run_factors(data: bytes, d: Path, base: bytes) -> None:
    from vllm_cache_tools.read.factors import read_factors
    read_factors(_write(d, "cache_key_factors.json", data))


def run_compile_cache(data: bytes, d: Path, base: bytes) -> None:
    from vllm_cache_tools.read.compile_cache import read_compile_cache
    read_compile_cache(_write(d, "vllm_compile_cache.py", data))


def run_graph(data: bytes, d: Path, base: bytes) -> None:
    from vllm_cache_tools.read.graph import model_file_from_head, read_graph
    model_file_from_head(data[:256 * 1024])
    read_graph(_write(d, "computation_graph.py", data))


def run_graphdiff(data: bytes, d: Path, base: bytes) -> None:
    from vllm_cache_tools.analyze.graph_diff import diff_graphs
    diff_graphs(base.decode("utf-8", "replace"), data.decode("utf-8", "replace"))


def run_manifest(data: bytes, d: Path, base: bytes) -> None:
    from vllm_cache_tools.read.manifest import read_manifest
    read_manifest(_write(d, "vct-manifest.0123456789abcdef.json", data))


def run_ledger(data: bytes, d: Path, base: bytes) -> None:
    from vllm_cache_tools.store.usage import apply_usage, usage
    cc = d / "torch_compile_cache"
    ledger = cc / ".vllm-cache-tools" / "ledger"
    ledger.mkdir(parents=True, exist_ok=True)
    (ledger / "host.jsonl").write_bytes(data)
    use = usage(cc)
    apply_usage([], use)


def run_ledger_stream(data: bytes, d: Path, base: bytes) -> None:
    from vllm_cache_tools.read import ledger_stream
    p = _write(d, "host.jsonl", data)
    for _ in ledger_stream.read_rows(p):
        pass


def run_logs(data: bytes, d: Path, base: bytes) -> None:
    from vllm_cache_tools.read.logs import parse_text
    for start in parse_text(data):
        for _, fn in start.functions:
            fn.env_values  # noqa: B018 - a lazy property: reading it parses the values


def run_model(data: bytes, d: Path, base: bytes) -> None:
    from vllm_cache_tools.read.aot_model import read_aot_model
    from vllm_cache_tools.read.errors import ReadError
    p = _write(d, "model", data)
    refused: ReadError | None = None
    for full in (True, False):  # both reads, whatever the first says
        try:
            read_aot_model(p, full=full)
        except ReadError as exc:
            refused = refused or exc
    if refused is not None:
        raise refused


def run_triton(data: bytes, d: Path, base: bytes) -> None:
    from vllm_cache_tools.read.triton import read_triton_meta
    read_triton_meta(_write(d, "kernel.json", data))


def build_targets(harness: bool = False) -> dict[str, Target]:
    """Every target with its corpus (read once per process)."""
    bb = "torch_compile_cache/*/rank_*/*/"
    graphs = _files(str(SAMPLE / bb / "computation_graph.py"), harness=harness,
                    harness_patterns=(bb + "computation_graph.py",))
    models = _files(str(SAMPLE / "torch_compile_cache/torch_aot_compile/*/rank_*/model"),
                    harness=harness,
                    harness_patterns=("torch_compile_cache/torch_aot_compile/*/rank_*/model",))
    skeletons = [pickle_skeleton(m) for m in models]
    targets = [
        Target("factors", "json", 0.10, run_factors,
               _files(str(SAMPLE / bb / "cache_key_factors.json"), harness=harness,
                      harness_patterns=(bb + "cache_key_factors.json",))
               + _hostile_seeds("cache_key_factors.json")),
        Target("compile-cache", "literal", 0.10, run_compile_cache,
               _files(str(SEEDS / "*vllm_compile_cache.seed"), harness=harness,
                      harness_patterns=(bb + "vllm_compile_cache.py",))
               + _hostile_seeds("vllm_compile_cache.py")),
        Target("graph", "graph", 0.12, run_graph,
               graphs + _hostile_seeds("computation_graph.py")),
        Target("graphdiff", "graph", 0.02, run_graphdiff, [g[:16384] for g in graphs]),
        Target("manifest", "json", 0.12, run_manifest,
               _files(str(SAMPLE / "torch_compile_cache/**/vct-manifest.*.json"),
                      harness=harness,
                      harness_patterns=("torch_compile_cache/**/vct-manifest.*.json",))
               + _hostile_seeds("vct-manifest.0123456789abcdef.json")),
        Target("ledger", "json", 0.10, run_ledger,
               [*_files(str(SAMPLE / "torch_compile_cache/.vllm-cache-tools/ledger/*.jsonl"),
                        harness=harness,
                        harness_patterns=("torch_compile_cache/.vllm-cache-tools/ledger/"
                                          "*.jsonl",)),
                hostile.ledger_lines(16 * 1024)]),
        Target("logs", "log", 0.12, run_logs, _files(str(LOGS / "*.log"), harness=False)),
        Target("pickle", "pickle", 0.22, run_model,
               skeletons * 4 + models + _hostile_seeds("model")),
        Target("triton", "json", 0.05, run_triton, _triton_jsons()),
    ]
    try:
        import vllm_cache_tools.read.ledger_stream  # noqa: F401  (another session's reader)
        targets.append(Target("ledger-stream", "json", 0.05, run_ledger_stream,
                              targets[5].corpus))
    except ImportError:
        pass
    for t in targets:
        t.hot = [pickle_hot_offsets(c) if t.dictionary == "pickle" else line_hot_offsets(c)
                 for c in t.corpus]
    return {t.name: t for t in targets}


def corpus_summary(targets: dict[str, Target]) -> str:
    buf = io.StringIO()
    for t in targets.values():
        buf.write(f"  {t.name:14s} {len(t.corpus):3d} files, "
                  f"{sum(map(len, t.corpus)) / 1e6:6.2f} MB\n")
    return buf.getvalue()
