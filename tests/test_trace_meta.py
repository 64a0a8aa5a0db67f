"""The meta-device caveat of the cold-root tracer (live/trace.py): where a weightless build was
compared with vLLM's own starts on a GPU (benchmarks/gpu/truth_family.sh on the H200) it is
not flagged; anything outside that comparison is, and the caveat names it."""

from __future__ import annotations

from types import SimpleNamespace

from vllm_cache_tools.live.trace import meta_device_caveat


def _cfg(quantization: str | None = None, lora: object = None,
         spec: object = None) -> SimpleNamespace:
    return SimpleNamespace(model_config=SimpleNamespace(quantization=quantization),
                           lora_config=lora, speculative_config=spec)


def test_compared_gpu_release_unquantized_is_not_flagged() -> None:
    assert meta_device_caveat(_cfg(), "0.22.1", "CudaPlatformBase") is None


def test_other_release_or_platform_is_flagged() -> None:
    other = meta_device_caveat(_cfg(), "0.23.0", "CudaPlatformBase")
    assert other and "vLLM 0.22.1 only" in other
    rocm = meta_device_caveat(_cfg(), "0.22.1", "RocmPlatform")
    assert rocm and "never compared with a start on this platform" in rocm


def test_features_never_compared_are_named() -> None:
    q = meta_device_caveat(_cfg(quantization="fp8"), "0.22.1", "CudaPlatformBase")
    assert q and "quantization fp8" in q
    both = meta_device_caveat(_cfg(lora=object(), spec=object()), "0.22.1", "CudaPlatformBase")
    assert both and "LoRA" in both and "speculative decoding" in both
