"""``drift``: factors that split one model's cache, from manifests written by the recorder's
own writer and ledger lines in its own format; classes, fixes, entry counts, waste, secrets."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import run_cli
from vllm_cache_tools.analyze.drift import Factor, drift, kind_of
from vllm_cache_tools.recorder.write import write_manifest
from vllm_cache_tools.views.insight import drift_document

MODEL = "org/llama-8b"
OTHER = "org/other"
SITE = "/opt/venv/lib/python3.11/site-packages"


def _manifest(tree: str, key: str, rank: str, prefix: str, *, model: str, host: str, pid: int,
              worker: str | None, seed: int = 0, ip: str = "10.0.0.1",
              api_key: str = "sk-abc123", site: str = SITE) -> dict[str, Any]:
    add = None if worker is None else {
        "hash": hashlib.md5(json.dumps({"worker_id": worker}).encode()).hexdigest(),
        "fields": {"worker_id": worker}}
    m: dict[str, Any] = {
        "schema": 1, "tree": tree, "key": key, "rank": rank, "prefix": prefix,
        "versions": {"python": "3.11.7", "torch": "2.13.0+cpu", "vllm": "0.32.0"},
        "env": {"VLLM_ALLOW_LONG_MAX_MODEL_LEN": False, "VLLM_CPU_KVCACHE_SPACE": 1},
        "process_env": {"VLLM_HOST_IP": ip, "VLLM_API_KEY": api_key,
                        "VLLM_CPU_KVCACHE_SPACE": "1"},
        "config_hash": "c" * 10,
        "config": {"model_config": {"hash": "m" * 64, "fields": {"seed": seed,
                                                                 "max_model_len": 128}},
                   "additional_config": add},
        "model": {"model": model, "dtype": "torch.bfloat16", "rank": int(rank[5])},
        "command_line": ["vllm", "serve", model], "host": host, "pid": pid,
        "created": 1.8e9,
    }
    if tree == "backend":
        m["traced_files"] = [{"path": f"{site}/vllm/model_executor/models/llama.py",
                              "sha256": "a" * 64, "size": 10, "snapshot": False}]
    else:
        m["forward"] = {"qualname": "LlamaModel.forward", "firstlineno": 406,
                        "file": f"{site}/vllm/model_executor/models/llama.py"}
    return m


def _event(**f: Any) -> str:
    return json.dumps({"v": 1, "argv": ["vllm", "serve"], "recorder_s": 0.01, "prefix": "",
                       **({"reason": None} if f["tree"] == "aot" else {}), **f},
                      sort_keys=True)


class Fleet:
    """A shared root that starts write into as the recorder does."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.cc = root / "torch_compile_cache"
        self.lines: dict[str, list[str]] = {}
        self.t = 1.8e9

    def start(self, sid: str, host: str, *, aot: str, backend: str, hit: bool = False,
              tp: int = 1, model: str = MODEL, size: int = 1000, compile_s: float = 30.0,
              **kw: Any) -> None:
        self.t += 100
        for r in range(tp):
            rank, pid = f"rank_{r}_0", 1000 + r + int(self.t) % 10000
            d = self.cc / "torch_aot_compile" / aot / rank
            d.mkdir(parents=True, exist_ok=True)
            (d.parent / "blob").write_bytes(b"x" * size)
            dig, _ = write_manifest(str(d), _manifest("aot", aot, rank, "", model=model,
                                                      host=host, pid=pid, **kw),
                                    base=str(self.cc))
            ev = "hit" if hit else "miss"
            self.lines.setdefault(host, []).append(_event(
                event=ev, tree="aot", key=aot, rank=rank, host=host, pid=pid, start=sid,
                manifest=dig, seconds=2.0 if hit else 0.0001, time=self.t + r))
            if hit:
                continue
            d = self.cc / backend / rank / "backbone"
            d.mkdir(parents=True, exist_ok=True)
            (d / "blob").write_bytes(b"y" * (size // 10))
            dig, _ = write_manifest(str(d), _manifest("backend", backend, rank, "backbone",
                                                      model=model, host=host, pid=pid, **kw),
                                    base=str(self.cc))
            self.lines[host].append(_event(
                event="miss", tree="backend", key=backend, rank=rank, prefix="backbone",
                host=host, pid=pid, start=sid, manifest=dig, seconds=compile_s + r,
                dynamo_s=1.0, time=self.t + r + 30))

    def write_ledgers(self) -> None:
        d = self.cc / ".vllm-cache-tools" / "ledger"
        d.mkdir(parents=True, exist_ok=True)
        for host, lines in self.lines.items():
            (d / f"{host}.jsonl").write_text("".join(x + "\n" for x in lines))


def aot(n: int) -> str:
    return f"{n:064x}"


def backend(n: int) -> str:
    return f"{n:010x}"


@pytest.fixture
def fleet(tmp_path: Path) -> Fleet:
    f = Fleet(tmp_path / "root")
    f.start("s1", "pod-a", aot=aot(1), backend=backend(1), worker="w1", ip="10.0.0.1")
    f.start("s2", "pod-a", aot=aot(2), backend=backend(2), worker="w2", ip="10.0.0.1", seed=7,
            api_key="sk-other999")
    f.start("s3", "pod-b", aot=aot(3), backend=backend(3), worker="w3", ip="10.0.0.2", tp=2)
    f.start("s4", "pod-b", aot=aot(4), backend=backend(4), worker="w4", ip="10.0.0.2")
    f.start("s5", "pod-b", aot=aot(4), backend=backend(4), worker="w4", ip="10.0.0.2",
            hit=True)
    # Another model, every start the same: nothing to report for it.
    f.start("o1", "pod-a", aot=aot(9), backend=backend(9), worker=None, model=OTHER)
    f.start("o2", "pod-b", aot=aot(9), backend=backend(9), worker=None, model=OTHER, hit=True,
            ip="10.0.0.2")
    f.write_ledgers()
    return f


def factors(report: Any, model: str = MODEL) -> dict[str, Factor]:
    m = next(m for m in report.models if m.model == model)
    return {f"{f.component} {f.item}": f for f in m.factors}


def test_names_exactly_the_factors_with_their_entry_counts(fleet: Fleet) -> None:
    r = drift(fleet.root)
    assert r.basis == "ledger"
    m = next(m for m in r.models if m.model == MODEL)
    assert m.starts == 5 and m.entries == 8
    fs = factors(r)
    assert set(fs) == {"config additional_config.worker_id", "env VLLM_HOST_IP",
                       "env VLLM_API_KEY", "host name", "config model_config.seed"}
    w = fs["config additional_config.worker_id"]
    assert (w.entries, w.in_key, w.kind) == (4, True, "per run")
    assert dict(w.entries_by_tree) == {"aot": 4, "backend": 4}
    assert w.values == {"w4": 2, "w1": 1, "w2": 1, "w3": 1}
    assert w.fix.startswith("drop `additional_config.worker_id`")
    # The three starts with another value than w4 paid: their 6 entries and compile time.
    assert w.wasted_starts == 3
    assert w.wasted_seconds == pytest.approx(31 + 31 + 32)  # s3: the slower of two ranks
    assert w.wasted_bytes > 0
    assert next(iter(fs)) == "config additional_config.worker_id"  # ranked first
    for name, kind in (("env VLLM_HOST_IP", "per host"), ("host name", "per host")):
        f = fs[name]
        assert (f.entries, f.in_key, f.kind, f.wasted_bytes) == (1, False, kind, 0), name
        assert f.fix.startswith("none needed")
    assert fs["env VLLM_HOST_IP"].values == {"10.0.0.2": 3, "10.0.0.1": 2}
    seed = fs["config model_config.seed"]  # changed while model_config's hash did not
    assert (seed.in_key, seed.entries) == (False, 1)
    assert all(f.entries == 1 for m in r.models if m.model == OTHER for f in m.factors)


def test_secret_values_never_shown(fleet: Fleet) -> None:
    f = factors(drift(fleet.root))["env VLLM_API_KEY"]
    assert not any("sk-" in v for v in f.values) and len(f.values) == 2
    assert all(v.startswith("<redacted") for v in f.values)
    res = run_cli("drift", str(fleet.root), "--json")
    assert res.returncode == 0 and "sk-abc123" not in res.stdout and "sk-other" not in res.stdout
    res = run_cli("drift", str(fleet.root))
    assert "sk-abc123" not in res.stdout


def test_without_ledgers_each_manifest_writer_is_a_start(fleet: Fleet) -> None:
    shutil.rmtree(fleet.cc / ".vllm-cache-tools" / "ledger")
    r = drift(fleet.root)
    assert r.basis == "manifests"
    m = next(m for m in r.models if m.model == MODEL)
    assert m.starts == 4  # s5 recorded what s4 did: one manifest, one writer
    w = factors(r)["config additional_config.worker_id"]
    assert (w.entries, w.in_key) == (4, True)


def test_an_unreadable_ledger_is_named_not_counted_as_a_line(fleet: Fleet) -> None:
    """A ledger file that cannot be read is one problem naming it (was: "1 damaged ledger
    line(s) skipped (vllm-cache stats lists them)"); drift goes on from the manifests."""
    for p in (fleet.cc / ".vllm-cache-tools" / "ledger").glob("*.jsonl"):
        p.unlink()
        p.mkdir()  # not a regular file: read as a whole-file problem, even by root
    r = drift(fleet.root)
    assert r.basis == "manifests"
    assert r.problems and not any("damaged ledger line" in p for p in r.problems)
    assert all(p.startswith("ledger ") for p in r.problems), r.problems


def test_another_install_path_and_model_filter(tmp_path: Path) -> None:
    f = Fleet(tmp_path / "root")
    f.start("s1", "pod-a", aot=aot(1), backend=backend(1), worker=None)
    f.start("s2", "pod-b", aot=aot(1), backend=backend(2), worker=None,
            site="/srv/env2/lib/python3.11/site-packages")
    f.write_ledgers()
    fs = factors(drift(f.root, model="llama"))
    loc = fs["traced_files location"]
    # Traced-file paths are in the backend key (the AOT entry was shared: see forward.file).
    assert dict(loc.entries_by_tree) == {"backend": 2}
    assert (loc.entries, loc.in_key, loc.kind) == (2, True, "per install")
    assert "one path" in loc.fix
    assert fs["code forward.file"].in_key is False  # the AOT entry was shared
    assert run_cli("drift", str(f.root), "--model", "nomatch").returncode == 1


def test_cli_shape(fleet: Fleet) -> None:
    res = run_cli("drift", "--root", str(fleet.root), "--json")
    doc = json.loads(res.stdout)
    assert doc["schema"] == "vllm-cache-tools/drift/1" and doc["root"]
    m = doc["models"][0]
    assert set(m) >= {"model", "starts", "entries", "factors"}
    assert set(m["factors"][0]) >= {"component", "item", "values", "entries", "class", "fix"}
    text = run_cli("drift", str(fleet.root)).stdout
    assert "additional_config.worker_id: 4 values -> 4 entries [per run]" in text


@pytest.mark.parametrize(("component", "item", "values", "kind"), [
    ("env", "VLLM_NIXL_SIDE_CHANNEL_HOST", ["10.1.2.3", "10.1.2.4"], "per host"),
    ("env", "VLLM_RAY_BUNDLE_INDICES", ["0,1", "2,3"], "per run"),
    ("env", "VLLM_CPU_OMP_THREADS_BIND", ["0-15", "16-31"], "per host"),
    ("env", "VLLM_PORT", ["8000", "8001"], "per run"),
    ("config", "additional_config.worker_id", ["a", "b"], "per run"),
    ("config", "model_config.max_model_len", ["64", "128"], "setting"),
    ("env", "VLLM_SOMETHING", ["/home/a/x", "/home/b/x"], "per install"),
    ("versions", "torch", ["2.13", "2.12"], "per install"),
    ("hardware", "inductor system", ["a", "b"], "per host"),
])
def test_classes(component: str, item: str, values: list[str], kind: str) -> None:
    assert kind_of(component, item, values, 5) == kind


def test_from_a_remote_store(tmp_path: Path) -> None:
    """A store (fleet/remote.py) holds entries and their manifests, no ledger: stats from
    what the files prove, drift from the manifests."""
    from tests.conftest import REPO
    from vllm_cache_tools.analyze.stats import stats

    root = tmp_path / "root"
    shutil.copytree(REPO / "examples" / "sample_cache", root)
    url = f"file://{tmp_path / 'store'}"
    res = run_cli("push", "0b85", "b6a1", "28fd362d4e", "39ecaca4bf", url, "--root", str(root))
    assert res.returncode == 0, res.stderr
    s = stats(url)
    assert (s.kind, s.basis, s.totals.misses, s.entries) == ("remote", "files", 4, 4)
    d = drift(url)
    assert d.kind == "remote" and d.basis == "manifests"
    f = factors(d, d.models[0].model)["env VLLM_ALLOW_LONG_MAX_MODEL_LEN"]
    assert (f.entries, f.in_key) == (2, True)


def test_over_the_caps_starts_are_read_in_parts_and_limits_are_said(
        fleet: Fleet, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 23: ledgers with more starts than fit are read in parts on disk (the same
    report), and every limit that cuts something is one line in ``caps`` (and the CLI's)."""
    import vllm_cache_tools.analyze.drift as D
    import vllm_cache_tools.analyze.drift_starts as DS

    whole = drift(fleet.root)
    assert whole.caps == ()
    monkeypatch.setattr(DS, "MAX_STARTS", 2)
    monkeypatch.setattr(DS, "SPILL_PART_BYTES", 1)
    parts = drift(fleet.root)
    assert parts.models == whole.models and parts.basis == whole.basis
    assert len(parts.caps) == 1 and re.match(
        r"the ledgers hold more than 2 starts: read in \d+ parts by start \(.* in a temporary "
        r"folder, removed\), exactly$", parts.caps[0]), parts.caps
    monkeypatch.setattr(DS, "MAX_STARTS", 100)
    monkeypatch.setattr(D, "MAX_VALUES", 1)
    monkeypatch.setattr(D, "MAX_ROWS", 4)
    few = drift(fleet.root)  # the first 4 starts in file order: s1, s2, o1 (pod-a), s3
    assert "3 start(s) with a manifest past the first 4 are not compared (counted here only)" \
        in few.caps
    m = next(m for m in few.models if m.model == MODEL)
    assert m.starts == 3
    host = next(f for f in m.factors if f.component == "host")
    assert dict(host.values) == {"pod-a": 2, "<1 other values>": 1}
    assert any(c.startswith(f"{MODEL}: ") and "'<N other values>'" in c for c in few.caps)
    doc = drift_document(few)
    assert doc["caps"] == list(few.caps)
