"""``vllm-cache dedup``: identical files of a real TP=2 root become hard links; verify passes
and a real vLLM start loads the deduplicated root on both ranks without compiling; ``--undo``
splits them again. Bad input: symlinks, a file changed between digest and link, read-only
folders, other users' files, another filesystem, files in use, the grace period."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.realvllm.harness import SCENARIOS, ScenarioRun, copy_root, run_start, venv_python
from vllm_cache_tools.maintain.dedup import execute_dedup, plan_dedup
from vllm_cache_tools.maintain.dedup_kinds import file_kind
from vllm_cache_tools.maintain.dedup_undo import execute_split, plan_split

CC = "torch_compile_cache"


def _linked(root: Path) -> dict[tuple[int, int], list[str]]:
    out: dict[tuple[int, int], list[str]] = {}
    for p in root.rglob("*"):
        s = p.lstat()
        if p.is_file() and not p.is_symlink() and s.st_nlink > 1:
            out.setdefault((s.st_dev, s.st_ino), []).append(str(p.relative_to(root)))
    return out


def _dedup(root: Path, *args: str, unprivileged: bool = False) -> dict:
    res = run_cli("dedup", "--root", str(root), "--json", *args, unprivileged=unprivileged)
    assert res.returncode in (0, 1), res.stderr
    return json.loads(res.stdout)


@pytest.fixture
def tp2_copy(real_tp2: ScenarioRun, tmp_path: Path) -> Path:
    """A copy of the real TP=2 root, every file's and folder's times moved back one hour (their
    order kept): on a fresh machine the scenario is minutes old, inside dedup's default grace."""
    root = copy_root(real_tp2.vllm_root, tmp_path / "root")
    for p in [*sorted(root.rglob("*"), key=lambda q: len(q.parts), reverse=True), root]:
        st = p.lstat()
        os.utime(p, ns=(st.st_atime_ns - HOUR_NS, st.st_mtime_ns - HOUR_NS),
                 follow_symlinks=False)
    return root


HOUR_NS = 3600 * 10**9


@pytest.fixture
def mixed_copy(tp2_copy: Path, real_compile: ScenarioRun) -> Path:
    """The TP=2 copy with the one-rank compile scenario's entries beside it (times moved back
    the same hour). Those two starts' AOT entries hold the same Inductor files on any CPU; the
    TP=2 ranks' do only where vLLM's CPU build has its shared-memory all-reduce: on an AVX2-only
    CPU (its ``_C_AVX2`` lacks ``init_shm_manager``) the ranks all-reduce through
    torch.distributed, trace one graph and share one AOT entry, so only their backend key files
    are duplicates there."""
    src = real_compile.vllm_root / CC
    moved = []
    for p in src.iterdir():
        if p.name == "torch_aot_compile":
            for e in p.iterdir():
                moved.append(copy_root(e, tp2_copy / CC / p.name / e.name))
        elif not p.name.startswith("."):
            moved.append(copy_root(p, tp2_copy / CC / p.name))
    for top in moved:
        for q in [*sorted(top.rglob("*"), key=lambda q: len(q.parts), reverse=True), top]:
            st = q.lstat()
            os.utime(q, ns=(st.st_atime_ns - HOUR_NS, st.st_mtime_ns - HOUR_NS),
                     follow_symlinks=False)
    return tp2_copy


def _rank_factors(root: Path) -> tuple[Path, Path]:
    key = next(p for p in (root / CC).iterdir() if len(p.name) == 10 and (p / "rank_1_0").is_dir())
    return (key / "rank_0_0" / "backbone" / "cache_key_factors.json",
            key / "rank_1_0" / "backbone" / "cache_key_factors.json")


# --------------------------------------------------------------------------------------------
# The proof: a real start loads the deduplicated TP=2 root


