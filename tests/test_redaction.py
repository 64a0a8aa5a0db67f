"""One rule for secrets (vllm_cache_tools/redaction.py), checked case by case at every place a
secret can land: the recorder's manifests and ledger, the probe's answer and memo, and the
CLI's output (``show``, ``show --env``, ``explain``, ``log``, ``ls``; JSON and text).

The table holds secrets and look-alikes that must stay visible (``--tokenizer``,
``--max-num-batched-tokens``, boolean flags before a positional, ...)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO, run_cli
from vllm_cache_tools import redaction
from vllm_cache_tools.redaction import (
    REDACTED,
    is_redacted,
    is_secret_name,
    load_key,
    redact_argv,
    redact_env,
    redact_text,
    redact_value,
)

SAMPLE = REPO / "examples" / "sample_cache"
SAMPLE_LOGS = REPO / "examples" / "sample_logs"
BACKEND = "28fd362d4e"


@dataclasses.dataclass(frozen=True)
class Case:
    id: str
    kind: str
    """argv: words after ``vllm serve``; env: (name, value); config: (field, value) of
    ``model_config``; log: one line of text."""
    data: Any
    secrets: tuple[str, ...] = ()
    """Must appear nowhere in the output."""
    kept: tuple[str, ...] = ()
    """Must appear in the output as they are (look-alikes, the rest of the line)."""


class Repr:
    """A config value vLLM's JSON view keeps as its repr."""

    def __repr__(self) -> str:
        return "KVConnectorCfg(kv_role='kv_both', auth_token='s3cr3t-repr')"


