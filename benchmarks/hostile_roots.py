"""Issue 12 figures on copies of real cache roots (``nox -s hostile``):

(a) files outside the root changed by any command (ls, show, audit, explain, diff-graph, verify,
    verify --fix, prune, rm, and the recorder's writers) under planted symlinks (and hard
    links) and under symlink-swap races (a process swapping a folder of the root for a link
    to a victim folder in a loop while prune and the recorder run), as root and as another
    uid on a group-shared copy. The victim is an exact record (paths, types, sizes, mtimes,
    modes, content hashes) of a folder outside the root, owned by the user running the
    command (so following a link would have the rights to damage it).
(b) hangs: every command over a root holding FIFOs (with and without a writer feeding them),
    character devices and sockets in place of ``model``, factors, graph, compile literal,
    manifest, ledger, snapshot, Inductor file, model info, entry lock and trash item must end
    within 10 s. A hang found with every placement at once is narrowed to its placement.

Prints a table; ``--json PATH`` writes the figures; exit 1 when a figure is not 0. Needs root
for the second uid and the device nodes (without root: root-user figures only, no devices).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests import multiuser  # noqa: E402
from tests.victims import changed, make_victim, tree_state  # noqa: E402

HANG_S = 10.0
_SEQ = itertools.count()
HOST = socket.gethostname()
_CLI = ("import sys; from vllm_cache_tools.cli import main; "
        "sys.argv[0] = 'vllm-cache'; sys.exit(main())")
_RECORDER = r"""
import os, sys, time
from vllm_cache_tools.recorder import write
cc, entry, traced, rounds = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
failed = 0
for i in range(rounds):
    for call in (lambda: write.append_event(cc, {"v": 1, "time": time.time(), "event": "hit",
                                                 "tree": "aot", "key": "k", "host": "h"}),
                 lambda: write.snapshot_file(cc, traced),
                 lambda: write.write_manifest(entry, {"schema": 1, "i": i}, base=cc)):
        try:
            call()
        except OSError:
            failed += 1
print(failed)
"""
_SWAPPER = r"""
import os, sys, time
target, link_to, stop = sys.argv[1], sys.argv[2], sys.argv[3]
away = target + ".swapped-away"
n = 0
while not os.path.exists(stop):
    try:
        os.rename(target, away)
    except OSError:
        time.sleep(0.001)
        continue
    try:
        os.symlink(link_to, target)
        n += 1
        time.sleep(0.0005)
        os.unlink(target)
    except OSError:
        pass
    try:
        os.rename(away, target)
    except OSError:
        pass
    time.sleep(0.0005)
if os.path.lexists(away) and not os.path.lexists(target):
    os.rename(away, target)
print(n)
"""
_FEEDER = r"""
import os, signal, sys
signal.signal(signal.SIGPIPE, signal.SIG_IGN)
block = b"x" * 65536
while True:
    try:
        fd = os.open(sys.argv[1], os.O_WRONLY)
    except OSError:
        break
    try:
        while True:
            os.write(fd, block)
    except OSError:
        os.close(fd)
"""


# ---- who runs things ------------------------------------------------------------------------

@dataclass(frozen=True)
class Actor:
    """The user a command runs as; ``user`` None is this process's own uid."""

    label: str
    user: multiuser.User | None
    home: Path

    def python(self) -> str:
        return sys.executable if self.user is None else multiuser.tool_python(self.user)

    def run(self, argv: Sequence[str], timeout: float) -> tuple[int, str, float]:
        """(exit code or 124 on timeout, stderr tail, seconds)."""
        t0 = time.perf_counter()
        env = {"XDG_CACHE_HOME": str(self.home / "cache"),
               "XDG_STATE_HOME": str(self.home / "state"),
               "VLLM_CACHE_TOOLS_PROBE_STANDBY": "0", "PYTHONDONTWRITEBYTECODE": "1"}
        if self.user is not None:
            kw: dict[str, object] = {"user": self.user.uid, "group": self.user.gid,
                                     "extra_groups": [g for g in os.getgrouplist(
                                         self.user.name, self.user.gid)
                                         if g != self.user.gid],
                                     "umask": 0o002}
            env.update({"HOME": str(self.home), "PATH": "/usr/bin:/bin"})
        else:
            kw = {}
            env = {**os.environ, **env}
        p = subprocess.Popen(list(argv), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             text=True, env=env, cwd=str(self.home), start_new_session=True,
                             **kw)  # type: ignore[call-overload]
        try:
            _, err = p.communicate(timeout=timeout)
            rc = p.returncode
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            _, err = p.communicate()
            rc = 124
        return rc, (err or "")[-400:], time.perf_counter() - t0

    def cli(self, *args: str, timeout: float = 120) -> tuple[int, str, float]:
        return self.run([self.python(), "-c", _CLI, *args], timeout)