@pytest.mark.realvllm
def test_dedup_tp2_then_real_start_loads_both_ranks(tp2_copy: Path, tmp_path: Path) -> None:
    before = {str(p.relative_to(tp2_copy)): p.read_bytes()
              for p in tp2_copy.rglob("*") if p.is_file()}
    plan = _dedup(tp2_copy)
    assert plan["dry_run"] and plan["plan"]["files_to_link"] > 0 and not _linked(tp2_copy)
    done = _dedup(tp2_copy, "--yes")
    assert done["linked"] and done["saved_bytes"] == plan["plan"]["saved_bytes"] > 0
    linked = _linked(tp2_copy)
    assert sum(len(v) - 1 for v in linked.values()) == len(done["linked"])
    # Across ranks: rank 0's and rank 1's factors are one inode now.
    r0, r1 = _rank_factors(tp2_copy)
    assert r0.stat().st_ino == r1.stat().st_ino
    print(f"TP=2 root: linked {len(done['linked'])} files, saved {done['saved_bytes']} B")
    assert {str(p.relative_to(tp2_copy)): p.read_bytes() for p in tp2_copy.rglob("*")
            if p.is_file() and ".vllm-cache-trash" not in p.parts} == before
    ver = run_cli("verify", "--root", str(tp2_copy), "--json")
    assert ver.returncode == 0, ver.stdout
    assert all(p.get("note") for p in json.loads(ver.stdout)["problems"])

    start = SCENARIOS["compile-tp2"].starts[0]
    (tmp_path / "log").mkdir()
    rec = run_start(venv_python(), tp2_copy, start, tmp_path / "log" / "start-0.log")
    log = rec.log.read_text(errors="replace")
    assert rec.returncode == 0, log[-3000:]
    for rank in ("Worker_TP0", "Worker_TP1"):
        assert any(rank in line and "Directly load AOT compilation" in line
                   for line in log.splitlines()), rank
    assert "saved AOT compiled function" not in log and "Compiling model again" not in log
    assert "Start compiling function" not in log
    print(f"real start on the deduplicated root: {rec.seconds:.0f} s")
    for line in log.splitlines():
        if "Directly load" in line or "Start compiling" in line:
            print(line[:200])
    # vLLM wrote nothing through the shared inodes.
    assert {k: v for k, v in _linked(tp2_copy).items()} == linked
    for rel, data in before.items():
        p = tp2_copy / rel
        if p.exists() and any(rel in names for names in linked.values()):
            assert p.read_bytes() == data

    undo = _dedup(tp2_copy, "--undo", "--yes")
    assert len(undo["split"]) == len(done["linked"])
    assert not _linked(tp2_copy)
    assert run_cli("verify", "--root", str(tp2_copy)).returncode == 0


# --------------------------------------------------------------------------------------------
# Which files, and bad input


def test_file_kinds() -> None:
    aot = (CC, "torch_aot_compile", "k" * 64)
    assert file_kind((*aot, "rank_1_0", "model"))[0] == "aot-model"
    assert file_kind((*aot, "inductor_cache", "ab", "cab.py"))[0] == "inductor"
    assert file_kind((CC, "d20ce2cf60", "rank_0_0", "backbone", "computation_graph.py"))[0] \
        == "backend-meta"
    for never in ((CC, "d20ce2cf60", "rank_0_0", "backbone", "vllm_compile_cache.py"),
                  (*aot, "inductor_cache", "locks", "cab.lock"),
                  (*aot, "rank_0_0", "model.123.tmp"),
                  (*aot, "inductor_cache", "ab", ".123.456.tmp"),
                  (CC, ".vllm-cache-tools", "ledger", "host.jsonl"),
                  (CC, "d20ce2cf60", "rank_0_0", "backbone", "something_new.bin")):
        assert file_kind(never)[0] is None, never


def test_so_linked_only_to_its_rank_peer(tmp_path: Path) -> None:
    """Two names of one inode loaded by one process are one library to dlopen: a .so is
    linked only to the same path in a sibling rank of the same entry."""
    key = tmp_path / CC / "0123456789"
    for rank in ("rank_0_0", "rank_1_0"):
        d = key / rank / "inductor_cache" / "ab"
        d.mkdir(parents=True)
        (d / "ca.so").write_bytes(b"\x7fELF same")
        (d / "cb.so").write_bytes(b"\x7fELF same")
    plan = plan_dedup(tmp_path, grace_s=0)
    pairs = sorted((g.keep.rel.split("/")[-1], tuple(f.rel.split("/")[-1] for f in g.link))
                   for g in plan.groups)
    assert pairs == [("ca.so", ("ca.so",)), ("cb.so", ("cb.so",))]