def _deep(n: int, leaf: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = leaf
    for i in range(n):
        out = {f"level{i}": out}
    return out


HF = "hf_Zq8wX1vB7nM3kL5pR2tY9uI0oP4aS6dFgH"
SK = "sk-proj-Zq8wX1vB7nM3kL5pR2tY9uI0oP4aS6dF"
CASES = [
    # --- command lines -----------------------------------------------------------------------
    Case("api-key", "argv", ["m", "--api-key", "hunter2-a"], ("hunter2-a",), ("m", "--api-key")),
    Case("api-key-many", "argv", ["--api-key", "k-one-1", "k-two-2", "--port", "8000"],
         ("k-one-1", "k-two-2"), ("--port", "8000")),
    Case("api-key-eq", "argv", ["--api-key=hunter2-b", "m"], ("hunter2-b",), ("m",)),
    Case("api-key-underscore", "argv", ["m", "--api_key", "hunter2-c"], ("hunter2-c",), ("m",)),
    Case("hf-token", "argv", ["m", "--hf-token", HF], (HF,), ("m", "--hf-token")),
    Case("hf-token-eq", "argv", ["m", "--hf-token=hunter2-d"], ("hunter2-d",), ("m",)),
    Case("hf-token-no-value", "argv", ["--hf-token", "--tokenizer", "/models/tok"], (),
         ("--hf-token", "--tokenizer", "/models/tok")),
    Case("tokenizer", "argv", ["m", "--tokenizer", "/models/tok"], (), ("/models/tok",)),
    Case("tokenizer-mode", "argv", ["m", "--tokenizer-mode", "slow"], (), ("slow",)),
    Case("max-num-batched-tokens", "argv", ["m", "--max-num-batched-tokens", "8192"], (),
         ("8192",)),
    Case("max-num-seqs", "argv", ["m", "--max-num-seqs", "64"], (), ("64",)),
    Case("bool-before-positional", "argv", ["--enable-prefix-caching", "org/model-a"], (),
         ("org/model-a",)),
    Case("token-bool-before-positional", "argv",
         ["--enable-prompt-tokens-details", "org/model-b", "--return-tokens-as-token-ids"], (),
         ("org/model-b",)),
    Case("skip-tokenizer-init", "argv", ["--skip-tokenizer-init", "org/model-c"], (),
         ("org/model-c",)),
    Case("allow-credentials-bool", "argv", ["--allow-credentials", "org/model-d"], (),
         ("org/model-d",)),
    Case("kv-transfer-config-json", "argv",
         ["--kv-transfer-config", '{"kv_connector": "NixlConnector", "kv_connector_extra_config":'
          ' {"api_key": "s3cr3t-kv", "nested": {"password": "s3cr3t-kv2"}}}'],
         ("s3cr3t-kv", "s3cr3t-kv2"), ("NixlConnector",)),
    Case("hf-overrides-json", "argv",
         ["--hf-overrides", '{"hfToken": "s3cr3t-hfo", "architectures": ["LlamaForCausalLM"]}'],
         ("s3cr3t-hfo",), ("LlamaForCausalLM",)),
    Case("loader-extra-config-json", "argv",
         ["--model-loader-extra-config=" + json.dumps(
             {"aws_secret_access_key": "s3cr3t-aws", "region": "us-east-1"})],
         ("s3cr3t-aws",), ("us-east-1",)),
    Case("dotted-json-arg", "argv",
         ["--kv-transfer-config.kv_connector_extra_config.api_key=s3cr3t-dot"],
         ("s3cr3t-dot",), ("--kv-transfer-config.kv_connector_extra_config.api_key",)),
    Case("url-userinfo", "argv", ["--model", "https://alice:s3cr3t-url@hub.example/m"],
         ("s3cr3t-url",), ("hub.example/m",)),
    Case("token-shaped-positional", "argv", ["m", SK], (SK,), ("m",)),
    Case("served-name-with-token-word", "argv", ["--served-model-name", "my-token-model"], (),
         ("my-token-model",)),
    # --- environment -------------------------------------------------------------------------
    Case("HF_TOKEN", "env", ("HF_TOKEN", HF), (HF,)),
    Case("HUGGING_FACE_HUB_TOKEN", "env", ("HUGGING_FACE_HUB_TOKEN", "s3cr3t-hub"),
         ("s3cr3t-hub",)),
    Case("VLLM_API_KEY", "env", ("VLLM_API_KEY", "s3cr3t-vllm"), ("s3cr3t-vllm",)),
    Case("AWS_SECRET_ACCESS_KEY", "env", ("AWS_SECRET_ACCESS_KEY", "s3cr3t-aws-env"),
         ("s3cr3t-aws-env",)),
    Case("S3_SECRET_ACCESS_KEY", "env", ("S3_SECRET_ACCESS_KEY", "s3cr3t-s3"), ("s3cr3t-s3",)),
    Case("S3_ACCESS_KEY_ID", "env", ("S3_ACCESS_KEY_ID", "AKIAZQ8WX1VB7NM3KL5P"),
         ("AKIAZQ8WX1VB7NM3KL5P",)),
    Case("OPENAI_API_KEY", "env", ("OPENAI_API_KEY", SK), (SK,)),
    Case("proxy-userinfo", "env", ("HTTPS_PROXY", "http://bob:s3cr3t-proxy@proxy:3128"),
         ("s3cr3t-proxy",), ("proxy:3128",)),
    Case("VLLM_MAX_TOKENS_PER_EXPERT_FP4_MOE", "env", ("VLLM_MAX_TOKENS_PER_EXPERT_FP4_MOE",
                                                        "163840"), (), ("163840",)),
    Case("VLLM_USE_FASTOKENS", "env", ("VLLM_USE_FASTOKENS", "tok-on-1"), (), ("tok-on-1",)),
    Case("TOKENIZERS_PARALLELISM", "env", ("TOKENIZERS_PARALLELISM", "false-ish"), (),
         ("false-ish",)),
    Case("SSH_AUTH_SOCK", "env", ("SSH_AUTH_SOCK", "/tmp/ssh-agent.sock"), (),
         ("/tmp/ssh-agent.sock",)),
    # --- config fields -----------------------------------------------------------------------
    Case("hf_token", "config", ("hf_token", "s3cr3t-field"), ("s3cr3t-field",)),
    Case("hf_token-true", "config", ("hf_token", True), (), ()),
    Case("hfToken-camel", "config", ("extra", {"hfToken": "s3cr3t-camel", "x": "keep-x"}),
         ("s3cr3t-camel",), ("keep-x",)),
    Case("api_keys-plural", "config", ("api_keys", ["s3cr3t-pl1", "s3cr3t-pl2"]),
         ("s3cr3t-pl1", "s3cr3t-pl2")),
    Case("Authorization-header", "config",
         ("headers", {"Authorization": "Bearer s3cr3t-bearer", "Accept": "keep/json"}),
         ("s3cr3t-bearer",), ("keep/json",)),
    Case("url-userinfo-field", "config", ("model_url", "s3://AKIDX:s3cr3t-s3url@bucket/m"),
         ("s3cr3t-s3url",), ("bucket/m",)),
    Case("dict-under-secret-key", "config",
         ("credentials", {"user": "s3cr3t-user", "password": "s3cr3t-pw"}),
         ("s3cr3t-user", "s3cr3t-pw")),
    Case("repr", "config", ("kv_connector_cfg", Repr()), ("s3cr3t-repr",), ("kv_both",)),
    Case("deeper-than-6", "config", ("extra_deep", _deep(9, {"password": "s3cr3t-deep",
                                                            "note": "keep-deep"})),
         ("s3cr3t-deep",), ("keep-deep",)),
    Case("tokenizer-field", "config", ("tokenizer", "/models/tok-field"), (),
         ("/models/tok-field",)),
    Case("tokenizer_mode-field", "config", ("tokenizer_mode", "mistral-ish"), (),
         ("mistral-ish",)),
    Case("max_num_batched_tokens-field", "config", ("max_num_batched_tokens", 81920), (),
         ("81920",)),
    Case("bos_token-field", "config", ("bos_token", "<s-keep>"), (), ("<s-keep>",)),
    # --- log lines ---------------------------------------------------------------------------
    Case("non-default-args", "log",
         "non-default args: {'model': 'm-keep', 'api_key': ['s3cr3t-nd'], 'hf_token': "
         "'s3cr3t-nd2', 'tokenizer': 'tok-keep', 'max_num_batched_tokens': 128}",
         ("s3cr3t-nd", "s3cr3t-nd2"), ("m-keep", "tok-keep", "'max_num_batched_tokens': 128")),
    Case("authorization-bearer", "log", "request headers: Authorization: Bearer s3cr3tBearer9",
         ("s3cr3tBearer9",), ("request headers",)),
    Case("env-assignment", "log", f"HF_TOKEN={HF} vllm serve m-keep", (HF,), ("vllm serve",)),
    Case("url-in-log", "log", "downloading https://carol:s3cr3t-dl@hub.example/f.bin",
         ("s3cr3t-dl",), ("hub.example/f.bin",)),
    Case("argv-list-in-log", "log",
         "argv: ['vllm', 'serve', '--api-key', 's3cr3t-list', '--tokenizer', 'tok-keep2']",
         ("s3cr3t-list",), ("tok-keep2",)),
    Case("look-alike-log", "log",
         "max_num_batched_tokens=8192 tokenizer=tok-keep3 torch_key: abc123 key=3f9c0a1b2c",
         (), ("max_num_batched_tokens=8192 tokenizer=tok-keep3 torch_key: abc123 "
              "key=3f9c0a1b2c",)),
    # A path's last part named like a secret, in an error message: the words after it are
    # the message (were hidden: "/etc/passwd: <redacted:...> or corrupt bundle").
    Case("path-named-like-a-secret", "log",
         "vllm-cache: error: /etc/passwd: truncated or corrupt bundle (x); "
         "/srv/credentials: permission denied",
         (), ("/etc/passwd: truncated or corrupt", "/srv/credentials: permission denied")),
    Case("secret-after-a-path", "log", "read /srv/app.env HF_TOKEN: s3cr3t-after-path",
         ("s3cr3t-after-path",), ("read /srv/app.env HF_TOKEN",)),
]
ARGV = [c for c in CASES if c.kind == "argv"]
ENV = [c for c in CASES if c.kind == "env"]
CONFIG = [c for c in CASES if c.kind == "config"]
LOG = [c for c in CASES if c.kind == "log"]


def _check(text: str, case: Case) -> None:
    for s in case.secrets:
        assert s not in text, f"{case.id}: secret {s!r} leaked in {text[:400]!r}"
    for k in case.kept:
        assert k in text, f"{case.id}: {k!r} was hidden: {text[:400]!r}"


def test_table_has_40_cases() -> None:
    assert len(CASES) >= 40 and len({c.id for c in CASES}) == len(CASES)
    assert sum(1 for c in CASES if not c.secrets) >= 12  # look-alikes that must stay


# --- the functions themselves -------------------------------------------------------------

@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_case(case: Case) -> None:
    if case.kind == "argv":
        argv = ["vllm", "serve", *case.data]
        out = redact_argv(argv)
        assert len(out) == len(argv)
        for a, b in zip(argv, out, strict=True):
            if not any(s in a for s in case.secrets):
                assert a == b  # every word without a secret is kept exactly
        _check(json.dumps(out), case)
    elif case.kind == "env":
        name, value = case.data
        env = redact_env({name: value, "VLLM_TARGET_DEVICE": "cpu"})
        assert env["VLLM_TARGET_DEVICE"] == "cpu"
        assert is_redacted(env[name]) or (value in case.kept and env[name] == value) or (
            case.secrets and case.kept)  # a credential inside a value: the rest is kept
        _check(json.dumps(env), case)
    elif case.kind == "config":
        fields = _config_parts(case)["model_config"]["fields"]
        _check(json.dumps(fields), case)
        if case.data[1] is True:
            assert fields["hf_token"] is True  # "use the login token": not a secret
    else:
        _check(redact_text(case.data), case)


def test_names() -> None:
    secret = ["hf_token", "HF_TOKEN", "hfToken", "HFToken", "api_keys", "apiKeys", "api-key",
              "--api-key", "Authorization", "x-api-key", "AWS_SECRET_ACCESS_KEY",
              "AWS_ACCESS_KEY_ID", "VLLM_API_KEY", "token", "password", "client_secret",
              "model_config.hf_token", "OpenAIKey", "encryption_key", "auth"]
    plain = ["tokenizer", "tokenizer_mode", "max_num_batched_tokens", "max-num-seqs",
             "num_speculative_tokens", "return_tokens_as_token_ids", "bos_token", "key",
             "torch_key", "cache_key", "model_hash_key", "backend_key", "key_parts",
             "SSH_AUTH_SOCK", "hf_token_path", "ssl_keyfile", "VLLM_USE_FASTOKENS"]
    assert [n for n in secret if not is_secret_name(n)] == []
    assert [n for n in plain if is_secret_name(n)] == []


def test_records_reprs_and_depth() -> None:
    cause = {"component": "env", "item": "HF_TOKEN", "old": "s3cr3t-o", "new": "s3cr3t-n",
             "evidence": "keep-ev"}
    out = redact_value(None, cause)
    assert is_redacted(out["old"]) and is_redacted(out["new"]) and out["evidence"] == "keep-ev"
    deep: dict[str, Any] = {}
    cur = deep
    for _ in range(60):
        cur["n"] = {}
        cur = cur["n"]
    cur["password"] = "s3cr3t-60"
    assert "s3cr3t-60" not in json.dumps(redact_value(None, deep))
    # Text: JSON records and Python reprs keep their shape (JSON still parses).
    text = json.dumps({"env_changes": [{"name": "VLLM_API_KEY", "old": ["s3cr3t-l"],
                                        "new": 5}], "x": {"api_keys": ["s3cr3t-k"]}}, indent=2)
    red = redact_text(text)
    assert "s3cr3t" not in red and json.loads(red)["env_changes"][0]["name"] == "VLLM_API_KEY"
    assert redact_text("  env  HF_TOKEN: 'a1b2' -> 'c3d4'  [ev]").count("<redacted") == 2
    # Already redacted values stay as they are (outputs redact again).
    once = redact_value(None, {"hf_token": "s3cr3t-x"})
    assert redact_value(None, once) == once and redact_text(json.dumps(once)) == json.dumps(once)


# --- the keyed digest ---------------------------------------------------------------------

def test_keyed_digest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    redaction.reset_key_cache()
    a, b = redaction.marker("hunter2"), redaction.marker("hunter2")
    assert a == b and a.startswith("<redacted:") and a != redaction.marker("hunter3")
    hexd = a[len("<redacted:"):-1]
    # Not an unsalted hash: a word list cannot find it.
    for word in ("hunter2", "password", "secret", "letmein", "123456"):
        for h in (hashlib.sha256, hashlib.md5, hashlib.sha1):
            assert h(word.encode()).hexdigest()[:12] != hexd
    key_file = tmp_path / "state" / "vllm-cache-tools" / redaction.KEY_FILENAME
    st = key_file.stat()
    assert stat.S_IMODE(st.st_mode) == 0o600 and st.st_size == redaction.KEY_BYTES
    assert stat.S_IMODE(key_file.parent.stat().st_mode) & 0o077 == 0
    # Another process on this host (same user) gives the same digest: "changed" still works.
    code = "from vllm_cache_tools.redaction import marker; print(marker('hunter2'))"
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           env={**os.environ}, check=True).stdout.strip()
    assert other == a
    # Another user's (another key's) digest differs.
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state2"))
    assert redaction.marker("hunter2") != a
    redaction.reset_key_cache()


