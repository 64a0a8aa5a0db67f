"""``stats``: the streaming ledger reader agrees with the ledger reader, starts and outcomes
are counted as documented, copies of one host's ledger merge without double counting, damaged
lines are reported, and a source without ledgers says what it cannot count."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO, run_cli
from vllm_cache_tools.analyze.stats import stats
from vllm_cache_tools.read import ledger_stream as L
from vllm_cache_tools.read.errors import ReadError
from vllm_cache_tools.read.manifest import read_ledger

SAMPLE = REPO / "examples" / "sample_cache"
AOT = "a" * 64
AOT2 = "b" * 64
BACKEND = "0123456789"


def line(**fields: Any) -> str:
    """A ledger line exactly as the recorder writes one (recorder/hooks.py + write.py)."""
    event = {"v": 1, "argv": ["vllm", "serve", "m", "--api-key", "<redacted>"],
             "recorder_s": 0.01, "rank": "rank_0_0", "prefix": "", "manifest": "ab" * 8,
             **fields}
    if event.get("tree") == "aot":
        event.setdefault("reason", None)
    return json.dumps(event, sort_keys=True, default=repr)


def root_with(tmp_path: Path, ledgers: dict[str, list[str]], name: str = "root") -> Path:
    root = tmp_path / name
    d = root / "torch_compile_cache" / ".vllm-cache-tools" / "ledger"
    d.mkdir(parents=True)
    for host, lines in ledgers.items():
        (d / f"{host}.jsonl").write_text("".join(x + "\n" for x in lines))
    return root


def start_lines(host: str, start: str | None, t: float, kind: str, tp: int = 1,
                compile_s: float = 10.0, pid0: int = 100) -> list[str]:
    out = []
    for r in range(tp):
        base: dict[str, Any] = {"host": host, "pid": pid0 + r, "rank": f"rank_{r}_0"}
        if start:
            base["start"] = start
        if kind == "hit":
            out.append(line(**base, event="hit", tree="aot", key=AOT, seconds=2.0 + r,
                            time=t + r))
        elif kind == "miss":
            out.append(line(**base, event="miss", tree="aot", key=AOT, seconds=0.0001,
                            time=t + r))
            out.append(line(**base, event="miss", tree="backend", key=BACKEND,
                            prefix="backbone", seconds=compile_s + r, dynamo_s=1.0,
                            time=t + r + 20))
        elif kind == "load-failure":
            out.append(line(**base, event="load-failure", tree="aot", key=AOT, seconds=0.5,
                            time=t + r, reason="Compiling model again due to a load failure"))
            out.append(line(**base, event="miss", tree="backend", key=BACKEND,
                            prefix="backbone", seconds=compile_s, dynamo_s=1.0,
                            time=t + r + 20))
    return out


# ---- the reader ---------------------------------------------------------------------------

REAL_LINES = (SAMPLE / "torch_compile_cache" / ".vllm-cache-tools" / "ledger" /
              "vm.jsonl").read_text().splitlines()


@pytest.mark.parametrize("text", [
    *REAL_LINES,
    line(event="hit", tree="aot", key=AOT, host="h", pid=1, seconds=2.5, time=1.8e9,
         start="0123abcd"),
    line(event="miss", tree="backend", key=BACKEND, host="h", pid=1, seconds=1e-05,
         dynamo_s=0.25, time=1800000000, prefix="eagle_head"),
    line(event="load-failure", tree="aot", key=AOT, host="pod-a.example", pid=None,
         seconds=None, time=1.8e9, reason='vLLM said "no" \\ twice'),
    line(event="disabled", tree="backend", key=BACKEND, host="h", pid=7, seconds=None,
         time=1.8e9),
    line(event="hit", tree="aot", key=AOT, host='h"x', pid=1, seconds=1.0, time=1.8e9),
    line(event="hit", tree="aot", key=AOT, host="h\\x", pid=1, seconds=1.0, time=1.8e9),
    line(event="hit", tree="aot", key=AOT, host="h", pid=1, seconds=1e9, time=1.8e9),
    line(event="hit", tree="aot", key=AOT, host="h", pid=1, seconds=1.0, time=1.8e9,
         extra_field={"nested": [1, 2]}),
    json.dumps({"time": 1.8e9, "event": "hit", "tree": "aot", "key": AOT, "host": "h"}),
    "  " + json.dumps({"time": 1.8e9, "event": "hit", "tree": "aot", "key": AOT}) + " \r",
])
def test_block_path_reads_like_the_line_reader(tmp_path: Path, text: str) -> None:
    """A block of lines decodes in one call only to what each line gives alone, and the ledger
    reader of ``ls`` reads the same record."""
    one = L.parse_ledger_line(text.encode(), L.StatsEvent)
    block = (text + "\n") * 3
    assert L._BLOCK.decode(b"[" + block[:-1].replace("\n", ",").encode() + b"]") == [one] * 3
    root = root_with(tmp_path, {"h": [text]})
    rows = list(L.read_rows(root / "torch_compile_cache/.vllm-cache-tools/ledger/h.jsonl"))
    assert rows == [one]
    events, problems = read_ledger(root / "torch_compile_cache")
    assert events == [L.parse_ledger_line(text.encode())] and not problems
    assert events[0].time == one.time and events[0].key == one.key


def test_block_decodes_only_to_what_its_lines_give_alone() -> None:
    """Damaged copies of real lines (bytes flipped, cut, joined, doubled), three to a block:
    whenever the block decodes in one call, it gives exactly the events its lines give one by
    one; when it does not, the line-by-line reading gives each line's own answer."""
    import random

    rng = random.Random(15)
    base = [x.encode() for x in REAL_LINES] + [
        line(event="miss", tree="backend", key=BACKEND, host="h", pid=1, seconds=1.0,
             dynamo_s=0.5, time=1.8e9, start="s").encode()]
    decoded = fell_back = 0
    for _ in range(3000):
        block = []
        for _ in range(3):
            b = bytearray(rng.choice(base))
            for _ in range(rng.randrange(3)):
                i = rng.randrange(len(b))
                b[i:i + 1] = rng.choice([b"", b"}", b"{", b"]", b",", b" ", b"\n", b'"', b"0",
                                         bytes([rng.randrange(256)])])
            block.append(bytes(b).replace(b"\n", b" "))
        data = b"\n".join(block) + b"\n"
        alone: list[Any] = []
        for x in block:
            try:
                alone.append(L.parse_ledger_line(x, L.StatsEvent))
            except ReadError:
                if x.strip():
                    alone.append(None)
        out: list[Any] = []
        L._block(data, len(data), "h", 0, out)
        got = [r for b in out if isinstance(b, list) for r in b]
        problems = [b for b in out if isinstance(b, L.LedgerProblem)]
        assert got == [a for a in alone if a is not None]
        assert len(problems) == alone.count(None)
        if problems or any(not x.strip() for x in block):
            fell_back += 1
        else:
            decoded += 1
    assert decoded > 100 and fell_back > 100, (decoded, fell_back)


