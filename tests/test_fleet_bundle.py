"""pack / unpack on real caches (tests/realvllm harness roots): determinism, atomic and
idempotent placing, and every bad bundle refused with one line and nothing placed."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest
import zstandard

from tests.conftest import run_cli
from tests.fleet_support import tree_digests
from tests.realvllm.harness import ScenarioRun
from vllm_cache_tools.fleet import api
from vllm_cache_tools.fleet.bundle import read_manifest
from vllm_cache_tools.fleet.errors import BundleError, FleetError
from vllm_cache_tools.fleet.records import MANIFEST_NAME

BACKEND_KEY_LEN = 10


def _backend_key(run: ScenarioRun) -> str:
    return sorted(p.name for p in run.compile_cache.iterdir() if len(p.name) == BACKEND_KEY_LEN)[0]


def _entries(root: Path) -> set[str]:
    cc = root / "torch_compile_cache"
    out = {p.name for p in cc.iterdir() if len(p.name) == BACKEND_KEY_LEN} if cc.is_dir() else set()
    aot = cc / "torch_aot_compile"
    return out | ({p.name for p in aot.iterdir()} if aot.is_dir() else set())


@pytest.fixture(scope="module")
def bundle(real_compile: ScenarioRun, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("bundle") / "start.tar.zst"
    api.pack([_backend_key(real_compile)], out, root=real_compile.vllm_root)
    return out


def test_pack_is_deterministic_and_carries_linked_entries(real_compile: ScenarioRun,
                                                          bundle: Path, tmp_path: Path) -> None:
    again = api.pack([_backend_key(real_compile)], tmp_path / "again.tar.zst",
                     root=real_compile.vllm_root, sync=True)  # fsynced: the same bytes
    assert again.path.read_bytes() == bundle.read_bytes()
    m = read_manifest(bundle)
    layouts = {e.layout for e in m.entries}
    assert layouts == {"backend", "aot"}  # the AOT entry comes along by proof
    backend = next(e for e in m.entries if e.layout == "backend")
    assert backend.linked and all(k in {e.key for e in m.entries} for k in backend.linked)
    aot = next(e for e in m.entries if e.layout == "aot")
    assert aot.versions["torch"] == "2.13.0+cpu" and aot.forward is not None
    assert aot.sources and all(s.sha256 for s in aot.sources)
    assert any(f.path == "rank_0_0/model" for f in aot.files)
    # Members: the manifest first, then sorted regular files with fixed metadata.
    with open(bundle, "rb") as f, zstandard.ZstdDecompressor().stream_reader(f) as z, \
            tarfile.open(fileobj=z, mode="r|") as tar:
        members = list(tar)
    assert members[0].name == MANIFEST_NAME
    assert all(m.isreg() and m.mtime == 0 and m.uid == 0 and m.uname == "" for m in members)
    names = [m.name for m in members[1:]]
    assert len(set(names)) == len(names)
    for e in m.entries:  # each entry's files together, sorted
        mine = [n for n in names if n.startswith(e.path + "/")]
        assert mine == sorted(mine) and len(mine) == len(e.files)


def test_unpack_into_empty_root_then_again_is_a_noop(real_compile: ScenarioRun, bundle: Path,
                                                     tmp_path: Path) -> None:
    root = tmp_path / "root"
    # No vLLM arguments: the mega AOT entry's key is only linked by its sources (its Inductor
    # factors are recorded nowhere), refused by default (test_key_spoofing); --force places it.
    r = api.unpack(bundle, root=root, force=True)
    assert r.ok and {p.action for p in r.placements} == {"placed"}
    m = read_manifest(bundle)
    for e in m.entries:
        src = tree_digests(real_compile.vllm_root / e.path)
        assert tree_digests(root / e.path) == src
    staging = root / "torch_compile_cache" / ".vllm-cache-tools" / "staging"
    assert list(staging.iterdir()) == []
    again = api.unpack(bundle, root=root, force=True)
    assert again.ok and {p.action for p in again.placements} == {"identical"}
    # ls reads the placed entries like any others.
    res = run_cli("ls", "--root", str(root), "--json")
    assert res.returncode == 0, res.stderr
    assert {e["key"] for e in json.loads(res.stdout)["entries"]} == {e.key for e in m.entries}


def test_unpack_never_overwrites_another_entry(bundle: Path, tmp_path: Path) -> None:
    root = tmp_path / "root"
    api.unpack(bundle, root=root, force=True)  # its AOT key is linked (see above)
    m = read_manifest(bundle)
    aot = next(e for e in m.entries if e.layout == "aot")
    victim = root / aot.path / "rank_0_0" / "model"
    victim.write_bytes(b"someone else's artifact")
    res = run_cli("unpack", str(bundle), "--root", str(root), "--force")  # not even forced
    assert res.returncode == 1, res.stderr
    assert "refused" in res.stdout and "never overwritten" in res.stdout
    assert victim.read_bytes() == b"someone else's artifact"


def test_tp2_round_trip_keeps_both_ranks(real_tp2: ScenarioRun, tmp_path: Path) -> None:
    key = _backend_key(real_tp2)
    res = run_cli("pack", "--root", str(real_tp2.vllm_root), key, "-o", str(tmp_path / "b.tzst"))
    assert res.returncode == 0, res.stderr
    root = tmp_path / "root"
    res = run_cli("unpack", str(tmp_path / "b.tzst"), "--root", str(root), "--json")
    assert res.returncode == 1, res.stderr  # no vLLM arguments: the AOT key is only linked
    aot = next(p for p in json.loads(res.stdout)["placements"] if p["layout"] == "aot")
    assert (aot["action"], aot["key_proof"]) == ("refused", "linked"), aot
    res = run_cli("unpack", str(tmp_path / "b.tzst"), "--root", str(root), "--json",
                  "--force")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["schema"] == "vllm-cache-tools/unpack/2"
    for e in doc["entries"]:
        assert {"rank_0_0", "rank_1_0"} <= set(e["ranks"]) or e["layout"] == "aot"
        assert tree_digests(root / e["path"]) == tree_digests(real_tp2.vllm_root / e["path"])
    aot = next(e for e in doc["entries"] if e["layout"] == "aot")
    assert {"rank_0_0", "rank_1_0"} <= {p.name for p in (root / aot["path"]).iterdir()}


# ---- bad bundles: one line, exit 2, nothing placed ----------------------------------------

def _rewrite(src: Path, dst: Path, edit) -> None:  # type: ignore[no-untyped-def]
    """Re-pack ``src`` with ``edit(members)`` applied to its (TarInfo, bytes) list."""
    with open(src, "rb") as f, zstandard.ZstdDecompressor().stream_reader(f) as z, \
            tarfile.open(fileobj=z, mode="r|") as tar:
        items = []
        for m in tar:
            data = tar.extractfile(m).read() if m.isreg() else b""  # type: ignore[union-attr]
            items.append((m, data))
    items = edit(items)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as out:
        for m, data in items:
            out.addfile(m, io.BytesIO(data) if m.isreg() else None)
    dst.write_bytes(zstandard.ZstdCompressor().compress(buf.getvalue()))


def _manifest_edit(fn):  # type: ignore[no-untyped-def]
    def edit(items):  # type: ignore[no-untyped-def]
        m, data = items[0]
        doc = json.loads(data)
        fn(doc)
        new = json.dumps(doc).encode()
        m.size = len(new)
        return [(m, new), *items[1:]]
    return edit


def _extra_member(info: tarfile.TarInfo, data: bytes = b""):  # type: ignore[no-untyped-def]
    def edit(items):  # type: ignore[no-untyped-def]
        return [items[0], (info, data), *items[1:]]
    return edit


def _tampered(items):  # type: ignore[no-untyped-def]
    m, data = items[-1]
    return [*items[:-1], (m, bytes([data[0] ^ 1]) + data[1:])]


def _symlink(name: str, target: str) -> tarfile.TarInfo:
    t = tarfile.TarInfo(name)
    t.type, t.linkname = tarfile.SYMTYPE, target
    return t


def _hardlink(name: str, target: str) -> tarfile.TarInfo:
    t = tarfile.TarInfo(name)
    t.type, t.linkname = tarfile.LNKTYPE, target
    return t


def _device(name: str) -> tarfile.TarInfo:
    t = tarfile.TarInfo(name)
    t.type, t.devmajor, t.devminor = tarfile.CHRTYPE, 1, 3
    return t


def _file(name: str, data: bytes) -> tarfile.TarInfo:
    t = tarfile.TarInfo(name)
    t.size = len(data)
    return t


EVIL = {
    "dotdot-in-manifest": (_manifest_edit(lambda d: d["entries"][0]["files"][0].update(
        path="../../../../outside")), "not a plain relative path"),
    "absolute-entry-path": (_manifest_edit(lambda d: d["entries"][0].update(
        path="/tmp/elsewhere")), "not where vLLM keeps its entries"),
    "wrong-format-version": (_manifest_edit(lambda d: d.update(format_version=99)),
                             "format version 99 is not supported"),
    "member-dotdot": (_extra_member(_file("torch_compile_cache/../../outside", b"x"), b"x"),
                      "absolute or '..' path"),
    "member-absolute": (_extra_member(_file("/tmp/outside-abs", b"x"), b"x"),
                        "absolute or '..' path"),
    "member-symlink": (_extra_member(_symlink("torch_compile_cache/evil", "/etc")),
                       "a symlink"),
    "member-hardlink": (_extra_member(_hardlink("torch_compile_cache/evil", "/etc/passwd")),
                        "a hard link"),
    "member-device": (_extra_member(_device("torch_compile_cache/evil")), "a device"),
    "tampered-byte": (_tampered, "sha256 differs"),
}


@pytest.mark.parametrize("case", sorted(EVIL))
def test_bad_bundles_are_refused_with_one_line(case: str, bundle: Path, tmp_path: Path) -> None:
    edit, message = EVIL[case]
    bad = tmp_path / "bad.tar.zst"
    _rewrite(bundle, bad, edit)
    root = tmp_path / "root"
    res = run_cli("unpack", str(bad), "--root", str(root))
    assert res.returncode == 2, (res.stdout, res.stderr)
    assert message in res.stderr
    assert res.stderr.count("\n") == 1 and "Traceback" not in res.stderr
    assert _entries(root) == set()
    staging = root / "torch_compile_cache" / ".vllm-cache-tools" / "staging"
    assert not staging.exists() or list(staging.iterdir()) == []
    assert not Path("/tmp/outside-abs").exists()
    assert not (tmp_path / "outside").exists()


def test_truncated_bundle_is_refused(bundle: Path, tmp_path: Path) -> None:
    bad = tmp_path / "cut.tar.zst"
    data = bundle.read_bytes()
    bad.write_bytes(data[: len(data) * 2 // 3])
    root = tmp_path / "root"
    res = run_cli("unpack", str(bad), "--root", str(root))
    assert res.returncode == 2 and "truncated or corrupt" in res.stderr, res.stderr
    assert res.stderr.count("\n") == 1
    assert _entries(root) == set()
    with pytest.raises(BundleError):
        api.unpack(bad, root=root)


def test_not_a_bundle(tmp_path: Path) -> None:
    junk = tmp_path / "junk.tar.zst"
    junk.write_bytes(b"not zstd at all")
    res = run_cli("unpack", str(junk), "--root", str(tmp_path / "r"))
    assert res.returncode == 2 and res.stderr.startswith("vllm-cache: error: ")
    assert res.stderr.count("\n") == 1


def test_full_disk_mid_unpack_leaves_nothing_half_placed(bundle: Path, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A real full file system: a 1.5 MiB tmpfs for a bundle of ~5 MiB of files. The free
    space check refuses before anything is written (exit 1, issue 23); where the disk fills
    during the unpack anyway (another writer: the check is passed by here), the ENOSPC is one
    line and nothing is half placed."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1536k", "tmpfs",
                                            str(mnt)], capture_output=True).returncode:
        pytest.skip("needs root to mount a small tmpfs")
    try:
        root = mnt / "root"
        res = run_cli("unpack", str(bundle), "--root", str(root))
        assert res.returncode == 1, res.stdout
        assert "free with the margin" in res.stderr and "nothing written" in res.stderr
        assert res.stderr.count("\n") == 1
        assert not root.exists()
        monkeypatch.setattr(api, "check_free_space", lambda *a: None)
        with pytest.raises(FleetError, match=r"No space left on device.*nothing placed"):
            api.unpack(bundle, root=root)
        assert _entries(root) == set()
        # The root did not exist: the folders made for the staging folder go again.
        assert not root.exists()
    finally:
        subprocess.run(["umount", str(mnt)], check=False)


def test_pack_refuses_unknown_keys_and_partial_entries(real_compile: ScenarioRun,
                                                       tmp_path: Path) -> None:
    res = run_cli("pack", "--root", str(real_compile.vllm_root), "ffffffffff", "-o",
                  str(tmp_path / "x.tar.zst"))
    assert res.returncode == 2 and "no entry matches" in res.stderr
    root = tmp_path / "root"
    shutil.copytree(real_compile.vllm_root, root, symlinks=True)
    key = _backend_key(real_compile)
    for f in (root / "torch_compile_cache" / key).rglob("computation_graph.py"):
        f.unlink()
    res = run_cli("pack", "--root", str(root), key, "-o", str(tmp_path / "y.tar.zst"))
    assert res.returncode == 1, (res.stdout, res.stderr)
    assert "not packed" in res.stderr and not (tmp_path / "y.tar.zst").exists()


def test_ustar_headers_are_tarfiles_own() -> None:
    """pack's header builder gives tarfile's ustar bytes, and gives up where ustar does."""
    from vllm_cache_tools.fleet.tar_headers import member_info, ustar_header

    names = ["a", "x" * 100, "x" * 101, "d/" + "x" * 100, "p" * 155 + "/" + "n" * 100,
             "p" * 156 + "/n", "é/x", "torch_compile_cache/torch_aot_compile/" + "f" * 64
             + "/inductor_cache/fx/ab/" + "c" * 60 + ".py", "a/" * 60 + "b", "a/" * 130,
             "/" + "x" * 101, "x" * 101 + "/", "ab/" * 40 + "c" * 99, "ab/" * 52 + "c" * 99,
             "q" * 150 + "/" + "r" * 4 + "/" + "s" * 96, "q" * 155 + "//" + "s" * 99]
    for name in names:
        for size in (0, 1, 512, 123456789, 8 ** 11 - 1, 8 ** 11):
            for exe in (False, True):
                info = member_info(name, size, exe)
                try:
                    ref: bytes | None = info.tobuf(tarfile.USTAR_FORMAT, "ascii", "strict")
                except (ValueError, UnicodeEncodeError):
                    ref = None
                assert ustar_header(name, size, exe) == ref, (name, size, exe)


def test_pack_to_stdout_with_json_is_a_usage_error(tmp_path: Path) -> None:
    """The bundle goes to stdout by default, and so does --json: together they made a bundle
    with a JSON document after it. Now one line, exit 2, nothing written."""
    root = tmp_path / "root"
    shutil.copytree(Path(__file__).resolve().parent.parent / "examples" / "sample_cache", root)
    res = run_cli("pack", "--root", str(root), "28fd", "--json")
    assert res.returncode == 2, res.stderr
    assert res.stdout == "" and res.stderr.startswith("vllm-cache: error: ")
    assert res.stderr.count("\n") == 1
    ok = run_cli("pack", "--root", str(root), "28fd", "--json", "-o", str(tmp_path / "b.tzst"))
    assert ok.returncode == 0 and json.loads(ok.stdout)["schema"].startswith("vllm-cache-tools/")


def test_bad_bundle_into_a_new_root_leaves_no_folders(tmp_path: Path) -> None:
    """unpack of something that is no bundle (or a truncated one) into a root that does not
    exist: one line, exit 2, and the root is still not there (was: the root, its
    torch_compile_cache and an empty staging folder made before the bundle was read)."""
    junk = tmp_path / "junk.tar.zst"
    junk.write_bytes(b"not zstd at all")
    good = tmp_path / "good.tar.zst"
    root = tmp_path / "root"
    shutil.copytree(Path(__file__).resolve().parent.parent / "examples" / "sample_cache", root)
    assert run_cli("pack", "--root", str(root), "28fd", "-o", str(good)).returncode == 0
    cut = tmp_path / "cut.tar.zst"
    cut.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    for bad in (junk, cut):
        new = tmp_path / f"new-{bad.stem}"
        res = run_cli("unpack", str(bad), "--root", str(new))
        assert res.returncode == 2 and res.stderr.count("\n") == 1, res.stderr
        assert not new.exists(), sorted(str(p) for p in new.rglob("*"))
    # An existing root keeps what it had, and only the state folders unpack itself made go.
    res = run_cli("unpack", str(junk), "--root", str(root))
    assert res.returncode == 2 and not (root / "torch_compile_cache" / ".vllm-cache-tools" /
                                        "staging").exists()
    assert (root / "torch_compile_cache" / "28fd362d4e").is_dir()


def test_pack_of_a_path_in_another_root_is_one_line(tmp_path: Path) -> None:
    """An entry path of another root than --root: one line naming both, exit 2, as rm says
    it (was: "internal error: KeyError", exit 3); push the same."""
    sample = Path(__file__).resolve().parent.parent / "examples" / "sample_cache"
    for name in ("a", "b"):
        shutil.copytree(sample, tmp_path / name)
    other = tmp_path / "a" / "torch_compile_cache" / "28fd362d4e"
    for args in (["pack", str(other), "-o", str(tmp_path / "x.tzst")],
                 ["push", str(other), f"file://{tmp_path}/store"]):
        res = run_cli(*args, "--root", str(tmp_path / "b"))
        assert res.returncode == 2, (args, res.stderr)
        assert res.stderr.count("\n") == 1 and "is not an entry of" in res.stderr, res.stderr
    assert not (tmp_path / "x.tzst").exists()


def test_data_after_the_bundle_is_refused(tmp_path: Path) -> None:
    """Bytes appended to a bundle, or a second zstd frame after it, are refused with nothing
    placed (was: 'placed', exit 0: the decompressor stopped at the end of the first frame).
    The bundle alone still unpacks."""
    import zstandard

    src = tmp_path / "src"
    shutil.copytree(Path(__file__).resolve().parent.parent / "examples" / "sample_cache", src)
    good = tmp_path / "good.tar.zst"
    assert run_cli("pack", "--root", str(src), "28fd", "-o", str(good)).returncode == 0
    data = good.read_bytes()
    for name, tail in (("junk", b"junk\n"), ("frame", zstandard.ZstdCompressor().compress(b"x")),
                       ("zeros", b"\0" * 700)):
        bad = tmp_path / f"{name}.tar.zst"
        bad.write_bytes(data + tail)
        root = tmp_path / f"root-{name}"
        res = run_cli("unpack", str(bad), "--root", str(root))
        assert res.returncode == 2 and res.stderr.count("\n") == 1, res.stderr
        assert "after the end of the bundle" in res.stderr or "corrupt" in res.stderr
        assert _entries(root) == set()
    # --force: the sample's AOT key is only linked without the vLLM arguments.
    res = run_cli("unpack", str(good), "--root", str(tmp_path / "ok"), "--force")
    assert res.returncode == 0, res.stdout + res.stderr


def test_pack_to_stdout_pipes_into_unpack_of_stdin(tmp_path: Path) -> None:
    """unpack - reads the bundle pack -o - writes (pack ... | ssh pod vllm-cache unpack -):
    the same entries placed as from the file (was: "cannot read -: No such file or
    directory"); a truncated stream is refused, nothing placed."""
    import sys

    exe = str(Path(sys.executable).parent / "vllm-cache")
    src = tmp_path / "src"
    shutil.copytree(Path(__file__).resolve().parent.parent / "examples" / "sample_cache", src)
    blob = subprocess.run([exe, "pack", "--root", str(src), "28fd"], capture_output=True,
                          check=True).stdout
    (tmp_path / "b.tar.zst").write_bytes(blob)
    # --force: the sample's AOT key is only linked without the vLLM arguments.
    assert run_cli("unpack", str(tmp_path / "b.tar.zst"), "--root",
                   str(tmp_path / "a"), "--force").returncode == 0
    r = subprocess.run([exe, "unpack", "-", "--root", str(tmp_path / "b"), "--force"],
                       input=blob, capture_output=True)
    assert r.returncode == 0, r.stderr
    # 28fd362d4e and its own start's AOT entry (b6a18428ab0d, of the same sources, is another
    # start's: its recorder manifest names another env hash).
    assert r.stdout.startswith(b"bundle <stdin>: 2 entries")
    # The placement records say where each came from and when (fleet/placed.py): not alike.
    placed = ".vllm-cache-tools/placed/"
    a, b = (tree_digests(tmp_path / d / "torch_compile_cache") for d in ("a", "b"))
    assert {k: v for k, v in a.items() if not k.startswith(placed)} == {
        k: v for k, v in b.items() if not k.startswith(placed)}
    assert len([k for k in b if k.startswith(placed)]) == 2
    assert b"bundle <stdin>" in (tmp_path / "b" / "torch_compile_cache" / placed /
                                 "backend-28fd362d4e.json").read_bytes()
    r = subprocess.run([exe, "unpack", "-", "--root", str(tmp_path / "c")],
                       input=blob[: len(blob) // 2], capture_output=True)
    assert r.returncode == 2 and r.stderr.count(b"\n") == 1, r.stderr
    assert not (tmp_path / "c").exists()


def test_pack_tolerates_a_new_hard_link_and_refuses_changed_bytes(real_compile: ScenarioRun,
                                                                  tmp_path: Path) -> None:
    """Between the selection's hashing and the archive, a hard link made to a file (its ctime
    moves, its bytes do not: other tools and the test harness link cache files) is hashed
    again as it is archived and packed; a file rewritten in place with other bytes of the same
    size is refused, nothing written."""
    from vllm_cache_tools.fleet.bundle import write_bundle
    from vllm_cache_tools.fleet.selection import select

    root = tmp_path / "root"
    shutil.copytree(real_compile.vllm_root, root)
    key = _backend_key(real_compile)
    sel = select(root, [key])
    factors = next((root / "torch_compile_cache" / key).rglob("cache_key_factors.json"))
    os.link(factors, tmp_path / "extra-link")
    w = write_bundle(sel, tmp_path / "linked.tar.zst")
    plain = api.pack([key], tmp_path / "plain.tar.zst", root=root)
    assert w.path.read_bytes() == plain.path.read_bytes()

    sel = select(root, [key])
    data = factors.read_bytes()
    with open(factors, "r+b") as f:  # same size, other bytes, same inode
        f.write(b"X" if data[:1] != b"X" else b"Y")
    with pytest.raises(FleetError, match="changed while it was packed"):
        write_bundle(sel, tmp_path / "changed.tar.zst")
    assert not (tmp_path / "changed.tar.zst").exists()
