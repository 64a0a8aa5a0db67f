"""Version-aware recipes. 0.32.0 is checked live elsewhere (test_store_real, test_predict);
older releases here against vectors derived from their source (docs/recipes.md section 5.1:
"[src]" rows ran the function text copied from the wheel, the others apply the mirrors)."""

from __future__ import annotations

import pytest

from vllm_cache_tools.keys import aot_key, aot_source_hash, model_hash_key
from vllm_cache_tools.keys.versions import (
    backend_key,
    code_hash,
    env_hash,
    parse_version,
    recipes_for,
)

FILES = {"/x/a.py": "A = 1\n", "/x/b.py": "print(1)\n", "<string>": ""}


def test_version_table() -> None:
    assert not recipes_for("0.6.4").has_cache
    assert recipes_for("0.6.5").backend_key == "cfg"
    assert recipes_for("0.8.5.post1").rank_dir == "rank_{rank}_{dp}"
    assert recipes_for("0.7.3").rank_dir == "rank_{rank}"
    assert recipes_for("0.9.2").prefix_level and not recipes_for("0.9.1").prefix_level
    assert recipes_for("0.11.1").aot_tree == "root/torch_aot_compile"
    assert recipes_for("0.12.0").factors_json and not recipes_for("0.11.2").factors_json
    assert recipes_for("0.17.0").aot_tree == "torch_compile_cache/torch_aot_compile"
    assert recipes_for("0.32.0+cpu").string_mode == "skip"
    assert recipes_for("0.33.0") == recipes_for("0.32.0")
    assert parse_version("0.8.5.post1") == (0, 8, 5)
    with pytest.raises(ValueError):
        parse_version("latest")


@pytest.mark.parametrize(("version", "expected"), [
    ("0.8.0", "6a663755af44b106f46107f73040fe18"),   # md5, <string> content included ("")
    ("0.10.0", "9e54c1d859dc7b27f6623d78b79626db"),  # md5, <string> path only
    ("0.15.0", "3a02a2c0bcd9e15f34701ce4647293995ce23c6a5e41c445d23fdb8dcf96104a"),
    ("0.32.0", "8d2c5488d02c38ba36f36a68f3919844861ae1b0ec2e77dd7f9a8dd3bf77d344"),
])
def test_code_hash_vectors(version: str, expected: str) -> None:
    files = dict(FILES)
    if version == "0.8.0":  # that vector was computed without the <string> entry
        files.pop("<string>")
    assert code_hash(recipes_for(version), files) == expected


def test_env_and_key_vectors() -> None:
    assert env_hash(recipes_for("0.32.0"), {"B": 1, "A": (1, 2), "C": None}) == (
        "0bfc627fc2c9fa433db57caf283fdef3b40a39b1c5ec037ee8ca4723bf680866")
    assert env_hash(recipes_for("0.10.1"), [None, False, "FLASH_ATTN"]) == (
        "812786ac89c85f2224cdc5eeb60efe27")
    assert env_hash(recipes_for("0.7.0"), {}) is None
    e, c, d, f = "e" * 64, "c" * 10, "d" * 64, "f" * 10
    assert backend_key(recipes_for("0.32.0"), e, c, d, f) == "5ad9de256a"
    assert backend_key(recipes_for("0.9.0"), e, c, d, f) == "4fc55a8a7e"
    assert backend_key(recipes_for("0.7.1"), None, c, "d" * 32, None) == "433cfbe762"
    assert backend_key(recipes_for("0.6.5"), None, c, None, None) == c
    mk = model_hash_key("0.32.0", "LlamaModel.forward", 350)
    assert mk == "a23135f57ed127f84ead24fb03d76d9ddba37d8390b657b6c07eb6a0e36af378"
    assert aot_key(e, c, mk) == "02f416424c9a4faaafe7a4df12e6e56604718db4d5aadf9f9f80aee52ab94178"
    assert aot_source_hash(FILES) == "9e54c1d859dc7b27f6623d78b79626db"