def test_a_non_utf8_command_line_is_read(tmp_path: Path) -> None:
    """argv with a byte that is not UTF-8 reaches the ledger as a lone surrogate escape, which
    msgspec refuses and ``json`` reads: the line is an event, on both readers."""
    text = line(event="hit", tree="aot", key=AOT, host="h", pid=1, seconds=1.0, time=1.8e9,
                start="s1")
    text = text.replace('"vllm"', '"vllm-\\udcff"')
    assert "\\udcff" in text
    root = root_with(tmp_path, {"h": [text, text.replace('"s1"', '"s2"')]})
    r = stats(root)
    assert r.totals.hits == 2 and not r.problems


@pytest.mark.parametrize("bad", [
    "{", "[]", "null", '{"time": 1.8e9}', "x" * 70000,
    line(event="hit", tree="aot", key=AOT, host="h", pid=1, seconds=-1.0, time=1.8e9),
    line(event="hit", tree="aot", key=AOT, host="h", pid=1, seconds=1.0, time=1e300),
    # Longer than ~31 years: two such lines summed to inf ("compiling infd", JSON Infinity).
    line(event="hit", tree="aot", key=AOT, host="h", pid=1, seconds=1e300, time=1.8e9),
    line(event="hit", tree="aot", key=AOT, host="h", pid=True, seconds=1.0, time=1.8e9),
    "{}{}", "[" * 5000 + "]" * 5000,
    # A lone surrogate in a checked text field (found by the fuzzer: UnicodeEncodeError).
    line(event="hit", tree="\ud800", key=AOT, host="h", pid=1, seconds=1.0, time=1.8e9),
    line(event="launch", tree="aot", key=AOT, host="h", pid=1, seconds=1.0, time=1.8e9),
    line(event="hit", tree="aot", key=AOT, host="h", pid=1, seconds=1.0, time=1.8e9)[:-9],
    line(event="hit", tree="aot", key=AOT, host="h", pid=1, seconds=1.0, time=1.8e9) * 2,
])
def test_damaged_lines_are_reported_not_counted(tmp_path: Path, bad: str) -> None:
    good = start_lines("h", "s1", 1.8e9, "hit")
    root = root_with(tmp_path, {"h": [good[0], bad, good[0].replace("s1", "s2")]})
    r = stats(root)
    assert r.totals.starts == 2 and r.totals.hits == 2
    assert len(r.problems) == 1 and "h.jsonl line 2" in r.problems[0], r.problems
    assert "\n" not in r.problems[0] and len(r.problems[0]) < 300


