"""Readers on hand-made inputs: the edge cases real caches rarely show."""

from __future__ import annotations

import collections
import contextlib
import os
import pickle
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vllm_cache_tools.read.compile_cache import parse_compile_cache
from vllm_cache_tools.read.errors import ReadError
from vllm_cache_tools.read.factors import parse_factors
from vllm_cache_tools.read.graph import parse_graph
from vllm_cache_tools.read.safe_pickle import SafePickleError, Stub, safe_loads
from vllm_cache_tools.read.triton import parse_triton_meta


class Point:
    def __init__(self, x: int) -> None:
        self.x = x


class WithReduce:
    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.system, ("exit 3",))


def test_safe_loads_builds_stubs_not_objects() -> None:
    data = pickle.dumps({"p": Point(3), "r": WithReduce(), "s": {1, 2},
                         "o": collections.OrderedDict(a=1), "b": b"\x00" * 10}, protocol=4)
    out = safe_loads(data)
    assert isinstance(out["p"], Stub) and out["p"].qualname() == f"{__name__}.Point"
    assert out["p"].field("x") == 3
    assert isinstance(out["r"], Stub) and out["r"].qualname() == "posix.system"
    assert out["r"].args == ("exit 3",)
    assert out["s"] == {1, 2} and out["o"] == {"a": 1} and out["b"] == b"\x00" * 10


@pytest.mark.parametrize("blob", [b"", b"\x80\x04", b"not a pickle", b"\x80\x04\x95\xff"])
def test_safe_loads_rejects_garbage(blob: bytes) -> None:
    with pytest.raises(SafePickleError):
        safe_loads(blob)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200))
def test_safe_loads_never_raises_anything_else(blob: bytes) -> None:
    with contextlib.suppress(SafePickleError):
        safe_loads(blob)


def _nested(depth: int, inner: object) -> object:
    out = inner
    for _ in range(depth - 1):
        out = [out]
    return out


@pytest.mark.parametrize("inner", [[], {}, (), [1], Point(1)])
def test_safe_loads_bounds_the_depth_empty_containers_included(inner: object) -> None:
    """The result read as a tree is at most MAX_DEPTH deep; an empty container (most of a
    stand-in's fields) counts one level, as any container does, without being walked."""
    from vllm_cache_tools.read import safe_pickle

    limit = safe_pickle.MAX_DEPTH - (1 if isinstance(inner, Point) else 0)  # a stand-in's
    assert safe_loads(pickle.dumps(_nested(limit, inner), protocol=4)) is not None  # fields
    with pytest.raises(SafePickleError, match="nested more than 100 deep"):
        safe_loads(pickle.dumps(_nested(limit + 1, inner), protocol=4))