def test_symlinks_never_followed_or_linked(tp2_copy: Path, tmp_path: Path) -> None:
    r0, r1 = _rank_factors(tp2_copy)
    outside = tmp_path / "outside.json"
    outside.write_bytes(r0.read_bytes())
    r1.unlink()
    r1.symlink_to(outside)
    # A symlinked rank folder pointing outside the root is not entered either.
    aot = next((tp2_copy / CC / "torch_aot_compile").iterdir())
    shutil.copytree(aot / "inductor_cache", tmp_path / "elsewhere")
    (aot / "rank_9_0").symlink_to(tmp_path / "elsewhere")
    out = _dedup(tp2_copy, "--grace", "0", "--yes")
    assert not any("rank_1_0/backbone/cache_key_factors" in p for p in out["linked"])
    assert not any("rank_9_0" in p for p in out["linked"])
    assert r1.is_symlink() and outside.stat().st_nlink == 1
    assert all(p.stat().st_nlink == 1 for p in (tmp_path / "elsewhere").rglob("*")
               if p.is_file())


def test_file_changed_between_digest_and_link(mixed_copy: Path) -> None:
    plan = plan_dedup(mixed_copy, grace_s=0)
    g = next(g for g in plan.groups if g.kind == "backend-meta")
    g2 = next(g for g in plan.groups if g.kind == "inductor")
    victim = mixed_copy / g.link[0].rel
    st = victim.stat()
    # Same size and mtime, other bytes: only the content check can tell.
    data = bytearray(victim.read_bytes())
    data[-2] ^= 1
    with open(victim, "r+b") as f:
        f.write(data)
    os.utime(victim, ns=(st.st_atime_ns, st.st_mtime_ns))
    # Rewritten in place with the same bytes (a new mtime): changed since the plan.
    other = mixed_copy / g2.link[0].rel
    other.write_bytes(other.read_bytes())
    res = execute_dedup(plan)
    assert g.link[0].rel not in res.linked and g2.link[0].rel not in res.linked
    reasons = {s.rel: s.reason for s in res.skipped}
    assert "content changed" in reasons[g.link[0].rel]
    assert "changed since" in reasons[g2.link[0].rel]
    assert victim.read_bytes() == bytes(data) and victim.stat().st_nlink == 1
    assert other.stat().st_nlink == 1


def test_read_only_folder_and_other_users(mixed_copy: Path) -> None:
    # Other users' files are never linked (nor are files of differing owners grouped).
    cpp = next(g for g in plan_dedup(mixed_copy, grace_s=0).groups if g.kind == "inductor")
    os.chown(mixed_copy / cpp.link[0].rel, 12345, 12345)
    plan = plan_dedup(mixed_copy, grace_s=0)
    assert cpp.link[0].rel not in {f.rel for g in plan.groups for f in g.link}
    assert any(s.rel == cpp.link[0].rel and "uid 12345" in s.reason for s in plan.skipped)
    # A folder we may not write in: nothing linked there, no temporary name left.
    _, r1 = _rank_factors(mixed_copy)
    r1.parent.chmod(0o555)
    try:
        out = _dedup(mixed_copy, "--grace", "0", "--yes", unprivileged=True)
    finally:
        r1.parent.chmod(0o755)
    assert any(s["path"].endswith("rank_1_0/backbone/cache_key_factors.json")
               and "Permission denied" in s["reason"] for s in out["skipped"]), out["skipped"]
    assert r1.stat().st_nlink == 1
    assert not list(r1.parent.glob(".*.tmp"))
    assert (mixed_copy / cpp.link[0].rel).stat().st_nlink == 1
    # A read-only torch_compile_cache: no lock file can be made; one line, nothing changed.
    before = _linked(mixed_copy)
    (mixed_copy / CC / ".vllm-cache-trash" / "locks" / "entries.lock").unlink()
    (mixed_copy / CC / ".vllm-cache-trash" / "locks").rmdir()
    (mixed_copy / CC / ".vllm-cache-trash").rmdir()
    (mixed_copy / CC).chmod(0o555)
    try:
        res = run_cli("dedup", "--root", str(mixed_copy), "--grace", "0", "--yes",
                      unprivileged=True)
    finally:
        (mixed_copy / CC).chmod(0o755)
    assert res.returncode == 1 and "cannot take the entry locks" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr and _linked(mixed_copy) == before


