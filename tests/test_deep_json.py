"""JSON nested far too deep, in every place the tool reads JSON from (issue 23, item 9): a
bundle manifest, a store's index object and marker, a recorder manifest and cache factors in a
root, a ledger line, a host profile. Each is one line and exit 2 (or, where the reader goes on
past a bad file, a named problem), never "internal error: RecursionError" (exit 3).

The bundle and store are made by ``pack`` / ``push`` from examples/sample_cache (a real root
made by vLLM with the recorder on); the deep text replaces one real file."""

from __future__ import annotations

import io
import json
import shutil
import tarfile
from pathlib import Path

import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import run_cli
from vllm_cache_tools.read import jsontext
from vllm_cache_tools.read.errors import UnreadableError

SAMPLE = Path(__file__).resolve().parent.parent / "examples" / "sample_cache"
DEEP = b"[" * 200_000 + b"]" * 200_000
DEEP_OBJ = b'{"a":' * 100_000 + b"1" + b"}" * 100_000


def _one_line_no_trace(r, rc: int = 2) -> None:  # type: ignore[no-untyped-def]
    assert r.returncode == rc, (r.returncode, r.stdout[-500:], r.stderr[-500:])
    assert "Traceback" not in r.stderr and "RecursionError" not in r.stderr
    assert "internal error" not in r.stderr
    assert r.stderr.count("\n") <= 1, r.stderr


# ---- the reader ------------------------------------------------------------------------

def _depth(v: object) -> int:
    if isinstance(v, dict):
        return 1 + max((_depth(x) for x in v.values()), default=0)
    if isinstance(v, list):
        return 1 + max((_depth(x) for x in v), default=0)
    return 0


CASES = [
    [], {}, [[[]]], {"a": [1, {"b": []}]}, ["[[[[", "]]]", {"k[": "{{"}],
    ["\\", [["\\\""]]], ["\"]]]]\"", [[1]]], [{"a": [[[[[[[[[[]]]]]]]]]]}],
    {"x": "\\\\\\\"[", "y": [[[{"z": "]}"}]]]}, ["é[", ["\u202e{"]],
]


@pytest.mark.parametrize("value", CASES, ids=range(len(CASES)))
def test_text_depth_is_exact_for_valid_json(value: object) -> None:
    d = _depth(value)
    for text in (json.dumps(value), json.dumps(value, ensure_ascii=False)):
        for raw in (text, text.encode()):
            assert not jsontext.text_depth_over(raw, d)
            assert jsontext.text_depth_over(raw, d - 1) == (d > 0)


_TEXT = st.text(alphabet='[]{}"\\ab\u00e9\u202e', max_size=8)
_JSON = st.recursive(st.none() | st.integers() | _TEXT,
                     lambda kids: st.lists(kids, max_size=4)
                     | st.dictionaries(_TEXT, kids, max_size=4), max_leaves=30)


@settings(max_examples=300, deadline=None)
@given(_JSON)
def test_text_depth_matches_the_parsed_depth(value: object) -> None:
    """Strings full of brackets, quotes and backslashes never fool the check."""
    d = _depth(value)
    raw = json.dumps(value, ensure_ascii=False)
    assert not jsontext.text_depth_over(raw, d)
    assert jsontext.text_depth_over(raw, d - 1) == (d > 0)


@pytest.mark.parametrize("raw", [DEEP, DEEP_OBJ, DEEP.decode(), b"[" * 50_000])
def test_deep_text_is_refused_before_parsing(raw: bytes | str) -> None:
    with pytest.raises(UnreadableError, match="nested"):
        jsontext.loads(raw, "x.json", max_containers=None)


def test_the_cap_is_documented_and_shallow_text_passes() -> None:
    ok = b"[" * jsontext.MAX_DEPTH + b"]" * jsontext.MAX_DEPTH
    assert jsontext.loads(ok, "x") is not None
    with pytest.raises(UnreadableError, match=f"more than {jsontext.MAX_DEPTH} deep"):
        jsontext.loads(b"[" + ok + b"]", "x")


# ---- the verbs -------------------------------------------------------------------------

@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("store")
    r = run_cli("push", "--root", str(SAMPLE), "b6a1", f"file://{d}/store")
    assert r.returncode == 0, r.stderr
    return d / "store"


