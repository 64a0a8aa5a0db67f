"""Issue 23 figures for remote stores that lie (``nox -s hostile``), on real ``file://``
stores filled by ``push`` from the repository's real sample cache, every command the real CLI
in a child process:

* hangs over 10 s: pulls of a store whose blob is a FIFO, a link to a FIFO, a link to a file
  outside the store with the blob's bytes (the ``/etc/shadow`` content oracle), missing in the
  middle, of the wrong digest; ``ls URL`` and ``pull`` of another key beside a malformed index
  object; a pull and an ``ls`` of a store whose index object names 10^6 blobs (~115 MB);
* peak RSS (the child's own ``VmHWM``) of those last two, and of a pull of an entry at the
  file cap (:data:`MAX_INDEX_FILES` small files) with its MB/s, and index reading in MB/s at
  three sizes (time linear in size);
* staging folders (and new roots) left behind by every failed pull, by a SIGTERM'd one and,
  after the next pull, by a SIGKILL'd one;
* files outside the store and root changed (an exact record of a victim folder holding the
  link targets);
* exit status and bytes written by a pull and an unpack refused for free space on a small
  tmpfs (root only).

Prints a table; ``--json PATH`` writes the figures; exit 1 when a count is not 0 or a peak
is 300 MB or more. ``--quick``: a smaller entry at the cap figure."""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.victims import changed, make_victim, tree_state  # noqa: E402
from vllm_cache_tools.fleet import api  # noqa: E402
from vllm_cache_tools.fleet.records import EntryRecord, FileRecord  # noqa: E402
from vllm_cache_tools.fleet.remote import (  # noqa: E402
    MAX_INDEX_FILES,
    STORE_FORMAT,
    STORE_VERSION,
    Store,
    index_bytes,
)

HANG_S = 10.0
RSS_LIMIT_MB = 300
SAMPLE = REPO / "examples" / "sample_cache"
BACKEND, OTHER = "28fd362d4e", "39ecaca4bf"
STAGING = ("torch_compile_cache", ".vllm-cache-tools", "staging")
# The CLI in a child that reports its own peak RSS (VmHWM since its exec) on the way out.
_CLI = ("import atexit, os, sys\n"
        "def _hwm():\n"
        "    for line in open('/proc/self/status'):\n"
        "        if line.startswith('VmHWM:'):\n"
        "            open(os.environ['VCT_HWM_FILE'], 'w').write(line.split()[1])\n"
        "atexit.register(_hwm)\n"
        "from vllm_cache_tools.cli import main\n"
        "sys.argv[0] = 'vllm-cache'\n"
        "sys.exit(main())\n")


class Run:
    def __init__(self, rc: int | None, seconds: float, stderr: str, hwm_mb: float | None):
        self.rc, self.seconds, self.stderr, self.hwm_mb = rc, seconds, stderr, hwm_mb

    @property
    def hung(self) -> bool:
        return self.rc is None or self.seconds > HANG_S


def cli(args: Sequence[str], tmp: Path, timeout: float = 3 * HANG_S) -> Run:
    hwm = tmp / f"hwm.{os.getpid()}.{time.monotonic_ns()}"
    env = {**os.environ, "VCT_HWM_FILE": str(hwm), "XDG_CACHE_HOME": str(tmp / "xdg"),
           "VLLM_CACHE_TOOLS_PROBE_STANDBY": "0"}
    t0 = time.monotonic()
    p = subprocess.Popen([sys.executable, "-c", _CLI, *args], stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True, env=env)
    try:
        _, err = p.communicate(timeout=timeout)
        rc: int | None = p.returncode
    except subprocess.TimeoutExpired:
        p.kill()
        _, err = p.communicate()
        rc = None
    took = time.monotonic() - t0
    mb = int(hwm.read_text()) / 1024 if hwm.exists() else None
    hwm.unlink(missing_ok=True)
    return Run(rc, took, err.strip(), mb)


def staged(root: Path) -> int:
    d = root.joinpath(*STAGING)
    return len(list(d.iterdir())) if d.is_dir() else 0


def fresh_store(tmp: Path, name: str) -> tuple[str, Store]:
    url = f"file://{tmp}/{name}"
    api.push([BACKEND, OTHER], url, root=SAMPLE)
    return url, Store(url)