def test_grace_and_in_use(mixed_copy: Path) -> None:
    _, r1 = _rank_factors(mixed_copy)
    os.utime(r1)  # just written
    plan = plan_dedup(mixed_copy)  # default grace: 10 minutes
    assert any(s.rel.endswith("rank_1_0/backbone/cache_key_factors.json")
               and "grace" in s.reason for s in plan.skipped)
    early = plan_dedup(mixed_copy, grace_s=0)  # made before the entry came into use
    shared = [g for g in early.groups if "torch_aot_compile" in g.keep.rel]
    assert shared
    aot = mixed_copy / CC / "torch_aot_compile" / shared[0].keep.rel.split("/")[2]

    def of_entry(rel: str) -> bool:
        return f"torch_aot_compile/{aot.name}/" in rel

    holder = subprocess.Popen([sys.executable, "-c", "import sys,time; f=open(sys.argv[1],'rb');"
                               "print('open', flush=True); time.sleep(60)",
                               str(aot / "rank_0_0" / "model")], stdout=subprocess.PIPE)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == b"open"
        plan = plan_dedup(mixed_copy, grace_s=0)
        assert not [g for g in plan.groups
                    if of_entry(g.keep.rel) or any(of_entry(f.rel) for f in g.link)]
        assert any("in use" in s.reason and f"pid {holder.pid}" in s.reason
                   for s in plan.skipped)
        # Executing re-checks /proc: the old plan links nothing of the entry in use.
        res = execute_dedup(early)
        assert not [r for r in res.linked if of_entry(r)]
        assert any(of_entry(s.rel) and "in use" in s.reason for s in res.skipped)
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None,
                    reason="a private mount namespace needs root and unshare")
def test_other_filesystem_never_linked(mixed_copy: Path, tmp_path: Path) -> None:
    """rank_1_0 on a tmpfs mounted inside the root (in a private mount namespace): its files
    are on another device, never walked into from rank_0_0's filesystem, never linked."""
    _, r1 = _rank_factors(mixed_copy)
    rank1 = r1.parent.parent
    saved = tmp_path / "rank_1_0.saved"
    shutil.copytree(rank1, saved)
    exe = Path(sys.executable).parent / "vllm-cache"
    script = (f'mount -t tmpfs none "{rank1}" && cp -a "{saved}/." "{rank1}/" && '
              f'"{exe}" dedup --root "{mixed_copy}" --grace 0 --yes --json')
    res = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert not any("/rank_1_0/" in p for p in out["linked"])
    assert out["linked"]  # the rest of the root still deduplicated


def test_undo_plan_and_split_keep_one_inode(tp2_copy: Path) -> None:
    res = execute_dedup(plan_dedup(tp2_copy, grace_s=0))
    assert res.linked
    sp = plan_split(tp2_copy, grace_s=0)
    assert len(sp.files) == len(res.linked) and sp.added_bytes == res.saved_bytes
    modes = {f.rel: (tp2_copy / f.rel).stat() for f in sp.files}
    out = execute_split(sp)
    assert sorted(out.split) == sorted(f.rel for f in sp.files) and not out.skipped
    assert not _linked(tp2_copy)
    for rel, s in modes.items():
        n = (tp2_copy / rel).stat()
        assert (n.st_mode, n.st_mtime_ns, n.st_size) == (s.st_mode, s.st_mtime_ns, s.st_size)


def test_link_primitive_refuses_another_filesystem(tmp_path: Path) -> None:
    from vllm_cache_tools.safeio import ident, link_over_at

    shm = Path("/dev/shm")
    if not shm.is_dir() or shm.stat().st_dev == tmp_path.stat().st_dev:
        pytest.skip("no second filesystem here")
    other = Path(tempfile.mkdtemp(dir=shm))
    try:
        (tmp_path / "a").write_bytes(b"same")
        (other / "b").write_bytes(b"same")
        sfd, dfd = os.open(tmp_path, os.O_RDONLY), os.open(other, os.O_RDONLY)
        try:
            with pytest.raises(OSError) as exc:
                link_over_at(sfd, "a", dfd, "b", expect_src=ident((tmp_path / "a").lstat()),
                             expect_dst=ident((other / "b").lstat()))
            assert exc.value.errno == 18  # EXDEV
        finally:
            os.close(sfd)
            os.close(dfd)
        assert (other / "b").stat().st_nlink == 1 and sorted(os.listdir(other)) == ["b"]
    finally:
        shutil.rmtree(other)


