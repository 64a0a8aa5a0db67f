"""``stats``' memo per ledger: a later run reads only the appended lines and reports exactly
what a run without the memo reports; a ledger rewritten, truncated or replaced is read again;
a damaged memo is ignored."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import msgspec
import pytest

from tests.test_stats import root_with, start_lines
from vllm_cache_tools.analyze import stats_memo
from vllm_cache_tools.analyze.stats import stats
from vllm_cache_tools.views.insight import stats_document

T = 1.8e9


@pytest.fixture(autouse=True)
def memo_here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setattr(stats_memo, "MIN_BYTES", 0)
    return tmp_path / "xdg" / "vllm-cache-tools" / "stats"


def runs(root: Path, monkeypatch: pytest.MonkeyPatch, by: str = "model") -> dict[str, Any]:
    """The report with the memo, after checking it equals the report without."""
    with_memo = stats_document(stats(root, by=by))
    monkeypatch.setenv(stats_memo.DISABLE_VAR, "0")
    without = stats_document(stats(root, by=by))
    monkeypatch.delenv(stats_memo.DISABLE_VAR)
    assert with_memo == without
    return with_memo


def ledger(root: Path, host: str) -> Path:
    return root / "torch_compile_cache" / ".vllm-cache-tools" / "ledger" / f"{host}.jsonl"


def append(p: Path, lines: list[str]) -> None:
    with open(p, "a") as f:
        f.write("".join(x + "\n" for x in lines))


@pytest.mark.parametrize("by", ["model", "host", "entry"])
def test_appended_lines_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, memo_here: Path,
                             by: str) -> None:
    a = [x for i in range(5) for x in start_lines("pod-a", f"a{i}", T + i * 100,
                                                     ("miss", "hit")[i % 2], tp=2)]
    b = start_lines("pod-b", None, T, "load-failure", compile_s=40.0)
    root = root_with(tmp_path, {"pod-a": a[:-1], "pod-b": b})  # a4's second worker later
    first = runs(root, monkeypatch, by)
    assert len(list(memo_here.glob("*.msgpack"))) == len(list(memo_here.glob("*.sum"))) == 2
    seen: list[Any] = []
    real_load = stats_memo.load
    monkeypatch.setattr(stats_memo, "load", lambda *a: seen.append(r := real_load(*a)) or r)
    append(ledger(root, "pod-a"), [a[-1], "not json",
                                   *start_lines("pod-a", "a9", T + 900, "hit")])
    later = runs(root, monkeypatch, by)
    assert seen and all(k is not None and k.offset > 0 for k in seen[:2])
    assert later["totals"]["starts"] == first["totals"]["starts"] + 1
    (problem,) = later["problems"]
    assert problem.startswith("ledger pod-a.jsonl line 17: not a ledger event")
    seen.clear()
    again = runs(root, monkeypatch, by)  # nothing appended: the kept sums alone
    assert again == later and not seen


def test_kept_sums_hold_only_for_the_same_file_and_models(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch,
                                                          memo_here: Path) -> None:
    lines = [x for i in range(4) for x in start_lines("h", f"s{i}", T + i * 100,
                                                         ("miss", "hit")[i % 2])]
    root = root_with(tmp_path, {"h": lines})
    first = runs(root, monkeypatch)
    p = ledger(root, "h")
    digest = stats_memo.models_digest("model", {})
    got = stats_memo.load_summary(p, "model", digest)
    assert got is not None and got.groups and got.bad == 0
    assert stats_memo.load_summary(p, "model", "another table") is None
    assert stats_memo.load_summary(p, "host", "") is None  # never summed up by host
    assert stats_memo.models_digest("model", {"k": "m"}) != digest
    assert stats_memo.models_digest("host", {"k": "m"}) == ""
    (m,) = memo_here.glob("*.sum")
    good = m.read_bytes()
    for junk in (b"", good[:-5], b"\xc1" * 50):
        m.write_bytes(junk)
        assert stats_memo.load_summary(p, "model", digest) is None
        assert runs(root, monkeypatch) == first
    with open(p, "a") as f:
        f.write(lines[0][:30])  # a line being written: its sums are not kept
    r = runs(root, monkeypatch)
    assert len(r["problems"]) == 1 and stats_memo.load_summary(p, "model", digest) is None


def test_a_line_being_written_is_read_again_when_whole(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    lines = [x for i in range(4) for x in start_lines("h", f"s{i}", T + i * 100, "hit")]
    root = root_with(tmp_path, {"h": lines[:3]})
    p = ledger(root, "h")
    with open(p, "a") as f:
        f.write(lines[3][:40])  # the recorder is writing it
    r = runs(root, monkeypatch)
    assert r["totals"]["starts"] == 3 and len(r["problems"]) == 1
    with open(p, "a") as f:
        f.write(lines[3][40:] + "\n")
    r = runs(root, monkeypatch)
    assert r["totals"]["starts"] == 4 and not r["problems"]


@pytest.mark.parametrize("change", ["rewrite", "truncate", "replace"])
def test_a_ledger_not_only_appended_is_read_again(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch,
                                                  change: str) -> None:
    lines = [x for i in range(6) for x in start_lines("h", f"s{i}", T + i * 100, "hit")]
    root = root_with(tmp_path, {"h": lines})
    runs(root, monkeypatch)
    p = ledger(root, "h")
    other = [x.replace('"start": "s', '"start": "z') for x in lines]
    if change == "rewrite":  # same inode, same size, other events
        with open(p, "r+") as f:
            f.write("".join(x + "\n" for x in other))
    elif change == "truncate":
        with open(p, "r+") as f:
            f.truncate(len(lines[0]) + 1)
    else:  # rotated: a new file under the name
        q = p.with_suffix(".new")
        q.write_text("".join(x + "\n" for x in other + other[:2]))
        os.replace(q, p)
    r = runs(root, monkeypatch)
    assert r["totals"]["starts"] == {"rewrite": 6, "truncate": 1, "replace": 6}[change]


def test_a_damaged_memo_is_ignored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                   memo_here: Path) -> None:
    lines = [x for i in range(3) for x in start_lines("h", f"s{i}", T + i * 100, "hit")]
    root = root_with(tmp_path, {"h": lines})
    runs(root, monkeypatch)
    for s in memo_here.glob("*.sum"):
        s.unlink()  # the tally itself, not the sums kept beside it
    (m,) = memo_here.glob("*.msgpack")
    good = m.read_bytes()
    kept = stats_memo._DECODER.decode(good)
    bad_index = msgspec.structs.replace(kept, names=[])
    bad_flags = msgspec.structs.replace(kept, starts=[(*s[:2], 99, *s[3:]) for s in kept.starts])
    for junk in (b"", b"\x93\x01", good[:-7], b"\xc1" * 100,
                 msgspec.msgpack.encode(bad_index), msgspec.msgpack.encode(bad_flags)):
        m.write_bytes(junk)
        assert runs(root, monkeypatch)["totals"]["starts"] == 3
        for s in memo_here.glob("*.sum"):
            s.unlink()


def test_not_with_since_nor_small_ledgers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          memo_here: Path) -> None:
    lines = [x for i in range(3) for x in start_lines("h", f"s{i}", T + i * 100, "hit")]
    root = root_with(tmp_path, {"h": lines})
    stats(root, since=T + 50)
    assert not memo_here.exists()
    monkeypatch.setattr(stats_memo, "MIN_BYTES", 1 << 20)
    stats(root)
    assert not memo_here.exists()
