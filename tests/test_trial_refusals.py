"""A new user's trial (round 7): inputs that were taken, silently ignored or answered wrongly,
each run on a copy of ``examples/sample_cache`` through the real console script."""

from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path

import pytest

from tests.conftest import run_cli

SAMPLE = Path(__file__).resolve().parent.parent / "examples" / "sample_cache"


@pytest.fixture()
def root(tmp_path: Path) -> Path:
    dst = tmp_path / "root"
    shutil.copytree(SAMPLE, dst, symlinks=True)
    return dst


def _entries(root: Path) -> list[str]:
    cc = root / "torch_compile_cache"
    return sorted([p.name for p in cc.glob("??????????")]
                  + [p.name for p in (cc / "torch_aot_compile").iterdir()])


@pytest.mark.parametrize("verb", ["rm", "show"])
def test_a_key_prefix_shorter_than_four_digits_is_refused(root: Path, verb: str) -> None:
    before = _entries(root)
    for ref in ("0", "0b8", "B6A"):
        r = run_cli(verb, ref, "--root", str(root), *(["--yes"] if verb == "rm" else []))
        assert r.returncode == 2, r.stdout + r.stderr
        assert r.stderr.strip().splitlines() == [
            f"vllm-cache: error: key prefix {ref!r} is too short: give at least 4 hex digits"]
    assert _entries(root) == before
    # Four digits, in either case, still name the entry.
    r = run_cli("show", "0B85", "--root", str(root), "--json")
    assert r.returncode == 0 and '"0b8536d36d86' in r.stdout, r.stderr


def test_rm_refuses_an_ambiguous_prefix(root: Path) -> None:
    cc = root / "torch_compile_cache"
    src = cc / "39ecaca4bf"
    shutil.copytree(src, cc / "39ec000000", symlinks=True)
    before = _entries(root)
    r = run_cli("rm", "39ec", "--root", str(root), "--yes")
    assert r.returncode == 2 and "key prefix '39ec' is ambiguous" in r.stderr, r.stderr
    assert _entries(root) == before


def test_ls_all_caches_of_a_missing_root_is_the_error_ls_gives(tmp_path: Path) -> None:
    missing = str(tmp_path / "nope")
    plain = run_cli("ls", "--root", missing)
    for args in (["--all-caches"], ["--all-caches", "--json"]):
        r = run_cli("ls", *args, "--root", missing)
        assert r.returncode == plain.returncode == 2 and not r.stdout, r.stdout
        assert r.stderr == plain.stderr == (
            f"vllm-cache: error: cache root {missing} does not exist (from --root)\n")
    a_file = tmp_path / "f"
    a_file.write_text("")
    r = run_cli("ls", "--all-caches", "--root", str(a_file))
    assert r.returncode == 2 and r.stderr.endswith("is not a directory\n"), r.stderr


