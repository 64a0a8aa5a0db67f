"""What vLLM's key does not see: the recorder keeps every ``VLLM_*`` variable and the config
fields compute_hash leaves out; ``audit`` names them as possible false hits (or as ignored by
vLLM on purpose), ``explain`` says "same key: vLLM cannot see this change"."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import run_cli
from vllm_cache_tools.analyze.explain import explain
from vllm_cache_tools.recorder import capture
from vllm_cache_tools.recorder.write import write_manifest

KEY = "c" * 64


def _manifest(flag: str | None, ip: str, seed: int) -> dict[str, Any]:
    proc = {"VLLM_HOST_IP": ip, "VLLM_CACHE_ROOT": "/cache"}
    if flag is not None:
        proc["VLLM_MY_FLAG"] = flag
    return {"schema": 1, "tree": "aot", "key": KEY, "rank": "rank_0_0", "prefix": "",
            "env": {"VLLM_ALLOW_LONG_MAX_MODEL_LEN": False},
            "process_env": proc, "undeclared_env": ["VLLM_MY_FLAG"] if flag else [],
            "unhashed_fields": {"model_config": ["seed"]},
            "config": {"model_config": {"hash": "m" * 64, "fields": {"seed": seed}}},
            "versions": {"vllm": "0.32.0"}, "model": {"model": "org/m"},
            "command_line": ["vllm", "serve", "org/m"], "host": "h", "pid": 1,
            "created": 1.8e9 + seed}


def _root(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    cc = root / "torch_compile_cache"
    d = cc / "torch_aot_compile" / KEY / "rank_0_0"
    d.mkdir(parents=True)
    (d / "model").write_bytes(b"x")
    write_manifest(str(d), _manifest(None, "10.0.0.1", 0), base=str(cc))
    write_manifest(str(d), _manifest("1", "10.0.0.2", 7), base=str(cc))
    return root


def test_process_env_keeps_every_vllm_variable_redacted() -> None:
    env = {"VLLM_HOST_IP": "10.0.0.1", "VLLM_NOT_DECLARED": "x", "VLLM_API_KEY": "sk-123",
           "VLLM_CACHE_TOOLS_RECORD": "1", "HF_TOKEN": "hf_abc", "PATH": "/bin"}
    out = capture.process_env(env)
    assert set(out) == {"VLLM_HOST_IP", "VLLM_NOT_DECLARED", "VLLM_API_KEY"}
    assert out["VLLM_NOT_DECLARED"] == "x" and "sk-123" not in json.dumps(out)


def test_audit_names_the_unhashed_factor(tmp_path: Path) -> None:
    root = _root(tmp_path)
    res = run_cli("audit", "--root", str(root), "--json")
    assert res.returncode == 1, res.stderr
    found = {f["item"]: f["verdict"] for f in json.loads(res.stdout)["findings"]}
    assert found == {"env.VLLM_MY_FLAG": "possible false hit",
                     "model_config.seed": "possible false hit",
                     "env.VLLM_HOST_IP": "ignored by vLLM"}
    text = run_cli("audit", "--root", str(root)).stdout
    assert "2 possible false hit(s)" in text and "env.VLLM_MY_FLAG" in text
    assert text.index("ignored by vLLM") < text.index("env.VLLM_HOST_IP")


def test_explain_same_key_unhashed(tmp_path: Path) -> None:
    root = _root(tmp_path)
    x = explain(KEY[:16], KEY[:16], root=root)
    assert x.same_key
    assert x.headline.startswith("same key: vLLM cannot see this change (")
    assert "VLLM_MY_FLAG" in x.headline or "seed" in x.headline
    assert {c.item for c in x.causes} == {"env.VLLM_MY_FLAG", "model_config.seed",
                                          "env.VLLM_HOST_IP"}


def test_the_start_env_is_what_the_start_was_given(monkeypatch: pytest.MonkeyPatch) -> None:
    """The plugin's first process keeps the VLLM_* variables as given; vLLM's own later ones
    (VLLM_DIST_IDENT, new on every start) are not the user's configuration."""
    from vllm_cache_tools import recorder

    for k in list(os.environ):
        if k.startswith(("VLLM_", "VCT_")):
            monkeypatch.delenv(k)
    monkeypatch.setenv("VLLM_HOST_IP", "10.0.0.9")
    monkeypatch.setenv("VLLM_API_KEY", "sk-zzz")
    monkeypatch.setattr(recorder, "supported", lambda v: False)  # no hooks in this process
    recorder.register()
    assert len(os.environ[recorder.START_ENV]) == 16
    monkeypatch.setenv("VLLM_DIST_IDENT", "set-by-vllm-later")
    env = capture.process_env()
    assert env["VLLM_HOST_IP"] == "10.0.0.9" and "VLLM_DIST_IDENT" not in env
    assert "sk-zzz" not in json.dumps(env)
    first = os.environ[recorder.START_ENV]
    recorder.register()  # a worker of the same start: the id and the snapshot are inherited
    assert os.environ[recorder.START_ENV] == first