def test_key_made_once_by_concurrent_processes(tmp_path: Path) -> None:
    code = ("import sys; from vllm_cache_tools.redaction import marker; "
            "sys.stdout.write(marker('x'))")
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path)}
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                              env=env) for _ in range(8)]
    outs = {p.communicate()[0] for p in procs}
    assert len(outs) == 1 and next(iter(outs)).startswith("<redacted:")
    assert sorted(os.listdir(tmp_path / "vllm-cache-tools")) == [redaction.KEY_FILENAME]


@pytest.mark.parametrize("attack", ["symlink", "mode", "dir-mode", "in-cache-root", "readonly",
                                    "short"])
def test_no_key_means_no_digest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                attack: str) -> None:
    state = tmp_path / "state"
    d = state / "vllm-cache-tools"
    d.mkdir(parents=True, mode=0o700)
    victim = tmp_path / "victim"
    victim.write_bytes(b"v" * 32)
    victim.chmod(0o600)
    if attack == "symlink":
        (d / redaction.KEY_FILENAME).symlink_to(victim)
    elif attack == "mode":
        (d / redaction.KEY_FILENAME).write_bytes(b"k" * 32)
        (d / redaction.KEY_FILENAME).chmod(0o644)
    elif attack == "dir-mode":
        d.chmod(0o777)
    elif attack == "in-cache-root":
        monkeypatch.setenv("VLLM_CACHE_ROOT", str(state))
    elif attack == "readonly":
        d.chmod(0o500)
        if os.geteuid() == 0:
            pytest.skip("root writes anywhere")
    elif attack == "short":
        fd = os.open(d / redaction.KEY_FILENAME, os.O_WRONLY | os.O_CREAT, 0o600)
        os.write(fd, b"short")
        os.close(fd)
    monkeypatch.setenv("XDG_STATE_HOME", str(state))
    redaction.reset_key_cache()
    try:
        assert load_key() is None
        assert redaction.marker("hunter2") == REDACTED
        assert redact_value("hf_token", "hunter2") == REDACTED
        assert victim.read_bytes() == b"v" * 32
        if attack != "in-cache-root":
            assert not [p for p in d.iterdir() if p.name.endswith(".tmp")]
    finally:
        d.chmod(0o700)
        redaction.reset_key_cache()