def test_explain_with_nothing_to_compare_is_a_usage_error(root: Path, tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    (empty / "torch_compile_cache").mkdir(parents=True)
    r = run_cli("explain", "--root", str(empty))
    assert r.returncode == 2 and not r.stdout, r.stdout
    assert r.stderr == (f"vllm-cache: error: nothing to compare: no entries in {empty} "
                        "(name two: explain A B)\n")
    cc = root / "torch_compile_cache"
    shutil.rmtree(cc / "39ecaca4bf")
    shutil.rmtree(next((cc / "torch_aot_compile").glob("b6a1*")))
    r = run_cli("explain", "--root", str(root), "--json")
    assert r.returncode == 2 and not r.stdout, r.stdout
    assert r.stderr == (f"vllm-cache: error: nothing to compare: 2 entries, no two of the same "
                        f"model and tree in {root} (name two: explain A B)\n")


@pytest.mark.parametrize(("args", "says"), [
    (["explain", "28fd", "39ec", "--python", "/usr/bin/python3"],
     "--python is the interpreter --against-current probes; it needs --against-current"),
    (["explain", "--python", "/usr/bin/python3"],
     "--python is the interpreter --against-current probes; it needs --against-current"),
    (["explain", "--logs", "--against-current", "28fd", "--", "m"],
     "--logs compares two logged starts, --against-current an entry with this environment: "
     "give one"),
    (["explain", "--logs", "a.log", "b.log", "--root", "."],
     "--root does not apply to --logs (the logs name their entries' folders)"),
    (["prune", "--older-than", "1d", "--python", "/usr/bin/python3", "--dry-run"],
     "--python is the environment --unhittable judges entries against; it needs "
     "--unhittable"),
])
def test_options_the_question_does_not_read_are_refused(root: Path, args: list[str],
                                                        says: str) -> None:
    before = _entries(root)
    if "--root" not in args:
        args = [*args[:-2], "--root", str(root), *args[-2:]] if "--" in args else [
            *args, "--root", str(root)]
    r = run_cli(*args)
    assert r.returncode == 2 and not r.stdout, r.stdout
    assert r.stderr == f"vllm-cache: error: {says}\n"
    assert _entries(root) == before


def test_durations_and_ages_that_are_not_measurements_print_as_a_dash() -> None:
    from vllm_cache_tools.errors import UsageError
    from vllm_cache_tools.units import fmt_duration, human_age, iso, parse_age

    assert [fmt_duration(s) for s in (math.inf, -math.inf, math.nan)] == ["-"] * 3
    assert fmt_duration(1.7e308) == fmt_duration(1e12 + 1) == ">11574074d"
    assert (fmt_duration(45), fmt_duration(9000), fmt_duration(12 * 86400)) == (
        "45s", "2.5h", "12d")
    assert [human_age(t, now=1e9) for t in (-math.inf, math.nan, -1e300)] == ["-"] * 3
    assert human_age(1e9 - 7200, now=1e9) == "2h ago"
    assert [iso(t) for t in (math.inf, math.nan, 1e300, -1e300)] == [None] * 4
    with pytest.raises(UsageError, match="age too large"):
        parse_age("9" * 400 + "d")
    assert parse_age("99999999999d") == 99999999999 * 86400  # stats --since: every event
    assert parse_age("30d") == 30 * 86400


def test_stats_of_a_ledger_with_absurd_seconds_prints_no_inf(root: Path) -> None:
    ledger = root / "torch_compile_cache" / ".vllm-cache-tools" / "ledger" / "vm.jsonl"
    lines = [json.loads(x) for x in ledger.read_text().splitlines()]
    for x in lines:
        if "seconds" in x:
            x["seconds"] = 1.7e308  # two of these summed are inf
    ledger.write_text("".join(json.dumps(x) + "\n" for x in lines))
    for args in ([], ["--json"]):
        r = run_cli("stats", "--root", str(root), *args)
        assert r.returncode == 0, r.stderr
        assert "inf" not in r.stdout.lower() and "1967592592" not in r.stdout, r.stdout
        assert "not a ledger event (Expected `float` <= 1000000000.0" in r.stderr
    json.loads(r.stdout)
    r = run_cli("prune", "--older-than", "9" * 400 + "d", "--root", str(root), "--dry-run")
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert r.stderr.startswith("vllm-cache: error: age too large: '999"), r.stderr
    r = run_cli("prune", "--older-than", "99999999999d", "--root", str(root), "--dry-run")
    assert r.returncode == 0 and "older-than >11574074d;" in r.stdout, r.stdout


def test_prune_that_could_not_delete_a_planned_entry_exits_1(root: Path) -> None:
    """A folder of a planned entry that is not ours to empty: the entry stays (never half
    removed), said as "not removed", and the run is a partial failure, exit 1 (was: "kept",
    exit 0, as if a protection had kept it)."""
    locked = root / "torch_compile_cache" / "39ecaca4bf" / "rank_0_0"
    locked.chmod(0o500)
    try:
        r = run_cli("prune", "--older-than", "0s", "--grace", "0", "--yes", "--root", str(root),
                    unprivileged=True)
        assert r.returncode == 1, r.stdout + r.stderr
        assert ("  not removed backend 39ecaca4bf: permission denied: cannot empty "
                "39ecaca4bf/rank_0_0\n") in r.stdout, r.stdout
        assert "deleted 3 entries" in r.stdout
        assert _entries(root) == ["39ecaca4bf"]
    finally:
        locked.chmod(0o700)
    shutil.copytree(SAMPLE / "torch_compile_cache" / "28fd362d4e",
                    root / "torch_compile_cache" / "28fd362d4e")
    locked.chmod(0o500)
    try:
        r = run_cli("prune", "--older-than", "0s", "--grace", "0", "--yes", "--root", str(root),
                    "--json", unprivileged=True)
        assert r.returncode == 1, r.stderr
        doc = json.loads(r.stdout)
        assert doc["deleted"] == ["28fd362d4e"]
        assert doc["failed"] == [{"key": "39ecaca4bf", "reason": "permission denied: cannot "
                                  "empty 39ecaca4bf/rank_0_0"}]
    finally:
        locked.chmod(0o700)
    # A protection is not a failure: an entry within --grace stays, exit 0 (its files made
    # new here: the copy's own times are the checkout's, minutes or days old).
    for p in (root / "torch_compile_cache" / "39ecaca4bf").rglob("*"):
        os.utime(p)
    r = run_cli("prune", "--older-than", "0s", "--grace", "1h", "--yes", "--root", str(root))
    assert r.returncode == 0 and _entries(root) == ["39ecaca4bf"], r.stdout + r.stderr


def test_stats_of_a_folder_of_roots_names_the_root_of_a_damaged_line(tmp_path: Path) -> None:
    pods = tmp_path / "pods"
    for pod in ("pod-a", "pod-b"):
        shutil.copytree(SAMPLE, pods / pod, symlinks=True)
    ledger = pods / "pod-b" / "torch_compile_cache" / ".vllm-cache-tools" / "ledger" / "vm.jsonl"
    lines = ledger.read_text().splitlines(keepends=True)
    ledger.write_text("{broken\n" + "".join(lines[1:]))
    r = run_cli("stats", str(pods))
    assert r.returncode == 0, r.stderr
    assert r.stderr.startswith(
        f"vllm-cache: warning: ledger vm.jsonl of root {pods / 'pod-b'} line 1: not a ledger "
        "event"), r.stderr
    # One root: its ledgers by name, as before.
    r = run_cli("stats", str(pods / "pod-b"))
    assert r.stderr.startswith("vllm-cache: warning: ledger vm.jsonl line 1: not a ledger"), \
        r.stderr


def test_warm_log_dash_is_refused_before_vllm_starts(tmp_path: Path) -> None:
    root = tmp_path / "root"
    r = run_cli("warm", "--log", "-", "--root", str(root), "--", "some-model")
    assert r.returncode == 2 and not r.stdout, r.stdout
    assert r.stderr == ("vllm-cache: error: --log -: vLLM's output goes to stderr without "
                        "--log; give --log a file to keep it\n")
    assert not (tmp_path / "-").exists() and not Path("-").exists() and not root.exists()
    r = run_cli("warm", "--log", str(tmp_path), "--root", str(root), "--python", "/nonexistent",
                "--", "some-model")
    assert r.returncode == 2 and r.stderr == (
        f"vllm-cache: error: --log {tmp_path}: cannot write it: exists (not replaced; "
        "--force replaces it)\n"), r.stderr


def test_warm_where_vllm_is_not_installed_says_so_in_one_line(tmp_path: Path) -> None:
    """The test interpreter has no vLLM: vLLM's child says so without a traceback, warm names
    the interpreter, exit 2."""
    r = run_cli("warm", "--root", str(tmp_path / "root"), "--", "some-model")
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr, r.stderr
    assert r.stderr.endswith(" (--python)\n") and "vLLM is not installed for " in r.stderr


def _without_manifests(root: Path) -> None:
    for m in root.rglob("vct-manifest.*.json"):
        m.unlink()


def test_explain_of_two_aot_entries_compares_their_backend_siblings(root: Path) -> None:
    """The AOT tree stores no env or config: the backend entries of the same starts (the
    recorder's ledger pairs them) do, and are compared (was: "would settle it: the backend
    entries of both starts", with both in the same root)."""
    _without_manifests(root)
    r = run_cli("explain", "0b85", "b6a1", "--root", str(root))
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.splitlines()[0] == ("recompiled because env VLLM_ALLOW_LONG_MAX_MODEL_LEN "
                                        "changed False -> True")
    assert ("  env       VLLM_ALLOW_LONG_MAX_MODEL_LEN: False -> True  "
            "[cache_key_factors.json]") in r.stdout
    assert ("  note: env and config from the backend entries of the same starts, 28fd362d4e "
            "-> 39ecaca4bf (recorder ledger)") in r.stdout
    # Without the ledger the traced sources link both backend entries to both AOT entries:
    # which is whose is not recorded, so they are named, with the command that compares them.
    shutil.rmtree(root / "torch_compile_cache" / ".vllm-cache-tools" / "ledger")
    r = run_cli("explain", "0b85", "b6a1", "--root", str(root))
    assert r.returncode == 1, r.stdout + r.stderr
    assert ("(would settle it: the backend entries of both starts (here, by the traced "
            "sources they share: 28fd362d4e, 39ecaca4bf, which start each is from is not "
            f"recorded; compare them: vllm-cache explain 28fd362d4e 39ecaca4bf --root {root}), "
            "their logs, or the recorder's manifests)") in r.stdout, r.stdout


def test_same_start_backends_pairs_by_start_or_process() -> None:
    from vllm_cache_tools.analyze.explain import same_start_backends
    from vllm_cache_tools.read.ledger_stream import LedgerEvent

    def ev(tree: str, key: str, **kw: object) -> LedgerEvent:
        return LedgerEvent(time=1.8e9, event="miss", tree=tree, key=key, host="h", **kw)

    events = [ev("aot", "A", pid=1), ev("backend", "b1", pid=1), ev("backend", "b2", pid=2),
              ev("aot", "A", start="s", pid=7), ev("backend", "b3", start="s", pid=8),
              ev("aot", "A"), ev("backend", "b4")]  # no start id, no pid: no evidence
    assert same_start_backends(events, "A") == {"b1", "b3"}
    assert same_start_backends(events, "Z") == set()