def test_an_event_cut_in_two_lines_is_two_damaged_lines(tmp_path: Path) -> None:
    """A newline inside a value makes a comma that can still parse (``["a"`` + ``"b"]``, or
    between two fields): the block then holds fewer values than lines and is read line by
    line, so both halves are reported and the line numbers stay right."""
    good = start_lines("h", "s1", 1.8e9, "hit")
    whole = line(event="hit", tree="aot", key=AOT, host="h", pid=1, seconds=1.0, time=1.8e9,
                 start="s9")
    for cut in ('"serve", ', '"event": "hit", '):
        i = whole.index(cut) + len(cut) - 2
        halves = [whole[:i], whole[i + 1:].lstrip()]
        assert L._BLOCK.decode(f"[{halves[0]},{halves[1]}]".encode())  # it would parse
        root = root_with(tmp_path / cut[1:4], {"h": [good[0], *halves, good[0].replace(
            "s1", "s2"), "oops"]})
        r = stats(root)
        assert r.totals.starts == 2 and r.totals.hits == 2
        assert [p.split(":")[0] for p in r.problems] == [
            "ledger h.jsonl line 2", "ledger h.jsonl line 3", "ledger h.jsonl line 5"]


def test_chunks_and_an_endless_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(L, "CHUNK_BYTES", 700)
    lines = [x for i in range(30) for x in start_lines("h", f"s{i}", 1.8e9 + i * 100, "hit")]
    lines.insert(10, "y" * 3000)
    root = root_with(tmp_path, {"h": lines})
    monkeypatch.setattr(L, "MAX_LINE_BYTES", 2000)
    r = stats(root)
    assert r.totals.starts == 30 and len(r.problems) == 1 and "line 11" in r.problems[0]


# ---- counting -------------------------------------------------------------------------------

def test_starts_outcomes_and_seconds(tmp_path: Path) -> None:
    t = 1.8e9
    pod_a = (start_lines("pod-a", "s1", t, "miss", tp=2, compile_s=30.0)
             + start_lines("pod-a", "s2", t + 100, "hit", tp=2)
             + start_lines("pod-a", "s3", t + 200, "load-failure", compile_s=40.0))
    pod_b = (start_lines("pod-b", None, t + 300, "hit", pid0=500)
             + start_lines("pod-b", None, t + 400, "hit", pid0=600))
    r = stats(root_with(tmp_path, {"pod-a": pod_a, "pod-b": pod_b}), by="host")
    c = r.totals
    assert (c.starts, c.hits, c.misses, c.load_failures) == (5, 3, 1, 1)
    # s1: workers compiled 31+1 and 30+1 s side by side: the slowest counts; s3: 40+1.
    assert c.compile_seconds == pytest.approx(32.0 + 41.0)
    # Each hit credited with the AOT entry's compile time at its latest miss-or-rewrite (s3).
    assert c.saved_seconds == pytest.approx(3 * 41.0)
    assert c.load_seconds == pytest.approx(3.0 + 2.0 + 2.0)  # slowest worker of s2
    assert c.hit_ratio == pytest.approx(3 / 5)
    assert r.events == {"aot": {"hit": 4, "load-failure": 1, "miss": 2},
                        "backend": {"miss": 3}}
    assert {g.name: (g.counters.starts, g.counters.hits) for g in r.groups} == {
        "pod-a": (3, 1), "pod-b": (2, 2)}
    assert r.hosts == 2 and r.ledgers == 2 and r.basis == "ledger"
    e = stats(root_with(tmp_path, {"pod-a": pod_a, "pod-b": pod_b}, "r2"), by="entry")
    by_key = {g.name: g.counters for g in e.groups}
    assert (by_key[AOT].hits, by_key[AOT].misses, by_key[AOT].load_failures) == (3, 1, 1)
    assert by_key[BACKEND].misses == 2