def _actors(base: Path) -> list[tuple[Actor, multiuser.User | None]]:
    """(actor, attacker) pairs: root attacked by a group member; another uid attacked by a
    third one (both members of the shared group)."""
    home = base / "home-self"
    home.mkdir()
    out: list[tuple[Actor, multiuser.User | None]] = []
    if os.geteuid() != 0:
        return [(Actor(f"uid {os.geteuid()}", None, home), None)]
    group = multiuser.shared_group()
    other, third = multiuser.other_user(group), multiuser.third_user(group)
    out.append((Actor("root", None, home), third))
    ohome = base / "home-other"
    ohome.mkdir(mode=0o700)
    os.chown(ohome, other.uid, other.gid)
    out.append((Actor(other.name, other, ohome), third))
    return out


# ---- roots, victims, plants -----------------------------------------------------------------

def _source_roots(quick: bool) -> list[tuple[str, Path]]:
    roots = [("sample", REPO / "examples" / "sample_cache")]
    if not quick:
        home = Path(os.environ.get("VCT_TEST_HOME",
                                   Path.home() / ".cache" / "vllm-cache-tools-tests"))
        for name in ("compile", "compile-nomega"):
            found = sorted(p / "root" for p in (home / "caches").glob(f"{name}-*")
                           if (p / "done.json").exists() and (p / "root").is_dir())
            if found:
                roots.append((name, found[-1]))
    return roots


def _copy_root(src: Path, dst: Path, actor: Actor) -> Path:
    """A copy of ``src``: group-shared when run as root (the attacker is a member of the
    group, so can plant and swap names as in a real shared root), with every file two days
    old (so age-based policies and the snapshot sweep act)."""
    if os.geteuid() == 0:
        multiuser.make_shared_root(src, dst, multiuser.shared_group())
    else:
        shutil.copytree(src, dst, symlinks=True)
    old = time.time() - 2 * 86400
    for dirpath, dirnames, filenames in os.walk(dst):
        for n in [*filenames, *dirnames]:
            p = os.path.join(dirpath, n)
            if not os.path.islink(p):
                os.utime(p, (old, old))
    return dst


def _victim(d: Path, root: Path, actor: Actor) -> Path:
    src = root / "torch_compile_cache" / ".vllm-cache-tools" / "sources"
    names = tuple(sorted(p.name for p in src.iterdir())[:3]) if src.is_dir() else ()
    make_victim(d, names)
    if actor.user is not None:
        subprocess.run(["chown", "-R", f"{actor.user.uid}:{actor.user.gid}", str(d)],
                       check=True)
        multiuser.make_traversable(d.parent)
    return d


@dataclass(frozen=True)
class Layout:
    cc: Path
    aot_keys: tuple[str, ...]
    backend_keys: tuple[str, ...]

    @property
    def state(self) -> Path:
        return self.cc / ".vllm-cache-tools"

    def aot_rank(self) -> Path | None:
        for k in self.aot_keys:
            ranks = sorted((self.cc / "torch_aot_compile" / k).glob("rank_*"))
            if ranks:
                return ranks[0]
        return None

    def prefix(self) -> Path | None:
        for k in self.backend_keys:
            found = sorted((self.cc / k).glob("rank_*/*/cache_key_factors.json"))
            if found:
                return found[0].parent
        return None


def _layout(root: Path) -> Layout:
    cc = root / "torch_compile_cache"
    aot = cc / "torch_aot_compile"
    aot_keys = tuple(sorted(p.name for p in aot.iterdir())) if aot.is_dir() else ()
    backend = tuple(sorted(p.name for p in cc.iterdir() if p.is_dir() and len(p.name) == 10
                           and not p.name.startswith(".")))
    return Layout(cc, aot_keys, backend)


