"""Every folder and file name of vLLM's cache trees and of ours, described once beside its name
(like uv's ``CacheBucket``). Standard library only: the recorder imports it in every vLLM
process.

vLLM's cache root (``$VLLM_CACHE_ROOT``, default ``~/.cache/vllm``)::

    <root>/
      torch_compile_cache/                      COMPILE_CACHE_DIRNAME
        <10-hex>/rank_<r>_<dp>/<prefix>/        the backend tree (BACKEND_KEY, RANK_DIR)
          cache_key_factors.json, computation_graph.py, vllm_compile_cache.py, artifact_*
        torch_aot_compile/<64-hex>/             the AOT tree, torch >= 2.10 (AOT_KEY)
          inductor_cache/, rank_<r>_<dp>/model
        .vllm-cache-tools/                      ours: the recorder (STATE_DIRNAME)
          ledger/<host>.jsonl, sources/<sha256>
          quarantine/<tree>-<key>-<rank>-<when>-<pid>/   files moved aside at a load failure
        .vllm-cache-trash/locks/entries.lock    ours: prune's trash (TRASH_DIRNAME)
      torch_aot_compile/<64-hex>/               the AOT tree of vLLM 0.11.1-0.16
      modelinfos/*.json, dummy_cache            vLLM's other files (KNOWN_ROOT_ITEMS)
"""

from __future__ import annotations

COMPILE_CACHE_DIRNAME = "torch_compile_cache"
"""Under the vLLM cache root: both trees live here."""
AOT_DIRNAME = "torch_aot_compile"
"""The AOT tree: inside ``torch_compile_cache`` since vLLM 0.17, beside it in 0.11.1-0.16."""
KEY_FILES = frozenset({"model", "cache_key_factors.json", "computation_graph.py",
                       "vllm_compile_cache.py"})
"""Files vLLM reads when it loads an entry (their atime is evidence of use) and that our
readers parse (their size/mtime validate the listing index)."""
AOT_KEY_SHOWN = 12
"""Hex digits of an AOT entry's key (64) that messages show; tables show at least as many,
more where needed to stay unique. Backend keys (10 hex, the folder names vLLM logs) are shown
whole."""
TRASH_DIRNAME = ".vllm-cache-trash"
"""Ours, inside ``torch_compile_cache`` (same filesystem as the entries, so rename is
atomic): where prune moves an entry before removing it."""
LOCKS_DIRNAME = "locks"
"""Inside the trash: the entry lock file (``entries.lock``)."""
STATE_DIRNAME = ".vllm-cache-tools"
"""Under ``torch_compile_cache``: the recorder's ledger and source snapshots (not an entry)."""
LEDGER_DIRNAME = "ledger"
"""One append-only JSON-lines file per host (``<hostname>.jsonl``): no cross-host appends on
shared (NFS) roots."""
QUARANTINE_DIRNAME = "quarantine"
"""Under ``STATE_DIRNAME``: the files of an entry vLLM failed to load, moved aside by the
recorder at the failure when ``VLLM_CACHE_TOOLS_GUARD`` allows it (``recorder/quarantine.py``),
one folder per move with a ``why.json`` beside them. Never removed by the recorder."""
QUARANTINE_NOTE = "why.json"
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


def short_key(key: str) -> str:
    """An entry key as messages name it: an AOT key (64 hex) by its first
    :data:`AOT_KEY_SHOWN` digits, any other key whole."""
    return key[:AOT_KEY_SHOWN] if len(key) == 64 else key
