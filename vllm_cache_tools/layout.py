"""Where the recorder writes, shared by the writer (inside vLLM) and the readers (the CLI).
Standard library only: this module is imported in every vLLM process."""

from __future__ import annotations

STATE_DIRNAME = ".vllm-cache-tools"
"""Under ``torch_compile_cache``: the recorder's ledger and source snapshots (not an entry)."""
LEDGER_DIRNAME = "ledger"
"""One append-only JSON-lines file per host (``<hostname>.jsonl``): no cross-host appends on
shared (NFS) roots."""
SOURCES_DIRNAME = "sources"
"""Traced-file snapshots, content-addressed (``<sha256>``), shared by every manifest."""
MANIFEST_PREFIX = "vct-manifest."
MANIFEST_SUFFIX = ".json"
"""``vct-manifest.<digest>.json`` beside each entry's artifacts: in the backend tree in
``<key>/rank_i_j/<prefix>/``, in the AOT tree in ``<sha256>/rank_i_j/`` (beside ``model``).
The digest covers what was recorded (not when), so identical starts share one file and a start
that differs writes its own: no record of another start is ever overwritten."""
SCHEMA = 1
RUNTIME_FIELDS = frozenset({
    # Written by vLLM while it compiles or loads, not chosen by the user: they differ between
    # a start that compiled and one that loaded, or between entries, by construction. Left out
    # of manifests (the entry's path and the traced files are recorded on their own).
    "compilation_config.local_cache_dir", "compilation_config.cache_dir",
    "compilation_config.traced_files", "compilation_config.compilation_time",
    "compilation_config.static_forward_context", "compilation_config.enabled_custom_ops",
    "compilation_config.disabled_custom_ops", "compilation_config.static_all_moe_layers",
    "compilation_config.bs_to_padded_graph_size", "compilation_config.encoder_compilation_time",
})
SNAPSHOT_CAP = 512 * 1024
"""Traced files larger than this are recorded by hash and size only."""


def is_manifest_name(name: str) -> bool:
    return name.startswith(MANIFEST_PREFIX) and name.endswith(MANIFEST_SUFFIX)