def _link(at: Path, to: Path, owner: multiuser.User | None) -> None:
    if os.path.lexists(at):
        if at.is_dir() and not at.is_symlink():
            shutil.rmtree(at)
        else:
            at.unlink()
    at.parent.mkdir(parents=True, exist_ok=True)
    at.symlink_to(to)
    if owner is not None:
        os.lchown(at, owner.uid, owner.gid)


Plant = Callable[[Layout, Path, "multiuser.User | None", Path], None]


def _plant_sweep(lay: Layout, v: Path, o: multiuser.User | None, traced: Path) -> None:
    src = lay.state / "sources"
    _link(src / ".sweep-evil-1-0", v, o)
    _link(src / ".sweep-evil-2-0", v / "sources", o)
    _link(src / f".sweep-{HOST}-999999999-0", v, o)


def _plant_state(lay: Layout, v: Path, o: multiuser.User | None, traced: Path) -> None:
    _link(lay.state, v, o)


def _plant_sources_ledger(lay: Layout, v: Path, o: multiuser.User | None,
                          traced: Path) -> None:
    _link(lay.state / "sources", v / "sources", o)
    _link(lay.state / "ledger", v / "ledger", o)


def _plant_files(lay: Layout, v: Path, o: multiuser.User | None, traced: Path) -> None:
    import hashlib

    ledger = lay.state / "ledger"
    (lay.state / "sources").mkdir(parents=True, exist_ok=True)
    for uid in (0, 1001, 1002, 1003, os.geteuid()):
        _link(ledger / f"{HOST}.{uid}.jsonl", v / "sub" / "deep.txt", o)
    _link(ledger / f"{HOST}.jsonl", v / "notes", o)
    sha = hashlib.sha256(traced.read_bytes()).hexdigest()
    _link(lay.state / "sources" / sha, v / "notes", o)
    for pid in range(2, 400):  # the old writer's predictable temporary names
        _link(lay.state / "sources" / f"{sha}.{pid}.tmp", v / "notes", o)


def _plant_entries(lay: Layout, v: Path, o: multiuser.User | None, traced: Path) -> None:
    rank = lay.aot_rank()
    if rank is not None:
        _link(rank / "model", v / "notes", o)
        _link(rank.parent / "inductor_cache", v, o)
        for m in rank.glob("vct-manifest.*.json"):
            _link(m, v / "notes", o)
    prefix = lay.prefix()
    if prefix is not None:
        for n in ("cache_key_factors.json", "computation_graph.py", "vllm_compile_cache.py"):
            _link(prefix / n, v / "notes", o)
        _link(prefix.parent / "inductor_cache", v, o)
    _link(lay.cc / "abcdef0123", v, o)
    _link(lay.cc / "torch_aot_compile" / ("c" * 64), v, o)


def _plant_trash(lay: Layout, v: Path, o: multiuser.User | None, traced: Path) -> None:
    trash = lay.cc / ".vllm-cache-trash"
    trash.mkdir(exist_ok=True)
    _link(trash / "locks", v, o)
    _link(trash / "aaaaaaaaaa.1.0", v, o)
    _link(trash / "bbbbbbbbbb.1.0", v / "notes", o)


def _plant_trash_link(lay: Layout, v: Path, o: multiuser.User | None, traced: Path) -> None:
    _link(lay.cc / ".vllm-cache-trash", v, o)


def _plant_lock(lay: Layout, v: Path, o: multiuser.User | None, traced: Path) -> None:
    locks = lay.cc / ".vllm-cache-trash" / "locks"
    locks.mkdir(parents=True, exist_ok=True)
    _link(locks / "entries.lock", v / "notes", o)