def fabricated_index(store: Store, key: str, n: int, path: Path | None = None) -> int:
    """Write an index object naming ``n`` distinct files (blobs not written), streamed to
    disk; its size in bytes."""
    target = Path(path or store.index_path("backend", key))
    head = json.dumps({"format": STORE_FORMAT, "format_version": STORE_VERSION,
                       "pushed_at": time.time(), "pushed_by": "hostile_stores",
                       "packed_on": {}, "extras": []})[:-1]
    entry = {"key": key, "layout": "backend", "path": f"torch_compile_cache/{key}",
             "ranks": ["rank_0_0"], "prefixes": ["backbone"], "state": "complete"}
    with open(target, "w") as f:
        f.write(head + ', "entry": ' + json.dumps(entry)[:-1] + ', "files": [')
        for i in range(n):
            sha = hashlib.sha256(b"%d" % i).hexdigest()
            f.write(("," if i else "") + json.dumps(
                {"path": f"rank_0_0/inductor_cache/{sha[:2]}/c{sha[2:40]}.py", "size": 7 + i % 9,
                 "sha256": sha}))
        f.write("]}}")
    return target.stat().st_size


def entry_at_cap(store: Store, key: str, n: int) -> int:
    """A real entry of ``n`` small distinct files: blobs written, index published; its
    index's size."""
    files = []
    for i in range(n):
        data = b"# kernel %d\n" % i
        sha = hashlib.sha256(data).hexdigest()
        blob = Path(store.blob_path(sha))
        blob.parent.mkdir(parents=True, exist_ok=True)
        blob.write_bytes(data)
        files.append(FileRecord(f"rank_0_0/inductor_cache/{sha[:2]}/k{i}.py", len(data), sha))
    rec = EntryRecord(key=key, layout="backend", path=f"torch_compile_cache/{key}",
                      ranks=("rank_0_0",), prefixes=("backbone",), state="complete",
                      state_detail="", files=tuple(files))
    raw = index_bytes(rec, (), {}, time.time())
    store.put_bytes(store.index_path("backend", key), raw)
    return len(raw)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", type=Path, help="write the figures here")
    ap.add_argument("--quick", action="store_true", help="a 20,000-file entry at the cap")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="vct-hostile-stores-"))
    figures: dict[str, object] = {}
    rows: list[tuple[str, str, float, str]] = []
    hangs = left = 0
    try:
        victim = make_victim(tmp / "victim")
        os.mkfifo(victim / "fifo")
        before = tree_state(victim)

        # ---- bad blobs ----------------------------------------------------------------
        for plant in ("fifo", "link-to-fifo", "link-to-file", "missing-in-middle",
                      "wrong-digest"):
            url, store = fresh_store(tmp, f"store-{plant}")
            shas = sorted(p.name for p in (tmp / f"store-{plant}" / "blobs").glob("*/*"))
            sha = shas[len(shas) // 2]
            blob = Path(store.blob_path(sha))
            data = blob.read_bytes()
            blob.unlink()
            if plant == "fifo":
                os.mkfifo(blob)
            elif plant == "link-to-fifo":
                blob.symlink_to(victim / "fifo")
            elif plant == "link-to-file":
                secret = victim / "shadow"
                if not secret.exists():
                    secret.write_bytes(data)
                    before = tree_state(victim)
                blob.symlink_to(secret)
            elif plant == "wrong-digest":
                blob.write_bytes(b"x" + data[1:])
            root = tmp / f"root-{plant}"
            r = cli(["pull", url, "--root", str(root), "--force"], tmp)
            n_left = staged(root) + (1 if root.exists() else 0)
            hangs += r.hung
            left += n_left
            rows.append((f"pull, blob {plant}", f"exit {r.rc}", r.seconds,
                         f"left {n_left}; {r.stderr[-90:]}"))
            if r.rc != 2:
                left += 1  # a pull that did not fail is a figure too

        # ---- a malformed index object beside good ones --------------------------------
        url, store = fresh_store(tmp, "store-malformed")
        store.put_bytes(store.index_path("backend", OTHER), b'{"format": ')
        r = cli(["ls", url], tmp)
        hangs += r.hung
        rows.append(("ls URL, one malformed index", f"exit {r.rc}", r.seconds,
                     f"{len(r.stderr.splitlines())} warning line(s)"))
        figures["malformed_ls_exit"] = r.rc
        r = cli(["pull", url, BACKEND, "--root", str(tmp / "root-malformed"), "--force"], tmp)
        hangs += r.hung
        rows.append(("pull another key, one malformed", f"exit {r.rc}", r.seconds, ""))
        figures["malformed_pull_other_exit"] = r.rc

        # ---- an index naming 10^6 blobs -----------------------------------------------
        url, store = fresh_store(tmp, "store-huge")
        huge_key = "0123456789"
        t0 = time.monotonic()
        size = fabricated_index(store, huge_key, 1_000_000)
        gen_s = time.monotonic() - t0
        r = cli(["pull", url, huge_key, "--root", str(tmp / "root-huge"), "--force"], tmp)
        hangs += r.hung
        left += staged(tmp / "root-huge")
        rows.append((f"pull of a 10^6-blob index ({size / 1e6:.0f} MB)", f"exit {r.rc}",
                     r.seconds, f"peak {r.hwm_mb:.0f} MB; {r.stderr[-80:]}"))
        figures["huge_index_bytes"] = size
        figures["huge_pull_peak_mb"] = r.hwm_mb
        figures["huge_pull_seconds"] = round(r.seconds, 2)
        figures["huge_index_generation_s"] = round(gen_s, 1)
        r2 = cli(["ls", url], tmp)
        hangs += r2.hung
        rows.append(("ls URL beside it", f"exit {r2.rc}", r2.seconds,
                     f"peak {r2.hwm_mb:.0f} MB"))
        figures["huge_ls_peak_mb"] = r2.hwm_mb
        figures["huge_ls_exit"] = r2.rc
        Path(store.index_path("backend", huge_key)).unlink()

        # ---- index reading is linear; a pull at the file cap ---------------------------
        rates = {}
        ref: dict[int, float] = {}
        for n in (10_000, 50_000, MAX_INDEX_FILES):
            k = f"{n:010d}"
            size = fabricated_index(store, k, n)
            t0 = time.monotonic()
            store.read_index(store.index_path("backend", k))
            took = time.monotonic() - t0
            t0 = time.monotonic()  # the reference: json.loads of the same bytes alone
            json.loads(Path(store.index_path("backend", k)).read_bytes())
            ref[n] = time.monotonic() - t0
            rates[n] = (size, took)
            Path(store.index_path("backend", k)).unlink()
        for n, (size, took) in rates.items():
            rows.append((f"read an index of {n} files ({size / 1e6:.1f} MB)", "", took,
                         f"{size / 1e6 / took:.1f} MB/s; json.loads alone {ref[n]:.2f} s"))
        figures["index_read_mb_per_s"] = {str(n): round(s / 1e6 / t, 1)
                                          for n, (s, t) in rates.items()}
        figures["index_read_vs_json_loads"] = {str(n): round(ref[n] / t, 2)
                                               for n, (_, t) in rates.items()}
        n_cap = 20_000 if args.quick else MAX_INDEX_FILES
        cap_key = "cafecafe00"
        isize = entry_at_cap(store, cap_key, n_cap)
        root = tmp / "root-cap"
        r = cli(["pull", url, cap_key, "--root", str(root), "--force"], tmp, timeout=600)
        placed = (root / "torch_compile_cache" / cap_key).is_dir()
        t0 = time.monotonic()  # the reference: cp -r of the same blobs on the same disk
        subprocess.run(["cp", "-r", str(tmp / "store-huge" / "blobs"), str(tmp / "cp-ref")],
                       check=True)
        cp_s = time.monotonic() - t0
        shutil.rmtree(tmp / "cp-ref", ignore_errors=True)
        rows.append((f"pull of an entry of {n_cap} files (index {isize / 1e6:.1f} MB)",
                     f"exit {r.rc}", r.seconds,
                     f"peak {r.hwm_mb:.0f} MB; {isize / 1e6 / r.seconds:.2f} MB/s of index, "
                     f"{n_cap / r.seconds:.0f} files/s; placed {placed}; cp -r of its "
                     f"blobs {cp_s:.2f} s: {cp_s / r.seconds:.2f}x"))
        figures["cap_pull"] = {"files": n_cap, "index_bytes": isize, "exit": r.rc,
                               "seconds": round(r.seconds, 2), "peak_mb": r.hwm_mb,
                               "files_per_s": round(n_cap / r.seconds),
                               "cp_r_blobs_s": round(cp_s, 2),
                               "ratio_vs_cp_r": round(cp_s / r.seconds, 2)}
        shutil.rmtree(root, ignore_errors=True)

        # ---- killed pulls ---------------------------------------------------------------
        figures["killed"] = {}
        for sig in (signal.SIGTERM, signal.SIGKILL):
            n_left, rc = killed_pull(tmp, sig)
            left += n_left
            rows.append((f"pull killed by {sig.name} (then the next pull)", f"exit {rc}", 0.0,
                         f"staging left {n_left}"))
            figures["killed"][sig.name] = {"exit": rc, "staging_left": n_left}

        # ---- free space -----------------------------------------------------------------
        figures["free_space"] = free_space(tmp, rows)

        after = tree_state(victim)
        outside = changed(before, after)
        figures.update(hangs=hangs, staging_left=left, outside_changed=len(outside))
        rows.append(("files outside the stores and roots changed", "", 0.0,
                     f"{len(outside)} {outside[:3]}"))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    w = max(len(r[0]) for r in rows)
    for name, status, secs, note in rows:
        print(f"{name:<{w}}  {status:>8}  {secs:7.2f} s  {note}")
    peaks = [v for k, v in figures.items() if k.endswith("peak_mb") and isinstance(v, float)]
    cap = figures.get("cap_pull")
    if isinstance(cap, dict) and isinstance(cap.get("peak_mb"), float):
        peaks.append(cap["peak_mb"])
    print(f"\nhangs over {HANG_S:.0f} s: {hangs}; staging left: {left}; files outside "
          f"changed: {figures['outside_changed']}; highest peak RSS: "
          f"{max(peaks):.0f} MB (limit {RSS_LIMIT_MB})")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1) + "\n")
    bad = hangs or left or figures["outside_changed"] or max(peaks) >= RSS_LIMIT_MB
    return 1 if bad else 0