# --- the recorder: manifests and ledger ---------------------------------------------------

def _fake_config(case: Case) -> Any:
    name, value = case.data if case.kind == "config" else ("tokenizer", "/models/t")

    def compute_hash(self: Any) -> str:
        return "h"

    cls = dataclasses.make_dataclass(
        "ModelConfig", [(name, Any, dataclasses.field(default_factory=lambda: value)),
                        ("model", str, dataclasses.field(default="org/model-keep"))],
        namespace={"compute_hash": compute_hash})
    return types.SimpleNamespace(model_config=cls(), compute_hash=lambda: "cfg0123456",
                                 additional_config=None)


def _config_parts(case: Case) -> dict[str, Any]:
    from vllm_cache_tools.live.probe import config_parts

    return config_parts(_fake_config(case))


def _fake_vllm(monkeypatch: pytest.MonkeyPatch, env: dict[str, str]) -> None:
    vllm = types.ModuleType("vllm")
    vllm.envs = types.SimpleNamespace(compile_factors=lambda: dict(env))  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "vllm", vllm)


@pytest.mark.parametrize("case", [c for c in CASES if c.kind != "log"], ids=lambda c: c.id)
def test_recorder_manifest_and_ledger(case: Case, tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from vllm_cache_tools.recorder import capture, hooks, write

    env = {"VLLM_TARGET_DEVICE": "cpu", **(dict([case.data]) if case.kind == "env" else {})}
    _fake_vllm(monkeypatch, env)
    argv = ["vllm", "serve", *(case.data if case.kind == "argv" else ["m"])]
    monkeypatch.setattr(sys, "argv", argv)
    cc = tmp_path / "torch_compile_cache"
    entry = cc / "0123456789" / "rank_0_0" / "backbone"
    entry.mkdir(parents=True)
    manifest = capture.base_manifest(_fake_config(case), "backend", "0123456789", "rank_0_0",
                                     "backbone")
    write.write_manifest(str(entry), manifest, base=str(cc))
    # vLLM's load-failure reason quoting the command line or the variable.
    quoted = (" ".join(argv) if case.kind == "argv" else
              "{}={}".format(*case.data) if case.kind == "env" else repr(case.data))
    hooks._event(str(cc), 0.0, event="load-failure", tree="aot", key="k", rank="rank_0_0",
                 prefix="", manifest="d", seconds=0.1, reason=f"load failure: {quoted}")
    manifests = list(entry.glob("vct-manifest.*.json"))
    ledgers = list((cc / ".vllm-cache-tools").rglob("*.jsonl"))
    assert len(manifests) == 1 and len(ledgers) == 1
    _check(manifests[0].read_text(), case)
    ledger = ledgers[0].read_text()
    _check(ledger, dataclasses.replace(case, kept=case.kept if case.kind == "argv" else ()))
    m = json.loads(manifests[0].read_text())
    if case.kind == "argv":
        assert m["command_line"] == redact_argv(argv)
    assert m["model"]["model"] == "org/model-keep"


# --- the probe: its answer and the memo ---------------------------------------------------

@pytest.mark.parametrize("case", ENV + CONFIG, ids=lambda c: c.id)
def test_probe_answer_and_memo(case: Case, tmp_path: Path) -> None:
    from vllm_cache_tools.live import memo as probememo
    from vllm_cache_tools.live import probe

    env = {"VLLM_TARGET_DEVICE": "cpu", **(dict([case.data]) if case.kind == "env" else {})}
    answer = {"env": probe._redaction().redact_env(probe._jsonable(env)),
              "config_parts": _config_parts(case)}
    assert probememo.save("k" * 64, answer, {"files": {}, "dirs": {}}, tmp_path) == "kept"
    kept = sorted(tmp_path.glob(f"{'k' * 64}.*.json"))
    assert len(kept) == 1, kept
    _check(kept[0].read_text(), case)


def test_probe_standalone_loads_the_same_rule(tmp_path: Path) -> None:
    """In the user's vLLM environment the probe runs as a script (no package): it loads
    redaction.py by path and redacts the same way."""
    code = (
        "import importlib.util, json, sys\n"
        f"spec = importlib.util.spec_from_file_location('probe', {str(REPO / 'vllm_cache_tools' / 'live' / 'probe.py')!r})\n"  # noqa: E501
        "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
        "r = m._redaction()\n"
        "print(json.dumps([r.__name__, 'vllm_cache_tools' in sys.modules,\n"
        "    m.redact('model_config', {'hf_token': 'hunter2', 'tokenizer': 't'}),\n"
        "    m.is_secret_name('max_num_batched_tokens')]))\n")
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path)}
    out = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True,
                         env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    name, imported_package, red, secret = json.loads(out.stdout)
    assert name == "_vct_redaction" and not imported_package and secret is False
    redaction.reset_key_cache()
    os.environ["XDG_STATE_HOME"], old = str(tmp_path), os.environ["XDG_STATE_HOME"]
    try:
        assert red == redact_value("model_config", {"hf_token": "hunter2", "tokenizer": "t"})
    finally:
        os.environ["XDG_STATE_HOME"] = old
        redaction.reset_key_cache()


