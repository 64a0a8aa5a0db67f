"""The cause engine's rules on records (fast; tests/test_miss_causes.py runs it on real caches
through every verb): never an empty list, the closest entry by sub-config hashes, what it
cannot itemise said with what would settle it, nothing said twice."""

from __future__ import annotations

from vllm_cache_tools.analyze.miss_causes import Neighbour, miss_causes
from vllm_cache_tools.store.types import Cause, KeyParts

CFG_A = {"model_config": {"hash": "m1", "fields": {"max_model_len": 128}},
         "additional_config": None}
CFG_B = {"model_config": {"hash": "m1", "fields": {"max_model_len": 128}},
         "additional_config": {"hash": "x1", "fields": {"vct_probe": 1}}}
NOW_CFG = {"model_config": {"hash": "m2", "fields": {"max_model_len": 64}},
           "additional_config": None}
PARTS = {"env_hash": "e", "code_hash": "c", "compiler_hash": "k"}


def _now(**kw: object) -> KeyParts:
    base: dict[str, object] = {"env_hash": "e", "env_factors": {"VLLM_X": 1},
                               "config_hash": "new", "config_parts": NOW_CFG,
                               "code_hash": "c", "compiler_hash": "k"}
    base.update(kw)
    return KeyParts(**base)  # type: ignore[arg-type]


def _n(key: str, cfg: object | None, modified: float, config_hash: str = "old") -> Neighbour:
    return Neighbour(key, "backend", f"backend entry {key}",
                     {**PARTS, "config_hash": config_hash}, {"VLLM_X": 1},
                     {"config": cfg} if cfg is not None else None, ("rank_0_0",),
                     modified=modified)


def _items(cs: list[Cause]) -> list[tuple[str, str, object, object]]:
    return [(c.component, c.item, c.old, c.new) for c in cs]


def test_a_cold_root_is_a_cause() -> None:
    cs = miss_causes([], _now())
    assert _items(cs) == [("cache", "entries", "none", None)] and "cold" in cs[0].detail


def test_the_closest_entry_is_the_one_fewest_sub_configs_away() -> None:
    # The newer entry also differs in additional_config; the older one only in max_model_len.
    cs = miss_causes([_n("aaaaaaaaaa", CFG_A, 1.0), _n("bbbbbbbbbb", CFG_B, 2.0)], _now())
    assert _items(cs) == [("config", "model_config.max_model_len", 128, 64)]
    assert cs[0].evidence.startswith("backend entry aaaaaaaaaa")


def test_without_a_manifest_the_hash_is_a_cause_with_what_settles_it() -> None:
    cs = miss_causes([_n("aaaaaaaaaa", None, 1.0)], _now(), world_size=2)
    assert _items(cs) == [("config", "parallel_config.world_size", 1, 2),
                          ("config", "config_hash", "old", "new")]
    assert "VLLM_CACHE_TOOLS_RECORD=1" in cs[1].detail and "explain --logs" in cs[1].detail


def test_equal_parts_at_another_key_say_the_entry_is_absent() -> None:
    n = _n("aaaaaaaaaa", CFG_A, 1.0, config_hash="new")
    cs = miss_causes([n], _now(), wanted="bbbbbbbbbb")
    assert _items(cs) == [("cache", "entry", "absent", "bbbbbbbbbb")]


def test_a_known_cause_is_not_repeated_nor_doubled_by_a_vague_one() -> None:
    n = Neighbour("aaaaaaaaaa", "backend", "backend entry aaaaaaaaaa",
                  {**PARTS, "config_hash": "new", "code_hash": "old"}, {"VLLM_X": 1})
    known = [Cause("code", "/x/llama.py", "compile-time copy", "file on disk", "AOT")]
    assert miss_causes([n], _now(), known=known) == []
    cs = miss_causes([n], _now())
    assert _items(cs) == [("code", "code_hash", "old", "c")] and "settle" in cs[0].detail


def test_a_file_a_graph_comment_does_not_name_is_not_called_untraced() -> None:
    # The backend graph's "# File:" comments name only files with ops in the graph.
    n = Neighbour("aaaaaaaaaa", "backend", "backend entry aaaaaaaaaa",
                  {**PARTS, "config_hash": "new", "code_hash": "old"}, {"VLLM_X": 1},
                  traced={"/v/llama.py": None})
    now = _now(file_digests={"/v/llama.py": "1" * 64, "/v/linear.py": "2" * 64})
    assert _items(miss_causes([n], now)) == [("code", "code_hash", "old", "c")]
    full = Neighbour("aaaaaaaaaa", "backend", "backend entry aaaaaaaaaa",
                     {**PARTS, "config_hash": "new", "code_hash": "old"}, {"VLLM_X": 1},
                     traced={"/v/llama.py": "0" * 64}, traced_complete=True)
    assert _items(miss_causes([full], now)) == [
        ("code", "/v/linear.py", "not traced", "traced"),
        ("code", "/v/llama.py", f"sha256 {'0' * 12}", f"sha256 {'1' * 12}")]
