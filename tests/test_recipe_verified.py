"""predict says, beside every key, whether its recipes were ever compared with the folders that
vLLM release created (issue 16: a confident wrong key is the worst answer predict can give)."""

from __future__ import annotations

from vllm_cache_tools.keys.versions import VERIFIED_ON, recipe_verified_on


def test_verified_releases_name_their_evidence() -> None:
    for release, evidence in VERIFIED_ON.items():
        assert recipe_verified_on(release) == evidence
        assert "tests/test_" in evidence and "2026-" in evidence
    assert recipe_verified_on("0.32.0+cpu") == VERIFIED_ON["0.32.0"]
    assert recipe_verified_on("0.22.1") is not None  # the H200 run (tests/test_gpu_truth.py)


def test_other_releases_are_not_verified() -> None:
    for release in ("0.26.0", "0.33.0", "0.8.5.post1", "not a version", ""):
        assert recipe_verified_on(release) is None
