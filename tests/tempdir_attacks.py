"""Test support: the attacks of issue 23 items 1 and 2, played for real by a second local uid
on a folder everyone can write in (mode 1777, used as ``$TMPDIR`` and as the shared output
folder), against ``vllm-cache`` run as root or as another user. Shared by
tests/test_hostile_tempdirs.py (which asserts every count is 0) and
benchmarks/hostile_tempdirs.py (which prints them).

Each attack returns an :class:`Outcome`: how many names outside the intended folders changed
(a victim's folder, recorded exactly by :mod:`tests.victims`, and the attacker's own planted
folder), how many parts a plan put outside them, and whether the tool said what it skipped.
The runner is root (attacker ``vctother``) or ``vctother`` (attacker ``vctthird``).
Needs root (to make the users); ``fs.protected_symlinks`` is set to 0 around each attack
(:func:`symlinks_unprotected`) so the kernel does not hide what the tool itself would do."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from tests import multiuser
from tests.conftest import run_cli
from tests.victims import changed, make_victim, tree_state

REPO = Path(__file__).resolve().parent.parent
SAMPLE = REPO / "examples" / "sample_cache"
AOT = "b6a18428ab0d5ff42c7c72b8fabfec0bc1f47e3de967bdff6bb6da79a64fa078"
REAL_INDUCTOR = SAMPLE / "torch_compile_cache" / "torch_aot_compile" / AOT / "inductor_cache"
"""A real Inductor cache folder (written by torch 2.13 under vLLM): fxgraph code folders,
aotautograd, locks."""
SYSCTL = Path("/proc/sys/fs/protected_symlinks")
PRUNE = ("prune", "--cache", "inductor", "--older-than", "1h", "--grace", "0", "--yes")


@contextlib.contextmanager
def symlinks_unprotected() -> Iterator[None]:
    """``fs.protected_symlinks=0`` while the block runs, restored after (root only)."""
    old = SYSCTL.read_text().strip()
    SYSCTL.write_text("0\n")
    try:
        yield
    finally:
        SYSCTL.write_text(old + "\n")


@dataclass(frozen=True)
class Outcome:
    changed: int
    """Names changed outside the intended folders (victim + the attacker's own folder)."""
    planned_outside: int
    """Parts a plan put outside the runner's real cache folders."""
    said: bool
    """The tool named the path it skipped or refused, with the reason."""
    detail: str = ""


@dataclass
class Scene:
    runner: multiuser.User | None
    """None: root."""
    attacker: multiuser.User
    shared: Path
    """Mode 1777, root-owned: ``$TMPDIR`` and the folder outputs are written to."""
    victim: Path
    """Owned by the runner: following a planted link has the rights to damage it."""
    home: Path

    @property
    def runner_name(self) -> str:
        return self.runner.name if self.runner is not None else "root"

    def env(self) -> dict[str, str]:
        return {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(self.home),
                "TMPDIR": str(self.shared), "VLLM_CACHE_ROOT": str(self.home / "vllm"),
                "VLLM_CACHE_TOOLS_PROBE_STANDBY": "0"}

    def run(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        if self.runner is None:
            return run_cli(*args, env=self.env(), inherit=False)
        return multiuser.run_as(self.runner, multiuser.vllm_cache_argv(*args), env=self.env(),
                                timeout=timeout)

    def plant(self, argv: Sequence[str]) -> None:
        r = multiuser.run_as(self.attacker, list(argv), env={"TMPDIR": str(self.shared)})
        assert r.returncode == 0, (argv, r.stderr)

    def link(self, name: str, target: Path | str) -> Path:
        self.plant(["ln", "-s", str(target), str(self.shared / name)])
        return self.shared / name


def make_scene(as_user: bool) -> Scene:
    _, users = multiuser.shared_users(2)
    runner, attacker = (users[0], users[1]) if as_user else (None, users[0])
    shared = Path(f"/tmp/vct-tempdirs-{secrets.token_hex(4)}")
    shared.mkdir(mode=0o1777)
    os.chmod(shared, 0o1777)
    if runner is None:
        base = shared.with_name(shared.name + "-root")
        base.mkdir(mode=0o700)
        home = base / "home"
        home.mkdir()
        victim = make_victim(base / "victim")
    else:
        home = multiuser.user_home(runner) / f"h-{shared.name}"
        home.mkdir()
        victim = make_victim(home / "victim")
        multiuser.chown_tree(home, runner.uid)
    _old(victim)
    return Scene(runner, attacker, shared, victim, home)


def drop_scene(s: Scene) -> None:
    for p in (s.shared, s.shared.with_name(s.shared.name + "-root"), s.home):
        shutil.rmtree(p, ignore_errors=True)


def _old(d: Path, days: float = 40) -> None:
    t = time.time() - days * 86400
    for dirpath, dirs, files in os.walk(d):
        for n in (*dirs, *files):
            os.utime(os.path.join(dirpath, n), (t, t), follow_symlinks=False)
    os.utime(d, (t, t))


def snapshot(d: Path) -> dict[str, tuple[object, ...]]:
    """:func:`tests.victims.tree_state` of ``d``, then every atime put back to its mtime:
    reading the files for their hashes moves atimes, and prune takes the newer of mtime and
    atime as the last use (an unread victim would otherwise look freshly used)."""
    state = tree_state(d)
    for dirpath, dirs, files in os.walk(d):
        for n in (*dirs, *files):
            p = os.path.join(dirpath, n)
            m = os.lstat(p).st_mtime_ns
            os.utime(p, ns=(m, m), follow_symlinks=False)
    return state


def _real_inductor(s: Scene, name: str, owner: multiuser.User | None) -> Path:
    """A copy of a real Inductor folder at ``shared/name``, a month old, owned by ``owner``
    (None: root), made 0755 as torch's ``os.makedirs`` under umask 022 makes it."""
    d = s.shared / name
    shutil.copytree(REAL_INDUCTOR, d, symlinks=True)
    os.chmod(d, 0o755)
    _old(d)
    if owner is not None:
        multiuser.chown_tree(d, owner.uid)
    return d


def _said(r: subprocess.CompletedProcess[str], *needles: str) -> bool:
    text = r.stdout + r.stderr
    return all(n in text for n in needles) and "Traceback" not in text


def _planned(r: subprocess.CompletedProcess[str]) -> list[str]:
    try:
        doc = json.loads(r.stdout)
    except ValueError:
        return []
    return [p["path"] for p in doc.get("planned") or []]


def _outside(paths: list[str], allowed: Sequence[Path]) -> int:
    return sum(not any(p == str(a) or p.startswith(str(a) + "/") for a in allowed)
               for p in paths)


# ---- item 1: cache folders found by name in the shared folder ------------------------------

def link_named_for_runner(s: Scene) -> Outcome:
    """torchinductor_<runner> planted as a link to the runner's victim folder; prune with and
    without --force / --all-users."""
    name = f"torchinductor_{s.runner_name}"
    s.link(name, s.victim)
    before = snapshot(s.victim)
    said = True
    planned = 0
    for extra in ((), ("--force",), ("--all-users",)):
        r = s.run(*PRUNE, "--json", *extra)
        planned += _outside(_planned(r), [])
        said &= r.returncode == 0 and _said(r, name, "a symlink")
    return Outcome(len(changed(before, tree_state(s.victim))), planned, said)


def link_named_for_another_user(s: Scene) -> Outcome:
    """torchinductor_<someone else> as a link to the runner's files (a home, a project)
    with --all-users: the other user's home must not be planned."""
    other = "vctthird" if s.runner is None else "root"
    name = f"torchinductor_{other}"
    s.link(name, s.victim)
    before = snapshot(s.victim)
    r = s.run(*PRUNE, "--all-users", "--json")
    return Outcome(len(changed(before, tree_state(s.victim))), _outside(_planned(r), []),
                   r.returncode == 0 and _said(r, name, "a symlink"))


def link_to_system_folder(s: Scene) -> Outcome:
    """A dry run with the link at /usr/lib (was: 403 MB planned)."""
    s.link(f"torchinductor_{s.runner_name}", "/usr/lib")
    r = s.run("prune", "--cache", "inductor", "--older-than", "1d", "--grace", "0",
              "--all-users", "--dry-run", "--json")
    return Outcome(0, _outside(_planned(r), []), r.returncode == 0 and _said(r, "/usr/lib"))


def folder_of_the_attacker(s: Scene) -> Outcome:
    """The attacker's own real folder under the runner's name (old files, and a link to the
    victim inside): not the runner's cache, so nothing in it is touched."""
    name = f"torchinductor_{s.runner_name}"
    d = _real_inductor(s, name, s.attacker)
    multiuser.run_as(s.attacker, ["ln", "-s", str(s.victim), str(d / "zz")])
    before_v, before_d = snapshot(s.victim), snapshot(d)
    r = s.run(*PRUNE, "--all-users", "--json")
    n = len(changed(before_v, tree_state(s.victim))) + len(changed(before_d, tree_state(d)))
    return Outcome(n, _outside(_planned(r), []),
                   r.returncode == 0 and _said(r, name, f"owned by {s.attacker.name}"))


def writable_folder_named_for_runner(s: Scene) -> Outcome:
    """The runner's real Inductor folder, but writable by everyone (anyone could have put
    names in it): skipped and said."""
    name = f"torchinductor_{s.runner_name}"
    d = _real_inductor(s, name, s.runner)
    os.chmod(d, 0o777)
    before = snapshot(d)
    r = s.run(*PRUNE, "--json")
    return Outcome(len(changed(before, tree_state(d))), _outside(_planned(r), []),
                   r.returncode == 0 and _said(r, name, "writable by everyone"))


_SWAP_SCRIPT = r"""
import os, sys
from vllm_cache_tools.maintain.cache_prune import (CachePolicies, execute_cache_plan,
                                                   plan_cache_kind_prune)
from vllm_cache_tools.store.caches.kinds import locate_caches
plan = plan_cache_kind_prune(locate_caches(None, kinds=("inductor",)),
                             CachePolicies(older_than_s=3600), vllm_root=None, grace_s=0,
                             all_users=True)
print(len(plan.parts), flush=True)
sys.stdin.readline()
res = execute_cache_plan(plan)
print(len(res.deleted), "; ".join(s.reason for s in res.skipped), flush=True)
"""


def swapped_after_the_plan(s: Scene) -> Outcome:
    """The attacker's folder passes the check and is planned (--all-users); before removal
    the attacker renames it away and puts a link to the victim in its place."""
    name = f"torchinductor_{s.attacker.name}"
    d = _real_inductor(s, name, s.attacker)
    before = snapshot(s.victim)
    argv = [multiuser.tool_python() if s.runner else sys.executable, "-c", _SWAP_SCRIPT]
    if s.runner is None:
        p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=s.env())
    else:
        p = multiuser.popen_as(s.runner, argv, env=s.env(), stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert p.stdout is not None and p.stdin is not None
    planned = int(p.stdout.readline() or 0)
    s.plant(["mv", str(d), str(d) + ".away"])
    s.link(name, s.victim)
    out, err = p.communicate("go\n", timeout=120)
    n = len(changed(before, tree_state(s.victim)))
    # Root planned the attacker's parts; as a user, its files are not the runner's to plan.
    said = "not followed" in out if planned else p.returncode == 0
    return Outcome(n, 0, said and "Traceback" not in err, out.strip())


# ---- item 2: files written at a path the user names ----------------------------------------

def _writer(s: Scene, opt_args: Callable[[Path], list[str]], out_name: str) -> Outcome:
    """The attacker's link at the output name: refused without --force (one line naming
    it); with --force the name is replaced (root) or the sticky folder refuses (a user),
    and the link's target is never written either way."""
    link = s.link(out_name, s.victim / "notes")
    before = snapshot(s.victim)
    r = s.run(*opt_args(link))
    said = r.returncode == 2 and _said(r, "exists (not replaced; --force replaces it)") and \
        r.stderr.count("\n") == 1
    r2 = s.run(*opt_args(link), "--force")
    said = said and "Traceback" not in r2.stderr
    return Outcome(len(changed(before, tree_state(s.victim))), 0, said,
                   f"{r.stderr.strip()} | --force: rc {r2.returncode} {r2.stderr.strip()}"[-400:])


def warm_log_link(s: Scene) -> Outcome:
    """warm --log F where F is the attacker's link to the runner's file (vLLM is not
    installed for /usr/bin/python3: warm still opens the log first)."""
    return _writer(s, lambda p: ["warm", "--python", "/usr/bin/python3", "--log", str(p),
                                 "--", "/m"], "warm.log")


def pack_output_link(s: Scene) -> Outcome:
    return _writer(s, lambda p: ["pack", "--root", str(SAMPLE), AOT[:8], "-o", str(p)],
                   "b.tar.zst")


def host_profile_output_link(s: Scene) -> Outcome:
    return _writer(s, lambda p: ["host-profile", "-o", str(p)], "profile.json")


ATTACKS: dict[str, Callable[[Scene], Outcome]] = {
    "inductor link named for you": link_named_for_runner,
    "inductor link named for another user": link_named_for_another_user,
    "inductor link to /usr/lib (dry run)": link_to_system_folder,
    "attacker's folder under your name": folder_of_the_attacker,
    "your folder, writable by everyone": writable_folder_named_for_runner,
    "folder swapped for a link after the plan": swapped_after_the_plan,
    "warm --log through a link": warm_log_link,
    "pack -o through a link": pack_output_link,
    "host-profile -o through a link": host_profile_output_link,
}


def play(name: str, as_user: bool) -> Outcome:
    with symlinks_unprotected():
        s = make_scene(as_user)
        try:
            return ATTACKS[name](s)
        finally:
            drop_scene(s)