def _store_copy(store: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "store"
    shutil.copytree(store, dst)
    return dst


def test_deep_index_object(store: Path, tmp_path: Path) -> None:
    s = _store_copy(store, tmp_path)
    idx = sorted((s / "entries" / "backend").glob("*.json"))[0]
    idx.write_bytes(DEEP)
    url = f"file://{s}"
    for args in (["ls", url], ["pull", url, "--root", str(tmp_path / "r")], ["stats", url],
                 ["drift", url]):
        r = run_cli(*args)
        # A store that names and skips one bad index object (issue 23 item 6) may go on.
        assert r.returncode != 3 and "Traceback" not in r.stderr, (args, r.stderr[-400:])
        assert "nested more than 64 deep" in r.stderr, (args, r.stderr)
        assert idx.name in r.stderr


def test_deep_store_marker(store: Path, tmp_path: Path) -> None:
    s = _store_copy(store, tmp_path)
    (s / "vllm-cache-store.json").write_bytes(DEEP_OBJ)
    r = run_cli("ls", f"file://{s}")
    _one_line_no_trace(r)
    # Refused by the marker's byte cap (a marker is a few hundred bytes) or by its depth.
    assert "is not a vllm-cache store marker" in r.stderr or "is over 65536 bytes" in r.stderr


def test_deep_bundle_manifest(tmp_path: Path) -> None:
    good = tmp_path / "good.tar.zst"
    assert run_cli("pack", "--root", str(SAMPLE), "b6a1", "-o", str(good)).returncode == 0
    with open(good, "rb") as f, zstandard.ZstdDecompressor().stream_reader(f) as z, \
            tarfile.open(fileobj=z, mode="r|") as tar:
        items = [(m, tar.extractfile(m).read() if m.isreg() else b"")  # type: ignore[union-attr]
                 for m in tar]
    first, _ = items[0]
    first.size = len(DEEP)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as out:
        for m, data in [(first, DEEP), *items[1:]]:
            out.addfile(m, io.BytesIO(data) if m.isreg() else None)
    bad = tmp_path / "deep.tar.zst"
    bad.write_bytes(zstandard.ZstdCompressor().compress(buf.getvalue()))
    root = tmp_path / "root"
    r = run_cli("unpack", str(bad), "--root", str(root))
    _one_line_no_trace(r)
    assert "bundle manifest not read: JSON nested more than 64 deep" in r.stderr
    assert not (root / "torch_compile_cache").exists() or not any(
        p.name != ".vllm-cache-tools" for p in (root / "torch_compile_cache").iterdir())


@pytest.fixture()
def root(tmp_path: Path) -> Path:
    dst = tmp_path / "root"
    shutil.copytree(SAMPLE, dst, symlinks=True)
    return dst


def test_deep_manifest_factors_and_ledger_in_a_root(root: Path) -> None:
    cc = root / "torch_compile_cache"
    manifest = next(cc.glob("28fd362d4e/rank_0_0/backbone/vct-manifest.*.json"))
    manifest.write_bytes(DEEP_OBJ)
    (cc / "39ecaca4bf" / "rank_0_0" / "backbone" / "cache_key_factors.json").write_bytes(DEEP)
    with open(cc / ".vllm-cache-tools" / "ledger" / "vm.jsonl", "ab") as f:
        f.write(b'{"v": 1, "x": ' + DEEP + b"}\n")
    for args in (["ls", "--root", str(root)], ["show", "28fd362d4e",
                                                               "--root", str(root)],
                 ["show", "39ecaca4bf", "--root", str(root)], ["audit", "--root", str(root)],
                 ["verify", "--root", str(root)], ["stats", "--root", str(root)]):
        r = run_cli(*args)
        assert r.returncode in (0, 1), (args, r.returncode, r.stderr[-500:])
        assert "Traceback" not in r.stderr and "internal error" not in r.stderr, args
    r = run_cli("predict", "--for-host", str(manifest), "--root", str(root), "--", "/m")
    _one_line_no_trace(r)
    assert "nested more than 64 deep" in r.stderr


def test_deep_host_profile(tmp_path: Path) -> None:
    prof = tmp_path / "profile.json"
    prof.write_bytes(DEEP_OBJ)
    r = run_cli("predict", "--for-host", str(prof), "--root", str(SAMPLE), "--", "/m")
    _one_line_no_trace(r)
    assert "nested more than 64 deep" in r.stderr