def _plant_hardlinks(lay: Layout, v: Path, o: multiuser.User | None, traced: Path) -> None:
    """Hard links to the victim's files (only the victim's owner, or root, can make them
    with protected_hardlinks; here the victim's owner is the one who runs the commands)."""
    ledger = lay.state / "ledger"
    ledger.mkdir(parents=True, exist_ok=True)
    for p in list(ledger.iterdir()):
        p.unlink()
    os.link(v / "notes", ledger / f"{HOST}.jsonl")
    os.link(v / "sub" / "deep.txt", ledger / f"{HOST}.{os.geteuid()}.jsonl")
    (lay.state / "sources").mkdir(parents=True, exist_ok=True)
    os.link(v / OLD, lay.state / "sources" / ("d" * 64))


OLD = "ab" * 32

PLANTS: dict[str, Plant] = {
    "sweep-quarantine-links": _plant_sweep,
    "state-folder-link": _plant_state,
    "sources+ledger-links": _plant_sources_ledger,
    "ledger/snapshot/tmp-name-links": _plant_files,
    "entry-file-and-folder-links": _plant_entries,
    "trash-item-and-locks-links": _plant_trash,
    "trash-folder-link": _plant_trash_link,
    "entries.lock-link": _plant_lock,
    "hard-links-into-ledger/sources": _plant_hardlinks,
}


def _commands(lay: Layout, root: Path) -> dict[str, list[str]]:
    r = ["--root", str(root)]
    a = lay.aot_keys[0][:12] if lay.aot_keys else "none"
    b = lay.backend_keys[0] if lay.backend_keys else a
    keys2 = [k[:12] for k in lay.aot_keys[:2]] or [a, a]
    rm_keys = [k[:12] for k in lay.aot_keys[-1:]] + list(lay.backend_keys[-1:])
    return {
        "ls": ["ls", *r, "--json"],
        "show": ["show", *r, a],
        "show-backend": ["show", *r, b],
        "audit": ["audit", *r],
        "explain": ["explain", *r, *(keys2 if len(keys2) == 2 else [a, a])],
        "diff-graph": ["diff-graph", *r, *(list(lay.backend_keys[:2]) * 2)[:2]],
        "verify": ["verify", *r],
        "verify --fix": ["verify", *r, "--fix", "--yes", "--grace", "0s", "--all-users"],
        "rm": ["rm", *r, "--yes", "--grace", "0s", "--all-users", *rm_keys],
        "prune": ["prune", *r, "--older-than", "0s", "--grace", "0s", "--yes",
                  "--all-users"],
    }


def _recorder_argv(actor: Actor, lay: Layout, traced: Path, rounds: int) -> list[str]:
    rank = lay.aot_rank()
    entry = str(rank) if rank is not None else str(lay.cc / "x" / "rank_0_0")
    return [actor.python(), "-c", _RECORDER, str(lay.cc), entry, str(traced), str(rounds)]