def test_bytes_saved_counts_inodes_freed(tmp_path: Path) -> None:
    """Two names of one copy linked to the kept file free that copy once; a copy with a name
    outside the plan frees nothing."""
    d = tmp_path / CC / "0123456789" / "rank_0_0" / "inductor_cache" / "ab"
    d.mkdir(parents=True)
    for n in ("a.py", "b.py", "d.py"):
        (d / n).write_bytes(b"x" * 1000)
    os.link(d / "b.py", d / "c.py")  # b and c: one inode, both names in the root
    os.link(d / "d.py", tmp_path / "outside.py")  # d: a name outside the root too
    plan = plan_dedup(tmp_path, grace_s=0)
    assert len(plan.groups) == 1 and plan.saved_bytes == 1000
    res = execute_dedup(plan)
    assert sorted(res.linked) == sorted(f.rel for f in plan.groups[0].link)
    assert res.saved_bytes == 1000
    assert len({(d / n).stat().st_ino for n in ("a.py", "b.py", "c.py", "d.py")}) == 1


def test_a_missing_root_or_a_file_is_named_as_such_by_every_deleting_verb(
        tmp_path: Path) -> None:
    """prune, rm, dedup and verify --fix on a root that does not exist or is a file: the
    scanning verbs' one line, exit 2, with or without --force. Was: "does not look like a vLLM
    cache root (...; pass --force to prune it anyway)", advice that cannot help, and with
    --force dedup said "is not a folder", exit 1 (refused) instead of 2."""
    afile = tmp_path / "afile"
    afile.write_text("not a root")
    for root, says in ((tmp_path / "missing", "does not exist (from --root)"),
                       (afile, "is not a directory")):
        for verb in (["prune", "--max-files", "1"], ["rm", "abcdef0123"], ["dedup"],
                     ["verify", "--fix"]):
            for force in ([], ["--force"]):
                r = run_cli(*verb, "--root", str(root), *force)
                assert r.returncode == 2, (verb, force, r.stderr)
                assert r.stderr == f"vllm-cache: error: cache root {root} {says}\n", r.stderr
    assert afile.read_text() == "not a root"


def test_rm_refusing_a_root_names_rm(tmp_path: Path) -> None:
    """rm on a folder that is not a cache root says rm (was: "pass --force to prune it
    anyway", the wrong verb)."""
    r = run_cli("rm", "abcdef0123", "--root", str(tmp_path))
    assert r.returncode == 2 and r.stderr.endswith("pass --force to rm it anyway)\n"), r.stderr


def test_verify_fix_without_a_terminal_names_its_own_way_to_only_look(tmp_path: Path) -> None:
    """verify --fix with something to remove and no terminal: exit 2, nothing removed, and
    the advice is verify's own (was: "or --dry-run to only see the plan", an option verify
    does not have)."""
    root = tmp_path / "root"
    shutil.copytree(Path(__file__).resolve().parent.parent / "examples" / "sample_cache", root,
                    symlinks=True)
    model = next(root.glob(f"{CC}/torch_aot_compile/0b8536d36d86*/rank_0_0/model"))
    os.truncate(model, 1000)
    # Out of --grace whatever the checkout's age (a fresh clone's files are minutes old).
    old = time.time() - 7200
    for p in [root, *root.rglob("*")]:
        os.utime(p, (old, old), follow_symlinks=False)
    exe = Path(sys.executable).parent / "vllm-cache"
    r = subprocess.run([str(exe), "verify", "--root", str(root), "--fix"], text=True,
                       capture_output=True, stdin=subprocess.DEVNULL, timeout=300)
    assert r.returncode == 2 and model.stat().st_size == 1000
    assert r.stderr.endswith("pass --yes, or leave out --fix to only see the problems\n"), \
        r.stderr