def test_safe_loads_counts_shared_values_each_time_empty_ones_too(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Shared values count each time they are reached (a DAG doubling at each level is
    refused, not walked), empty containers included; a value that contains itself is
    refused."""
    from vllm_cache_tools.read import safe_pickle

    monkeypatch.setattr(safe_pickle, "MAX_TREE_NODES", 1000)
    empty: list[object] = []
    assert safe_loads(pickle.dumps([empty] * 999, protocol=4)) == [[]] * 999  # 1,000 values
    with pytest.raises(SafePickleError, match="more than 1000 values"):
        safe_loads(pickle.dumps([empty] * 1000, protocol=4))
    x: list[object] = [1]
    for _ in range(40):
        x = [x, x]
    with pytest.raises(SafePickleError, match="more than 1000 values"):
        safe_loads(pickle.dumps(x, protocol=4))
    loop: list[object] = [{}]
    loop.append(loop)
    with pytest.raises(SafePickleError, match="contains itself"):
        safe_loads(pickle.dumps(loop, protocol=4))


def test_factors_parsing() -> None:
    f = parse_factors('{"code_hash": "a", "compiler_hash": "b", "config_hash": "c", '
                      '"env": {"VLLM_X": 1}, "future": 2}')
    assert (f.code_hash, f.compiler_hash, f.config_hash, f.env, f.extra) == (
        "a", "b", "c", {"VLLM_X": 1}, {"future": 2})
    for bad in ("", "{", "[1]", "null"):
        with pytest.raises(ReadError):
            parse_factors(bad)


def test_compile_cache_literal_variants() -> None:
    # vLLM 0.32 standalone-compile handles, and the older (key, path) tuple handles.
    new = parse_compile_cache("{((1, 128), 0, 'inductor_standalone'): {'cache_key': 'k', "
                              "'graph_handle': ('artifact_compile_range_1_128_subgraph_0', "
                              "'/x/artifact_compile_range_1_128_subgraph_0')}}")
    assert new[0].compile_range == "(1, 128)" and new[0].artifact.startswith("artifact_")
    old = parse_compile_cache("{(None, 0, 'inductor'): ('fxgraphkey', '/tmp/x.py'), "
                              "(8, 1, 'inductor'): ('k2', '/tmp/y.py')}")
    assert [(r.compile_range, r.graph_index, r.artifact) for r in old] == [
        ("8", 1, "k2"), ("None", 0, "fxgraphkey")]
    for bad in ("__import__('os').system('true')", "[1, 2]", "{", "lambda: 1"):
        with pytest.raises(ReadError):
            parse_compile_cache(bad)


def test_graph_provenance_comments() -> None:
    text = ("class GraphModule(torch.nn.Module):\n"
            "    def forward(self, x):\n"
            "        submod_0 = self.submod_0(x)\n"
            "        # File: /v/site-packages/vllm/model_executor/models/llama.py:406 in forward,"
            " code: h = x\n"
            "        # File: /v/site-packages/vllm/model_executor/layers/linear.py:10 in "
            "forward, code: y\n")
    g = parse_graph(text)
    assert g.files[0].endswith("llama.py") and len(g.files) == 2
    assert g.submodules == ("submod_0",)
    assert g.model_file == "/v/site-packages/vllm/model_executor/models/llama.py"


def test_triton_metadata_targets() -> None:
    assert parse_triton_meta('{"name": "k", "target": {"backend": "cuda", "arch": 90, '
                             '"warp_size": 32}, "triton_version": "3.4.0"}').target == "cuda sm_90"
    assert parse_triton_meta('{"target": ["hip", "gfx942", 64]}').target == "hip gfx942"
    with pytest.raises(ReadError):
        parse_triton_meta("[]")


def test_a_walked_file_is_opened_only_while_it_is_still_a_regular_file(tmp_path: Path) -> None:
    """``walked_fd`` (a pack's open of a file its walk found regular) opens in two system
    calls and keeps the atime; what is no longer a regular file by then (a symlink, a FIFO:
    never blocked on, a folder) or gone is refused with ``open_noatime``'s reason, and no
    descriptor is left open."""
    from vllm_cache_tools.read.errors import UnreadableError
    from vllm_cache_tools.read.noatime import walked_fd

    f = tmp_path / "f"
    f.write_bytes(b"abc")
    os.utime(f, (1_000_000, 2_000_000))
    fds = len(os.listdir("/proc/self/fd"))
    with walked_fd(os.fspath(f)) as (fd, st):
        assert os.read(fd, 10) == b"abc" and st.st_size == 3
    assert f.stat().st_atime == 1_000_000
    (tmp_path / "link").symlink_to(f)
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "dir").mkdir()
    for name, why in (("link", "is a symlink"), ("fifo", "is a FIFO"),
                      ("dir", "is a folder"), ("gone", "No such file")):
        with pytest.raises(UnreadableError, match=why), walked_fd(os.fspath(tmp_path / name)):
            pass
    assert len(os.listdir("/proc/self/fd")) == fds


def test_noatime_reads_do_not_touch_atime(tmp_path: Path) -> None:
    from vllm_cache_tools.read.noatime import read_noatime

    p = tmp_path / "f"
    p.write_bytes(b"data")
    os.utime(p, (1_000_000, 2_000_000))
    assert read_noatime(p) == b"data"
    assert p.stat().st_atime == 1_000_000


def test_pre_0_7_3_inductor_hash_cache_list() -> None:
    # vLLM 0.7.0 wrote 4-tuples (shape, graph_index, hash, path); 0.6.5 3-tuples.
    recs = parse_compile_cache("[(None, 0, 'fabc', '/c/x.py'), (16, 1, 'fdef', '/c/y.py')]")
    assert [(r.compile_range, r.graph_index, r.compiler, r.artifact) for r in recs] == [
        ("16", 1, "inductor", "fdef"), ("None", 0, "inductor", "fabc")]


def test_a_read_sized_by_the_file_gives_the_bytes_of_a_read_of_the_cap(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``read_noatime`` / ``read_source_text`` read once, sized by the file (``read_capped``):
    the same bytes as ``f.read(cap)`` for every size around the cap, for a file the kernel
    sizes 0 (``/proc``), and for one that grew after it was sized."""
    from vllm_cache_tools.read import noatime

    for n in (0, 1, 4095, 4096, 4097, 1 << 20):
        p = tmp_path / f"f{n}"
        data = os.urandom(n)
        p.write_bytes(data)
        assert noatime.read_noatime(p) == data
        for cap in {0, 1, max(n - 1, 0), n, n + 1, 1 << 30}:
            assert noatime.read_noatime(p, cap) == data[:cap], (n, cap)
        text = p.with_suffix(".py")
        text.write_text("x" * n)
        assert noatime.read_source_text(text, limit=n) == "x" * n
        assert n == 0 or noatime.read_source_text(text, limit=n - 1) is None
    assert noatime.read_noatime("/proc/self/status").startswith(b"Name:")
    grown = tmp_path / "grown"
    grown.write_bytes(b"a" * 10_000)
    real = os.fstat

    def stale(fd: int) -> os.stat_result:  # sized before 9,000 bytes were appended
        st = list(real(fd))
        st[6] = 1_000  # st_size
        return os.stat_result(st)

    monkeypatch.setattr(noatime.os, "fstat", stale)
    with open(grown, "rb") as f:
        assert noatime.read_capped(f, 1 << 20) == b"a" * 10_000
        f.seek(0)
        assert noatime.read_capped(f, 5_000) == b"a" * 5_000


def test_the_torch_comments_of_a_compiled_graph_are_read() -> None:
    """The graph module's ``# torch version:`` / ``# torch cuda version:`` comments (a GPU
    build writes them; a CPU build's graph has neither, and is not searched twice)."""
    from vllm_cache_tools.read.aot_model import _compiled_fn

    def info(gm: bytes) -> tuple[str | None, str | None]:
        blob = pickle.dumps({"graph_module": gm, "prefix": "backbone", "submod_names": []})
        got = _compiled_fn({"compiled_fn": (None, blob)})
        assert got is not None and got.prefix == "backbone"
        return got.torch_version_comment, got.torch_cuda_version_comment

    gm = b"x" * 100_000 + b"\n# torch version: 2.9.0+cu128\n# torch cuda version: 12.8\n"
    assert info(gm) == ("2.9.0+cu128", "12.8")
    assert info(b"# torch cuda version: 12.8\n") == (None, "12.8")
    assert info(b"x" * 100_000) == (None, None)
    assert info(b"# torch  version: 1\n") == (None, None)