def _damage_one(rank: Path) -> None:
    """Make one AOT entry corrupt, so verify --fix has something to remove."""
    m = rank / "model"
    if m.is_file() and not m.is_symlink():
        data = m.read_bytes()
        m.write_bytes(data[: len(data) // 3])


# ---- figure (a): nothing outside the root changes -------------------------------------------

@dataclass
class Outside:
    runs: int = 0
    changed_files: int = 0
    changed_runs: list[str] = field(default_factory=list)
    crashes: list[str] = field(default_factory=list)
    swaps: int = 0
    race_runs: int = 0


def _check(out: Outside, what: str, victim: Path, before: dict[str, tuple[object, ...]],
           rc: int, err: str) -> None:
    out.runs += 1
    diff = changed(before, tree_state(victim))
    if diff:
        out.changed_files += len(diff)
        out.changed_runs.append(f"{what}: {', '.join(diff[:5])}")
    if rc == 124 or rc == 3 or "Traceback" in err:
        out.crashes.append(f"{what}: rc {rc} {err.strip().splitlines()[-1:] or ''}")


def planted(base: Path, actor: Actor, attacker: multiuser.User | None,
            roots: list[tuple[str, Path]], out: Outside) -> None:
    traced = base / "traced_source.py"
    if not traced.exists():
        traced.write_text("def forward(x):\n    return x + 1\n")
        traced.chmod(0o644)
    for rname, src in roots:
        for pname, plant in PLANTS.items():
            probe = _layout(src)
            for cname in [*_commands(probe, src), "recorder"]:
                d = base / f"p{next(_SEQ)}"
                d.mkdir()
                if os.geteuid() == 0:
                    multiuser.make_traversable(d)
                root = _copy_root(src, d / "root", actor)
                lay = _layout(root)
                if cname == "verify --fix" and lay.aot_rank() is not None:
                    _damage_one(lay.aot_rank())  # type: ignore[arg-type]
                victim = _victim(d / "victim", root, actor)
                try:
                    plant(lay, victim, attacker, traced)
                except OSError as exc:
                    out.crashes.append(f"plant {pname}: {exc}")
                    shutil.rmtree(d, ignore_errors=True)
                    continue
                before = tree_state(victim)
                if cname == "recorder":
                    rc, err, _ = actor.run(_recorder_argv(actor, lay, traced, 3), 120)
                else:
                    rc, err, _ = actor.cli(*_commands(lay, root)[cname])
                _check(out, f"{actor.label} {rname} {pname} {cname}", victim, before, rc, err)
                shutil.rmtree(d, ignore_errors=True)


RACE_TARGETS: dict[str, Callable[[Layout], Path | None]] = {
    "sources": lambda lay: lay.state / "sources",
    "state folder": lambda lay: lay.state,
    "ledger": lambda lay: lay.state / "ledger",
    "AOT entry": lambda lay: (lay.cc / "torch_aot_compile" / lay.aot_keys[0]
                              if lay.aot_keys else None),
    "AOT inductor_cache": lambda lay: (
        lay.cc / "torch_aot_compile" / lay.aot_keys[0] / "inductor_cache"
        if lay.aot_keys else None),
    "AOT rank folder": lambda lay: lay.aot_rank(),
    "backend prefix": lambda lay: lay.prefix(),
    "backend entry": lambda lay: lay.cc / lay.backend_keys[0] if lay.backend_keys else None,
}


def races(base: Path, actor: Actor, attacker: multiuser.User | None,
          roots: list[tuple[str, Path]], rounds: int, out: Outside) -> None:
    traced = base / "traced_source.py"
    for rname, src in roots[:1]:
        for tname, target_of in RACE_TARGETS.items():
            for i in range(rounds):
                d = base / f"r{next(_SEQ)}"
                d.mkdir()
                if os.geteuid() == 0:
                    multiuser.make_traversable(d)
                root = _copy_root(src, d / "root", actor)
                lay = _layout(root)
                target = target_of(lay)
                if target is None or not target.exists():
                    shutil.rmtree(d, ignore_errors=True)
                    continue
                victim = _victim(d / "victim", root, actor)
                before = tree_state(victim)
                stop = d / "stop"
                swap_argv = [sys.executable if attacker is None
                             else multiuser.tool_python(attacker), "-c", _SWAPPER,
                             str(target), str(victim / ("sources" if "sources" in tname
                                                         else "")), str(stop)]
                if attacker is not None:
                    sw = multiuser.popen_as(attacker, swap_argv, stdout=subprocess.PIPE)
                else:
                    sw = subprocess.Popen(swap_argv, stdout=subprocess.PIPE, text=True)
                time.sleep(0.05)
                res: list[tuple[int, str, float]] = []
                rec_argv = _recorder_argv(actor, lay, traced, 20)
                rec = threading.Thread(target=lambda r=res, a=rec_argv: r.append(  # type: ignore[misc]
                    actor.run(a, 120)))
                rec.start()
                rc, err, _ = actor.cli(*_commands(lay, root)["prune"])
                rec.join()
                stop.touch()
                try:
                    swaps = int((sw.communicate(timeout=30)[0] or "0").strip() or 0)
                except (subprocess.TimeoutExpired, ValueError):
                    os.killpg(sw.pid, signal.SIGKILL) if attacker else sw.kill()
                    swaps = 0
                out.swaps += swaps
                out.race_runs += 1
                what = f"{actor.label} race {rname} {tname} #{i}"
                _check(out, what + " prune", victim, before, rc, err)
                r_rc, r_err, _ = res[0] if res else (0, "", 0.0)
                if r_rc != 0 or "Traceback" in r_err:
                    out.crashes.append(f"{what} recorder: rc {r_rc} {r_err[-200:]}")
                shutil.rmtree(d, ignore_errors=True)


# ---- figure (b): nothing hangs ---------------------------------------------------------------

SPECIAL_KINDS = ("fifo", "fifo-fed", "char-device", "socket")


@dataclass
class Hangs:
    runs: int = 0
    hangs: list[str] = field(default_factory=list)
    crashes: list[str] = field(default_factory=list)
    slowest_s: float = 0.0
    slowest: str = ""


def _placements(lay: Layout, root: Path) -> dict[str, Path]:
    out: dict[str, Path] = {}
    rank = lay.aot_rank()
    if rank is not None:
        out["AOT model"] = rank / "model"
        ms = sorted(rank.glob("vct-manifest.*.json"))
        if ms:
            out["manifest"] = ms[0]
        ind = sorted(p for p in (rank.parent / "inductor_cache").rglob("*") if p.is_file())
        if ind:
            out["inductor file"] = ind[0]
    prefix = lay.prefix()
    if prefix is not None:
        out["factors"] = prefix / "cache_key_factors.json"
        for n in ("computation_graph.py", "vllm_compile_cache.py", "transformed_code.py"):
            if (prefix / n).exists():
                out[n] = prefix / n
        ms = sorted(prefix.glob("vct-manifest.*.json"))
        if ms:
            out["backend manifest"] = ms[0]
    out["ledger"] = lay.state / "ledger" / f"{HOST}.jsonl"
    out["ledger (other host)"] = lay.state / "ledger" / "fifo-host.jsonl"
    src = lay.state / "sources"
    if src.is_dir():
        snaps = sorted(src.iterdir())
        if snaps:
            out["snapshot"] = snaps[0]
    infos = sorted((root / "modelinfos").glob("*.json")) if (root / "modelinfos").is_dir() \
        else []
    if infos:
        out["modelinfos"] = infos[0]
    out["entries.lock"] = lay.cc / ".vllm-cache-trash" / "locks" / "entries.lock"
    out["trash item"] = lay.cc / ".vllm-cache-trash" / "eeeeeeeeee.1.0"
    return out


@contextmanager
def _specials(paths: dict[str, Path], kind: str) -> Iterator[list[subprocess.Popen[bytes]]]:
    feeders: list[subprocess.Popen[bytes]] = []
    socks: list[socket.socket] = []
    try:
        for p in paths.values():
            p.parent.mkdir(parents=True, exist_ok=True)
            if os.path.lexists(p):
                p.unlink()
            if kind.startswith("fifo"):
                os.mkfifo(p, 0o666)
                if kind == "fifo-fed":
                    feeders.append(subprocess.Popen([sys.executable, "-c", _FEEDER, str(p)],
                                                    start_new_session=True))
            elif kind == "char-device":
                os.mknod(p, 0o666 | stat.S_IFCHR, os.makedev(1, 5))  # /dev/zero
            else:
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                short = f"/tmp/.vct-sock-{os.getpid()}-{len(socks)}"  # AF_UNIX: 108 bytes
                s.bind(short)
                os.rename(short, p)
                s.listen(1)
                socks.append(s)
            os.chmod(p, 0o666)
        yield feeders
    finally:
        for f in feeders:
            with contextlib.suppress(OSError):
                os.killpg(f.pid, signal.SIGKILL)
            f.wait()
        for s in socks:
            s.close()


def hangs(base: Path, actor: Actor, roots: list[tuple[str, Path]], out: Hangs,
          bisect: bool = True) -> None:
    kinds = SPECIAL_KINDS if os.geteuid() == 0 else ("fifo", "fifo-fed", "socket")
    traced = base / "traced_source.py"
    for rname, src in roots:
        for kind in kinds:
            probe = _layout(src)
            for cname in [*_commands(probe, src), "recorder"]:
                d = base / f"h{next(_SEQ)}"
                d.mkdir()
                if os.geteuid() == 0:
                    multiuser.make_traversable(d)
                root = _copy_root(src, d / "root", actor)
                lay = _layout(root)
                places = _placements(lay, root)
                found = _hang_run(actor, lay, root, traced, places, kind, cname, out,
                                  f"{actor.label} {rname} {kind} {cname}")
                if found and bisect:
                    for pname, p in places.items():
                        sub = base / f"h{next(_SEQ)}"
                        sub.mkdir()
                        r2 = _copy_root(src, sub / "root", actor)
                        l2 = _layout(r2)
                        p2 = {pname: r2 / p.relative_to(root)}
                        if _hang_run(actor, l2, r2, traced, p2, kind, cname, Hangs(),
                                     ""):
                            out.hangs.append(f"  narrowed: {kind} as {pname} hangs "
                                             f"{actor.label} {cname}")
                        shutil.rmtree(sub, ignore_errors=True)
                shutil.rmtree(d, ignore_errors=True)


def _hang_run(actor: Actor, lay: Layout, root: Path, traced: Path, places: dict[str, Path],
              kind: str, cname: str, out: Hangs, what: str) -> bool:
    with _specials(places, kind):
        if cname == "recorder":
            rc, err, secs = actor.run(_recorder_argv(actor, lay, traced, 1), HANG_S)
        else:
            rc, err, secs = actor.cli(*_commands(lay, root)[cname], timeout=HANG_S)
    out.runs += 1
    if secs > out.slowest_s:
        out.slowest_s, out.slowest = secs, what
    if rc == 124:
        out.hangs.append(f"{what}: no exit within {HANG_S:.0f} s")
        return True
    if rc == 3 or "Traceback" in err:
        out.crashes.append(f"{what}: rc {rc} {err.strip().splitlines()[-1:] or ''}")
    return False


# ---- main ------------------------------------------------------------------------------------

def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="only examples/sample_cache")
    ap.add_argument("--race-rounds", type=int, default=3)
    ap.add_argument("--only", choices=("planted", "races", "hangs"), action="append")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    parts = set(args.only or ("planted", "races", "hangs"))
    roots = _source_roots(args.quick)
    base = Path(tempfile.mkdtemp(prefix="vct-hostile-"))
    base.chmod(0o755)
    t0 = time.time()
    figures: dict[str, object] = {"roots": [n for n, _ in roots]}
    outside: dict[str, Outside] = {}
    hang: dict[str, Hangs] = {}
    try:
        (base / "traced_source.py").write_text("def forward(x):\n    return x + 1\n")
        (base / "traced_source.py").chmod(0o644)
        for actor, attacker in _actors(base):
            o = outside[actor.label] = Outside()
            if "planted" in parts:
                planted(base, actor, attacker, roots, o)
            if "races" in parts:
                races(base, actor, attacker, roots, args.race_rounds, o)
            if "hangs" in parts:
                hangs(base, actor, roots, hang.setdefault(actor.label, Hangs()))
    finally:
        subprocess.run(["chmod", "-R", "u+rwx", str(base)], check=False)
        shutil.rmtree(base, ignore_errors=True)
    figures["outside"] = {k: asdict(v) for k, v in outside.items()}
    figures["hangs"] = {k: asdict(v) for k, v in hang.items()}
    figures["seconds"] = round(time.time() - t0, 1)
    changed_total = sum(o.changed_files for o in outside.values())
    hang_total = sum(len([h for h in v.hangs if not h.startswith("  ")])
                     for v in hang.values())
    print(f"hostile roots ({', '.join(n for n, _ in roots)}; {figures['seconds']} s)")
    for label, o in outside.items():
        print(f"  {label:<9} outside-root: {o.runs} runs ({o.race_runs} raced, {o.swaps} "
              f"folder<->link swaps), files outside the root changed: {o.changed_files}")
        for c in o.changed_runs:
            print(f"      CHANGED {c}")
        for c in o.crashes:
            print(f"      crash   {c}")
    for label, h in hang.items():
        print(f"  {label:<9} special files: {h.runs} runs, hangs (> {HANG_S:.0f} s): "
              f"{len([x for x in h.hangs if not x.startswith('  ')])}, slowest "
              f"{h.slowest_s:.1f} s ({h.slowest})")
        for x in h.hangs:
            print(f"      HANG    {x}")
        for c in h.crashes:
            print(f"      crash   {c}")
    print(f"FIGURES: files outside the root changed: {changed_total}; hangs: {hang_total}")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1))
    return 1 if changed_total or hang_total else 0


if __name__ == "__main__":
    sys.exit(main())