# --- the CLI: every output ----------------------------------------------------------------

def _secret_root(tmp_path: Path) -> tuple[Path, str, str]:
    """The shipped example root, its backend entry copied to a second key, both carrying
    every env case in ``cache_key_factors.json`` (secrets differ between the two) and an old
    recorder's manifest with the argv and config cases in clear."""
    root = tmp_path / "root"
    shutil.copytree(SAMPLE, root, symlinks=True)
    cc = root / "torch_compile_cache"
    other = "aa11bb22cc"
    shutil.copytree(cc / BACKEND, cc / other, symlinks=True)
    argv = ["vllm", "serve"] + [w for c in ARGV for w in c.data]
    for key, side in ((BACKEND, "a"), (other, "b")):
        d = cc / key / "rank_0_0" / "backbone"
        f = d / "cache_key_factors.json"
        factors = json.loads(f.read_text())
        for c in ENV:
            name, value = c.data
            factors["env"][name] = value if not c.secrets else f"{value}-{side}"
        if side == "b":
            factors["config_hash"] = "ffffffffff"
        f.write_text(json.dumps(factors))
        mf = next(d.glob("vct-manifest.*.json"))
        m = json.loads(mf.read_text())
        m["command_line"] = argv
        m["env"] = dict(factors["env"])
        fields = m["config"]["model_config"]["fields"]
        for c in CONFIG:
            name, value = c.data
            fields[name] = (f"{value}-{side}" if isinstance(value, str) and c.secrets
                            else value if not isinstance(value, Repr) else repr(value))
        if side == "b":
            m["config"]["model_config"]["hash"] = "changed"
            m["config_hash"] = "ffffffffff"
            m["key_parts"]["config_hash"] = "ffffffffff"
        mf.write_text(json.dumps(m))
        if side == "a":  # a second start that reused the entry with other secrets: audit
            m2 = json.loads(json.dumps(m).replace("-a\"", "-a2\""))
            m2["digest"] = "0123456789abcdef"
            m2["created"] = m["created"] + 60
            (d / "vct-manifest.0123456789abcdef.json").write_text(json.dumps(m2))
    return root, BACKEND, other