def test_worker_processes_add_up_to_one_pass(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    import vllm_cache_tools.analyze.stats_read as S

    t = 1.8e9
    ledgers = {f"pod-{h}": [x for i in range(8) for x in start_lines(
        f"pod-{h}", f"s{h}-{i}", t + h * 10 + i * 100,
        ("hit", "miss", "load-failure", "hit")[(h + i) % 4], tp=1 + h % 2,
        compile_s=10.0 + h)] for h in range(5)}
    root = root_with(tmp_path, ledgers)
    for by in ("model", "host", "entry"):
        one = stats(root, by=by, jobs=1)
        monkeypatch.setattr(S, "PARALLEL_BYTES", 0)
        many = stats(root, by=by, jobs=3)
        monkeypatch.undo()
        assert one.totals == many.totals and one.events == many.events
        assert set(one.groups) == set(many.groups)
        assert one.never_hit == many.never_hit and one.hosts == many.hosts == 5


def test_since(tmp_path: Path) -> None:
    lines = [x for i in range(5) for x in start_lines("h", f"s{i}", 1.8e9 + i * 1000, "hit")]
    r = stats(root_with(tmp_path, {"h": lines}), since=1.8e9 + 2500)
    assert r.totals.starts == 2


def test_copies_of_a_hosts_ledger_are_merged_by_event(tmp_path: Path) -> None:
    """A folder of collected roots: pod-a's ledger was copied twice (yesterday's shorter copy
    and today's), pod-b's once: pod-a's events count once."""
    t = 1.8e9
    a = [x for i in range(6) for x in start_lines("pod-a", f"a{i}", t + i * 100, "hit")]
    b = start_lines("pod-b", "b0", t, "miss")
    collected = tmp_path / "collected"
    root_with(collected, {"pod-a": a[:4]}, "monday")
    root_with(collected, {"pod-a": a, "pod-b": b}, "tuesday")
    loose = collected / "loose"
    loose.mkdir()
    (loose / "pod-a-backup.jsonl").write_text("".join(x + "\n" for x in a[2:]))
    r = stats(collected)
    assert r.kind == "folder" and r.ledgers == 4
    assert r.totals.starts == 7 and r.duplicates == 4 + 4
    assert r.events == {"aot": {"hit": 6, "miss": 1}, "backend": {"miss": 1}}


def test_without_a_ledger_only_what_the_files_prove(tmp_path: Path) -> None:
    root = tmp_path / "root"
    shutil.copytree(SAMPLE, root)
    shutil.rmtree(root / "torch_compile_cache" / ".vllm-cache-tools" / "ledger")
    r = stats(root)
    assert r.basis == "files" and r.totals.starts is None and r.totals.hits is None
    assert r.totals.misses == 4 == r.entries and r.unknown
    res = run_cli("stats", "--root", str(root))
    assert res.returncode == 0 and "only what the cache" in res.stdout


def test_an_unreadable_ledger_is_not_called_missing(tmp_path: Path) -> None:
    """A ledger the user cannot read (or one without a readable event): the counts come from
    the files, and the report says the ledger is there (was: "no recorder ledger ... install
    vllm-cache-tools where vLLM runs", advice for another problem)."""
    root = tmp_path / "root"
    shutil.copytree(SAMPLE, root)
    next((root / "torch_compile_cache" / ".vllm-cache-tools" / "ledger").glob("*.jsonl")
         ).chmod(0)
    res = run_cli("stats", "--root", str(root), unprivileged=True)
    assert res.returncode == 0, res.stderr
    assert "Permission denied" in res.stderr and "no recorder ledger" not in res.stdout
    assert "1 ledger(s) without a readable event, so only what the cache files prove" in \
        res.stdout
    assert "the 1 recorder ledger(s) here hold no readable event" in res.stdout


def test_a_root_or_folder_the_user_cannot_look_into(tmp_path: Path) -> None:
    """stats and drift on a root the user cannot list: the root check's one line, exit 2
    (was: "internal error: PermissionError", exit 3); a folder of roots whose only subfolder
    cannot be listed says so in its one line."""
    root = tmp_path / "root"
    shutil.copytree(SAMPLE, root)
    root.chmod(0)
    try:
        for verb in ("stats", "drift"):
            res = run_cli(verb, "--root", str(root), unprivileged=True)
            assert res.returncode == 2, res.stderr
            assert res.stderr == f"vllm-cache: error: cache root {root} is not readable\n"
    finally:
        root.chmod(0o755)
    folder = tmp_path / "fleet"
    (folder / "a").mkdir(parents=True)
    shutil.copytree(SAMPLE, folder / "a" / "r")
    (folder / "a").chmod(0)
    try:
        res = run_cli("stats", "--root", str(folder), unprivileged=True)
    finally:
        (folder / "a").chmod(0o755)
    assert res.returncode == 2
    assert res.stderr.endswith(f"(cannot list {folder / 'a'}: Permission denied)\n")


def test_cli_json_shape(tmp_path: Path) -> None:
    res = run_cli("stats", "--root", str(SAMPLE), "--json")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["schema"] == "vllm-cache-tools/stats/1"
    assert set(doc) >= {"root", "totals", "groups"}
    assert set(doc["totals"]) >= {"starts", "hits", "misses", "load_failures",
                                  "compile_seconds", "saved_seconds"}
    assert doc["totals"]["starts"] == 3 and doc["totals"]["hits"] == 1
    g = doc["groups"][0]
    assert g["by"] == "model" and set(g) >= set(doc["totals"]) | {"name"}
    for by in ("host", "day", "entry"):
        res = run_cli("stats", str(SAMPLE), "--by", by, "--json")
        assert json.loads(res.stdout)["groups"][0]["by"] == by
    for args in (["--by", "week"], ["--since", "soon"], [str(tmp_path / "nope")]):
        res = run_cli("stats", "--root", str(SAMPLE), *args) if args[0].startswith("-") \
            else run_cli("stats", *args)
        assert res.returncode == 2 and res.stderr.count("\n") == 1, res.stderr


def test_since_with_no_event_in_that_time_counts_from_the_ledgers(tmp_path: Path) -> None:
    """The ledgers say no start happened in that time: zero starts, not "no recorder
    ledger"."""
    root = tmp_path / "root"
    shutil.copytree(SAMPLE, root)
    r = stats(root, since=4.0e9)
    assert r.basis == "ledger" and r.totals.starts == 0 and r.totals.hits == 0
    assert r.ledgers == 1 and not r.unknown and r.entries == 4
    res = run_cli("stats", str(root), "--since", "1m")
    assert res.returncode == 0, res.stderr
    assert "no recorder ledger" not in res.stdout and "no event, since" in res.stdout
    assert "hold no event in that time" in res.stderr


def test_since_older_than_1970_is_every_event(tmp_path: Path) -> None:
    res = run_cli("stats", str(SAMPLE), "--since", "99999999999d", "--json")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["totals"]["starts"] == 3


# ---- bounded memory (issue 23): spilled parts and folded groups ---------------------------

def _capped(monkeypatch: pytest.MonkeyPatch, starts: int, groups: int) -> None:
    import vllm_cache_tools.analyze.stats_read as S
    import vllm_cache_tools.analyze.stats_tally as T

    monkeypatch.setattr(S, "MAX_STARTS", starts)
    monkeypatch.setattr(S, "SPILL_PART_BYTES", 1)
    monkeypatch.setattr(T, "MAX_GROUPS", groups)


def test_over_the_caps_counts_stay_exact_and_say_so(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """One ledger file from many hosts (a collected folder's merged ledger), counted in parts
    on disk and with hosts folded into one row: the same totals, events and seconds as the
    count in memory, the hosts with the most starts kept by name, and one line per cap."""
    t = 1.8e9
    lines = [x for h in range(12) for i in range(1 + h % 4) for x in start_lines(
        f"pod-{h:02d}", f"s{h}-{i}", t + h * 1000 + i * 100,
        ("hit", "miss", "load-failure", "hit")[(h + i) % 4], tp=1 + h % 2,
        compile_s=10.0 + h)]
    root = root_with(tmp_path, {"fleet": lines})
    whole = {by: stats(root, by=by, jobs=1) for by in ("host", "model", "entry")}
    assert not any(r.caps for r in whole.values())
    _capped(monkeypatch, starts=3, groups=5)
    for by, one in whole.items():
        r = stats(root, by=by, jobs=1)
        assert r.totals == one.totals and r.events == one.events, by
        assert r.hosts == one.hosts == 12 and r.never_hit == one.never_hit
        assert any("more than 3 starts at once; counted in" in c and c.endswith("exactly")
                   for c in r.caps), r.caps
        if by == "host":
            named = [g for g in r.groups if not g.others]
            assert named == list(one.groups[:5])  # the 5 hosts with the most starts
            other = r.groups[-1]
            assert other.others == 7 and other.name == "7 other hosts"
            rest = one.groups[5:]
            assert other.counters.starts == sum(g.counters.starts or 0 for g in rest)
            assert other.counters.hits == sum(g.counters.hits or 0 for g in rest)
            assert r.caps[0] == ("--by host: 7 hosts more than the 5 shown one by one (those with "
                                  "the most starts), summed up in the last row, '7 other hosts'")
        else:
            assert r.groups == one.groups
    res = subprocess.run([sys.executable, "-c", (
        "import sys, vllm_cache_tools.analyze.stats_tally as T; T.MAX_GROUPS = 5\n"
        "from vllm_cache_tools.cli import main; sys.argv[1:] = sys.argv[2:]; main()"),
        "x", "stats", "--root", str(root), "--by", "host"], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert "  limit: --by host: 7 hosts more than the 5 shown" in res.stdout
    assert "7 other hosts" in res.stdout and not res.stderr


def test_net_saved_is_the_headline_and_a_costly_hit_is_a_regression(tmp_path: Path) -> None:
    """Issue 25: "saved 6.4m by hits" beside "loading 5.7m spent by hits" overstated the
    benefit. The net figure (compile time avoided minus loading) leads; a group whose hits
    cost more loading than their compile is a regression line."""
    t = 1.8e9
    slow = [x.replace('"seconds": 2.0', '"seconds": 50.0') for x in
            start_lines("pod-b", "s3", t + 200, "hit")]
    pod_a = (start_lines("pod-a", "s1", t, "miss", compile_s=30.0)
             + start_lines("pod-a", "s2", t + 100, "hit"))
    root = root_with(tmp_path, {"pod-a": pod_a, "pod-b": slow})
    r = stats(root, by="host")
    c = r.totals
    assert (c.saved_seconds, c.load_seconds) == (pytest.approx(62.0), pytest.approx(52.0))
    assert c.net_seconds == pytest.approx(10.0) and not c.regression
    by = {g.name: g.counters for g in r.groups}
    assert by["pod-a"].net_seconds == pytest.approx(29.0) and not by["pod-a"].regression
    assert by["pod-b"].net_seconds == pytest.approx(-19.0) and by["pod-b"].regression
    assert [g.name for g in r.regressions] == ["pod-b"]
    res = run_cli("stats", str(root), "--by", "host")
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    net = next(i for i, x in enumerate(lines) if x.strip().startswith("net saved"))
    assert lines[net + 1].strip().startswith("gross saved") and "1.0m" in lines[net + 1]
    assert lines[net + 2].strip().startswith("loading") and "52" in lines[net + 2]
    assert "regression: host pod-b: 1 hit(s) spent 50s loading, compiling took 31s" \
        in res.stdout, res.stdout
    assert [x.split()[-3] for x in lines if x.startswith("pod-")] == ["29s", "-19s"]
    d = json.loads(run_cli("stats", str(root), "--by", "host", "--json").stdout)
    assert d["totals"]["net_seconds"] == pytest.approx(10.0)
    assert [(g["name"], g["regression"]) for g in d["groups"]] == [
        ("pod-a", False), ("pod-b", True)]