def killed_pull(tmp: Path, sig: signal.Signals) -> tuple[int, int | None]:
    """A pull that waits for the entry lock (held here) after staging its files, stopped
    by ``sig``; after SIGKILL a second pull runs once the folder is past the lock's grace.
    Staging folders left at the end, and the killed pull's exit status."""
    from vllm_cache_tools.maintain.trash import EntryLocks, RootHandle

    url, _ = fresh_store(tmp, f"store-{sig.name}")
    root = tmp / f"root-{sig.name}"
    (root / "torch_compile_cache").mkdir(parents=True)
    with RootHandle(root) as h:
        trash = h.trash(create=True)
        assert trash is not None and trash.locks_fd is not None
        locks = EntryLocks(trash.locks_fd)
        locks.try_lock(f"backend-{BACKEND}")
        child = subprocess.Popen([sys.executable, "-c", _CLI, "pull", url, BACKEND, "--root",
                                  str(root), "--force"], stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL,
                                 env={**os.environ, "VCT_HWM_FILE": os.devnull})
        deadline = time.monotonic() + 60
        d = root.joinpath(*STAGING)
        while not (d.is_dir() and any(p.rglob("*.py") for p in d.iterdir())):
            if time.monotonic() > deadline or child.poll() is not None:
                break
            time.sleep(0.1)
        time.sleep(0.5)
        child.send_signal(sig)
        child.wait(30)
        locks.close()
        trash.close()
    if sig == signal.SIGKILL:
        for p in root.joinpath(*STAGING).iterdir():
            old = time.time() - 120  # a run killed two minutes ago (past the lock's grace)
            os.utime(p, (old, old))
        cli(["pull", url, BACKEND, "--root", str(root), "--force"], tmp)
    return staged(root), child.returncode