def _all_secrets(cases: list[Case]) -> list[str]:
    return [s for c in cases for s in c.secrets]


@pytest.fixture(scope="module")
def secret_root(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, str]:
    return _secret_root(tmp_path_factory.mktemp("secret-root"))


def _no_secret(text: str, cases: list[Case]) -> None:
    leaked = [s for s in _all_secrets(cases) if s in text]
    assert not leaked, f"leaked {leaked}"


@pytest.mark.parametrize("args", [["show", BACKEND, "--json"], ["show", BACKEND, "--env"],
                                  ["show", BACKEND], ["ls", "--json"], ["ls"],
                                  ["explain", BACKEND, "aa11bb22cc", "--json"],
                                  ["explain", BACKEND, "aa11bb22cc"], ["explain", "--json"],
                                  ["verify", "--json"], ["audit"], ["audit", "--json"]],
                         ids=" ".join)
def test_cli_output(secret_root: tuple[Path, str, str], args: list[str]) -> None:
    root = secret_root[0]
    r = run_cli(*args, "--root", str(root))
    assert "Traceback" not in r.stderr, r.stderr
    _no_secret(r.stdout + r.stderr, CASES)
    if args[:2] == ["show", BACKEND] and "--env" in args:
        for c in ENV:
            name, value = c.data
            assert name in r.stdout
            if not c.secrets:
                assert repr(value) in r.stdout  # look-alikes shown as they are
        assert "<redacted:" in r.stdout
    if args == ["show", BACKEND, "--json"]:
        d = json.loads(r.stdout)
        env = d["env_factors"]
        assert env["VLLM_MAX_TOKENS_PER_EXPERT_FP4_MOE"] == "163840"
        assert is_redacted(env["HF_TOKEN"]) and is_redacted(env["VLLM_API_KEY"])
        cl = d["manifests"][0]["command_line"]
        assert cl == redact_argv(["vllm", "serve"] + [w for c in ARGV for w in c.data])
        for c in ARGV:
            _check(json.dumps(cl), c)
    if args[0] == "explain" and len(args) > 2:
        out = r.stdout
        for name in ("HF_TOKEN", "VLLM_API_KEY", "AWS_SECRET_ACCESS_KEY"):
            assert name in out  # the cause is named, its values hidden
        if "--json" in args:
            causes = json.loads(out)["causes"]
            env_causes = {c["item"]: c for c in causes if c["component"] == "env"}
            assert is_redacted(env_causes["HF_TOKEN"]["old"])
            assert env_causes["HF_TOKEN"]["old"] != env_causes["HF_TOKEN"]["new"]
            assert "HTTPS_PROXY" in env_causes and "proxy:3128" in env_causes["HTTPS_PROXY"]["old"]


def _secret_logs(tmp_path: Path, log_cases: list[Case] = LOG) -> tuple[Path, Path]:
    """Two sample logs whose raw env factors carry every env case (secrets differing between
    the two) and whose second start logs load failures quoting ``log_cases`` (the last one
    is the reason the log's reader keeps)."""
    out = []
    for n, (name, side) in enumerate((("1-cold-start.log", "a"),
                                      ("3-long-max-model-len-env.log", "b"))):
        lines = (SAMPLE_LOGS / name).read_text().splitlines()
        i = next(k for k, ln in enumerate(lines)
                 if ln.rstrip().endswith("{'CMAKE_BUILD_TYPE': None,"))
        prefix = lines[i][:lines[i].index("{'CMAKE")]
        extra = [f"{prefix} {json.dumps(c.data[0]).replace(chr(34), chr(39))}: "
                 f"'{c.data[1] if not c.secrets else c.data[1] + '-' + side}',"
                 for c in ENV]
        lines[i + 1:i + 1] = extra
        if n == 1:
            j = next(k for k, ln in enumerate(lines) if "Start compiling function" in ln)
            head = lines[j][:lines[j].index("DEBUG")]
            for c in log_cases:
                lines.insert(j, f"{head}WARNING 11-30 02:10:04 [compilation/decorators.py:333] "
                                f"[backbone] Compiling model again due to a load failure from "
                                f"/x/model, reason: {c.data}")
        p = tmp_path / name
        p.write_text("\n".join(lines) + "\n")
        out.append(p)
    return out[0], out[1]


@pytest.mark.parametrize("mode", ["json", "text", "compare-json", "compare", "traced-json",
                                  "explain-logs-json", "explain-logs"])
def test_log_output(tmp_path: Path, mode: str) -> None:
    a, b = _secret_logs(tmp_path)
    args = {"json": ["log", str(b), "--json"], "text": ["log", str(b)],
            "compare-json": ["log", "--compare", str(a), str(b), "--json"],
            "compare": ["log", "--compare", str(a), str(b)],
            "traced-json": ["log", str(b), "--traced-files", "--json"],
            "explain-logs-json": ["explain", "--logs", str(a), str(b), "--json"],
            "explain-logs": ["explain", "--logs", str(a), str(b)]}[mode]
    r = run_cli(*args)
    assert "Traceback" not in r.stderr, r.stderr
    assert r.stdout.strip(), r.stderr
    _no_secret(r.stdout + r.stderr, ENV + LOG)
    if mode == "json":
        doc = json.loads(r.stdout)
        fns = [f for st in doc["starts"] for p in st["processes"] for f in p["functions"]]
        raw = next(f["env_factors_raw"] for f in fns if f["env_factors_raw"])
        assert is_redacted(raw["HF_TOKEN"].strip("'"))
        assert raw["VLLM_MAX_TOKENS_PER_EXPERT_FP4_MOE"].strip("'") == "163840"
        _check(json.dumps(doc), LOG[0])  # the reason kept (lines are inserted in reverse)
    if mode.startswith("compare") or mode.startswith("explain"):
        assert "HF_TOKEN" in r.stdout and "VLLM_API_KEY" in r.stdout
    if mode.endswith("json"):
        json.loads(r.stdout)


@pytest.mark.parametrize("case", LOG, ids=lambda c: c.id)
def test_log_json_quotes_a_line(tmp_path: Path, case: Case) -> None:
    _, b = _secret_logs(tmp_path, [case])
    r = run_cli("log", str(b), "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    reasons = [f["load_failure"]["reason"] for st in doc["starts"] for p in st["processes"]
               for f in p["functions"] if f["load_failure"]]
    assert len(reasons) == 1
    _check(reasons[0], case)
    _check(r.stdout, dataclasses.replace(case, kept=()))


_PARSER_SCRIPT = r"""
import importlib.util, json, sys
from vllm.utils.argparse_utils import FlexibleArgumentParser
try:
    from vllm.entrypoints.openai.cli_args import make_arg_parser
except ImportError:  # 0.32 moved it
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
spec = importlib.util.spec_from_file_location("_vct_redaction", sys.argv[1])
r = importlib.util.module_from_spec(spec)
sys.modules["_vct_redaction"] = r
spec.loader.exec_module(r)
kinds = r.flag_kinds(make_arg_parser(FlexibleArgumentParser()))
print(json.dumps({o: k for o, k in kinds.items() if r._secret_flag(o)}))
"""