def free_space(tmp: Path, rows: list[tuple[str, str, float, str]]) -> dict[str, object]:
    if os.geteuid() != 0:
        rows.append(("free space (needs root for a tmpfs)", "skipped", 0.0, ""))
        return {"skipped": "not root"}
    mnt = tmp / "small"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", str(mnt)],
                      capture_output=True).returncode != 0:
        rows.append(("free space (tmpfs mount refused)", "skipped", 0.0, ""))
        return {"skipped": "mount refused"}
    out: dict[str, object] = {}
    try:
        url, _ = fresh_store(tmp, "store-space")
        bundle = tmp / "b.tar.zst"
        api.pack([BACKEND, OTHER], bundle, root=SAMPLE)
        (mnt / "filler").write_bytes(b"\0" * (12 << 20))

        def used() -> int:
            st = os.statvfs(mnt)
            return (st.f_blocks - st.f_bfree) * st.f_frsize

        for verb, argv in (("pull", ["pull", url, "--root", str(mnt / "root"), "--force"]),
                           ("unpack", ["unpack", str(bundle), "--root", str(mnt / "root"),
                                       "--force"])):
            u0 = used()
            r = cli(argv, tmp)
            grew = used() - u0
            rows.append((f"{verb} onto a 24 MiB tmpfs with 12 MiB free", f"exit {r.rc}",
                         r.seconds, f"bytes written {grew}; {r.stderr[-70:]}"))
            out[verb] = {"exit": r.rc, "bytes_written": grew}
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)
    return out


if __name__ == "__main__":
    sys.exit(main())