@pytest.mark.realvllm
def test_flag_table_matches_vllms_parser() -> None:
    """FLAG_KINDS (used where vLLM's parser is not at hand: the recorder inside a worker, the
    CLI) agrees with the arity vLLM's own ``vllm serve`` parser gives every secret-named
    flag."""
    from tests.realvllm.harness import venv_python

    if not venv_python().exists():
        pytest.skip("no vLLM test venv")
    out = subprocess.run([str(venv_python()), "-c", _PARSER_SCRIPT,
                          str(REPO / "vllm_cache_tools" / "redaction.py")],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    secret = json.loads(out.stdout.strip().splitlines()[-1])
    assert "--api-key" in secret and "--hf-token" in secret
    wrong = {o: k for o, k in secret.items()
             if k != redaction.FLAG_KINDS.get(o, "one")}
    assert wrong == {}


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_fast_json_path_agrees(case: Case) -> None:
    """``print_json`` serializes without walking when no string could name or hold a secret;
    with any case anywhere in a payload it gives what the full walk gives."""
    if case.kind in ("argv", "log"):
        item: Any = case.data
    else:
        name, value = case.data
        item = {name: repr(value) if isinstance(value, Repr) else value}
    payload = {"entries": [{"key": "0123456789", "torch_key": "abc", "path": "/r/x"},
                           {"key": "abcdef0123", "nested": [1, 2.5, None, True, item]}]}
    want = json.dumps(redact_value(None, payload))
    assert redaction.dumps(payload) == want
    _check(want, dataclasses.replace(case, kept=()))
    clean = {"entries": [{"key": "0123456789", "disk_bytes": 3, "model": "org/tokenizer-x"}]}
    assert redaction.dumps(clean) == json.dumps(clean)


@pytest.mark.realvllm
def test_predict_output_and_memo_on_real_vllm(real_compile: Any) -> None:
    """``predict`` with a token on the command line and credentials in the environment:
    neither its output (JSON and text) nor the probe memo holds them."""
    from tests.realvllm.harness import start_env, venv_python
    from vllm_cache_tools.live.runner import memo_dir

    start = real_compile.scenario.starts[1]
    env = {**start_env(real_compile.before(1), start), "VLLM_API_KEY": "s3cr3t-penv",
           "HF_TOKEN": HF, "S3_SECRET_ACCESS_KEY": "s3cr3t-ps3",
           "VLLM_CACHE_TOOLS_PROBE_STANDBY": "0"}
    args = [*start.serve_args(), "--hf-token", "hf_vctPredictSecret0123456789ab"]
    secrets = ("s3cr3t-penv", HF, "s3cr3t-ps3", "hf_vctPredictSecret0123456789ab")
    outs = []
    for extra in (["--json"], []):
        r = run_cli("predict", "--python", str(venv_python()), "--usage", "llm", "--root",
                    str(real_compile.before(1)), *extra, "--", *args, env=env)
        assert r.returncode in (0, 1), r.stderr
        outs.append(r.stdout)
        assert not [s for s in secrets if s in r.stdout + r.stderr]
    doc = json.loads(outs[0])
    assert doc["aot"]["key"] and doc["probe"]["served_by"] in ("probe", "memo")
    files = list(memo_dir().rglob("*.json"))
    assert files or "not kept" in doc["probe"]["kept"]
    for f in files:
        text = f.read_text()
        assert not [s for s in secrets if s in text], f


HOSTILE_TEXT = {
    "long-word-after-a-hint": "key " + "a" * 200_000,
    "names-without-values": ("token" + "a" * 20 + " ") * 8000,
    "many-assignments": "token=b " * 25_000,
    "open-json-records": '{"name":"HF_TOKEN",' * 10_000,
    "schemes-without-userinfo": "a://" * 50_000,
    "long-token-shape": "hf_" + "A" * 200_000 + "_",
    "arrow-chain": "HF_TOKEN: a" + " -> a" * 40_000,
    "unclosed-quote": "'token': '" + "a" * 200_000,
    "unclosed-brackets": "token: " + "{" * 200_000,
    "changed-from-unclosed": "HF_TOKEN changed '" * 20_000,
}


@pytest.mark.parametrize("name", sorted(HOSTILE_TEXT))
def test_hostile_text_is_linear(name: str) -> None:
    """Every pattern is anchored or bounded: 200 KB of the worst input for each is seconds at
    most (a backtracking pattern took minutes on the first one)."""
    import time

    text = HOSTILE_TEXT[name]
    t0 = time.perf_counter()
    out = redact_text(text)
    assert time.perf_counter() - t0 < 5.0
    assert isinstance(out, str)
    t0 = time.perf_counter()
    redact_value(None, {"k": [text]})
    assert time.perf_counter() - t0 < 5.0
