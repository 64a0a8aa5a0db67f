"""Test support: act as a second local user on a group-shared cache root (needs root).

What a shared root looks like in real use: one group (``vctshared``), several users in it
(``vctother``, ``vctthird``), a copy of a real cache whose folders are group-owned,
group-writable and setgid, and whose files keep the modes their writer gave them (torch writes
AOT ``model`` files 0600, so the group cannot read those).

Running this package's CLI as another uid: the test venv (``/work/main/.nox/tests``) is a
virtualenv whose interpreter lives in ``/root/.pyenv`` (``/root`` is 0700), so another uid cannot
execute it. Rather than opening up root's home, :func:`tool_python` makes (once per machine,
cached under /tmp, rebuilt when stale) a tiny venv on the system Python with the same
major.minor version, whose only content is a ``.pth`` line adding the test venv's
site-packages (world-readable under /work/main): the other user then imports exactly the code
and dependencies the tests use. If no system Python of the same version exists it falls back
to ``pip install -e <repo>`` into that venv (offline wheels in /opt/wheels). Every candidate is
proven by importing the CLI as the other user, not guessed from modes.

Usage::

    require_root()
    group = shared_group()
    other = other_user()
    root = make_shared_root(Path("examples/sample_cache"), tmp_path / "shared", group)
    r = run_as(other, vllm_cache_argv("ls", "--root", str(root)))
"""

from __future__ import annotations

import contextlib
import fcntl
import grp
import hashlib
import os
import pwd
import shutil
import stat
import subprocess
import sys
import sysconfig
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

SHARED_GROUP = "vctshared"
OTHER_USER = "vctother"
THIRD_USER = "vctthird"

# Where per-user homes and the shim venv live: /tmp is world-traversable; everything the tool
# itself owns is root-owned and not writable by the test users.
_HOMES = Path("/tmp/vct-multiuser-homes")
_SHIM_BASE = Path("/tmp/vct-multiuser-python")


@dataclass(frozen=True)
class Group:
    name: str
    gid: int


@dataclass(frozen=True)
class User:
    name: str
    uid: int
    gid: int


def require_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to create a second uid and a shared group")


def _run_admin(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=60, check=False)


@contextlib.contextmanager
def _locked(name: str):  # type: ignore[no-untyped-def]
    """Serialize user/group creation and the venv build across concurrent test processes."""
    lock = Path(f"/tmp/.vct-multiuser-{name}.lock")
    fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def shared_group(name: str = SHARED_GROUP) -> Group:
    """The shared group, created if missing (idempotent, safe under concurrent callers)."""
    require_root()
    try:
        return Group(name, grp.getgrnam(name).gr_gid)
    except KeyError:
        pass
    with _locked("accounts"):
        try:
            return Group(name, grp.getgrnam(name).gr_gid)
        except KeyError:
            r = _run_admin(["groupadd", name])
            if r.returncode not in (0, 9):  # 9: already exists
                raise RuntimeError(f"groupadd {name} failed: {r.stderr.strip()}") from None
        return Group(name, grp.getgrnam(name).gr_gid)


def make_user(name: str, group: Group | None = None) -> User:
    """A local user (own primary group, member of ``group``, no home, no login shell)."""
    require_root()
    group = group or shared_group()
    with _locked("accounts"):
        try:
            pw = pwd.getpwnam(name)
        except KeyError:
            r = _run_admin(["useradd", "--no-create-home", "--user-group",
                            "--groups", group.name, "--shell", "/usr/sbin/nologin",
                            "--home-dir", str(_HOMES / name), name])
            if r.returncode not in (0, 9):
                raise RuntimeError(f"useradd {name} failed: {r.stderr.strip()}") from None
            pw = pwd.getpwnam(name)
        if group.gid not in os.getgrouplist(name, pw.pw_gid):
            r = _run_admin(["usermod", "--append", "--groups", group.name, name])
            if r.returncode != 0:
                raise RuntimeError(f"usermod {name} failed: {r.stderr.strip()}")
    return User(name, pw.pw_uid, pw.pw_gid)


def other_user(group: Group | None = None) -> User:
    return make_user(OTHER_USER, group)


def third_user(group: Group | None = None) -> User:
    return make_user(THIRD_USER, group)


def shared_users(n: int = 1) -> tuple[Group, list[User]]:
    """The shared group and ``n`` (1 or 2) test users in it: vctother, then vctthird. Skips the
    calling test where this is not root or the accounts cannot be made."""
    require_root()
    try:
        group = shared_group()
        return group, [make(group) for make in (other_user, third_user)[:n]]
    except RuntimeError as exc:
        pytest.skip(f"cannot make the test users: {exc}")


def chown_tree(path: Path, uid: int) -> None:
    """``path`` and everything below it owned by ``uid`` (links not followed, group kept)."""
    for d, dirs, files in os.walk(path):
        for n in [*dirs, *files]:
            os.lchown(os.path.join(d, n), uid, -1)
    os.lchown(path, uid, -1)


def make_traversable(path: Path) -> None:
    """Give "others" search (x) permission on ``path`` and each parent that lacks it. Never
    read or write: the other user can reach a named path, not list root's folders."""
    for p in [path, *path.parents]:
        st = p.stat()
        if stat.S_ISDIR(st.st_mode) and not st.st_mode & stat.S_IXOTH:
            os.chmod(p, stat.S_IMODE(st.st_mode) | stat.S_IXOTH)


def make_shared_root(src: Path, dst: Path, group: Group) -> Path:
    """A group-shared copy of a real cache root at ``dst`` (which must not exist).

    Folders: group ``group``, ``g+rwxs`` (setgid, so new files inherit the group). Files: group
    ``group``, modes kept as written (a 0600 ``model`` stays unreadable to the group). Symlinks
    are copied as links and left alone."""
    require_root()
    shutil.copytree(src, dst, symlinks=True, copy_function=shutil.copy2)
    for dirpath, dirnames, filenames in os.walk(dst):
        for name in [*dirnames, *filenames]:
            os.lchown(os.path.join(dirpath, name), -1, group.gid)
        for name in dirnames:
            p = os.path.join(dirpath, name)
            if not os.path.islink(p):
                os.chmod(p, stat.S_IMODE(os.lstat(p).st_mode) | 0o2070)
    os.lchown(dst, -1, group.gid)
    os.chmod(dst, stat.S_IMODE(os.lstat(dst).st_mode) | 0o2070)
    make_traversable(dst.parent)
    return dst


def user_home(user: User) -> Path:
    """A private home for ``user`` under /tmp (owned by it, 0700), recreated if tampered with."""
    _HOMES.mkdir(mode=0o755, exist_ok=True)
    os.chmod(_HOMES, 0o755)
    home = _HOMES / user.name
    st = home.lstat() if os.path.lexists(home) else None
    if st is None or not stat.S_ISDIR(st.st_mode) or st.st_uid != user.uid:
        if st is not None:
            if stat.S_ISDIR(st.st_mode):
                shutil.rmtree(home)
            else:
                home.unlink()
        home.mkdir(mode=0o700)
        os.chown(home, user.uid, user.gid)
    return home


def _user_env(user: User, env: Mapping[str, str] | None) -> dict[str, str]:
    """A clean environment for ``user``: never root's XDG dirs (pytest's tmp folders are 0700
    and root's), a home of its own. ``env`` entries override."""
    home = user_home(user)
    base = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": str(home),
        "USER": user.name,
        "LOGNAME": user.name,
        "LANG": os.environ.get("LANG", "C.UTF-8"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "XDG_STATE_HOME": str(home / ".local" / "state"),
        "VLLM_CACHE_TOOLS_PROBE_STANDBY": "0",
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    base.update(env or {})
    return base


def run_as(user: User, argv: Sequence[str], env: Mapping[str, str] | None = None,
           cwd: Path | str | None = None, timeout: float = 120,
           umask: int = 0o002, input: str | None = None,
           ) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` as ``user`` (its uid, primary gid and every supplementary group it has,
    the shared group included), with a clean environment (see :func:`_user_env`) and the
    umask a group-sharing user would set. Output is captured as text; never raises on a
    non-zero exit (raises subprocess.TimeoutExpired past ``timeout``)."""
    require_root()
    groups = [g for g in os.getgrouplist(user.name, user.gid) if g != user.gid]
    return subprocess.run(
        list(argv), user=user.uid, group=user.gid, extra_groups=groups, umask=umask,
        env=_user_env(user, env), cwd=str(cwd) if cwd is not None else str(user_home(user)),
        capture_output=True, text=True, timeout=timeout, input=input, check=False)


def popen_as(user: User, argv: Sequence[str], env: Mapping[str, str] | None = None,
             umask: int = 0o002, **kwargs: object) -> subprocess.Popen[str]:
    """:func:`run_as` for a background process (a racing attacker): same uid, groups and
    clean environment; in its own session so the caller can kill its whole group."""
    require_root()
    groups = [g for g in os.getgrouplist(user.name, user.gid) if g != user.gid]
    return subprocess.Popen(  # type: ignore[call-overload, no-any-return]
        list(argv), user=user.uid, group=user.gid, extra_groups=groups, umask=umask,
        env=_user_env(user, env), cwd=str(user_home(user)), text=True,
        start_new_session=True, **kwargs)


# ---- the CLI, runnable by another uid -------------------------------------------------------

_CLI_CODE = ("import sys; from vllm_cache_tools.cli import main; "
             "sys.argv[0] = 'vllm-cache'; sys.exit(main())")
_PROBE_CODE = "import vllm_cache_tools.cli, vllm_cache_tools.recorder"
_tool_python: str | None = None


def _works_for(python: str, user: User) -> bool:
    try:
        r = run_as(user, [python, "-c", _PROBE_CODE], timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return r.returncode == 0


def _site_packages() -> Path:
    return Path(sysconfig.get_paths()["purelib"])


def _shim_venv() -> Path:
    """The shim venv for this interpreter's site-packages (see the module docstring)."""
    site = _site_packages()
    tag = hashlib.sha256(f"{site}|{sys.version_info[:2]}".encode()).hexdigest()[:12]
    venv = _SHIM_BASE / tag
    python = venv / "bin" / "python"
    with _locked("python"):
        if python.exists():
            return venv
        _SHIM_BASE.mkdir(mode=0o755, exist_ok=True)
        os.chmod(_SHIM_BASE, 0o755)
        tmp = _SHIM_BASE / f".{tag}.{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        base = shutil.which(f"python{sys.version_info[0]}.{sys.version_info[1]}",
                            path="/usr/local/bin:/usr/bin:/bin")
        if base is not None:
            subprocess.run([base, "-m", "venv", "--without-pip", str(tmp)], check=True,
                           capture_output=True, timeout=120)
            tmp_site = next((tmp / "lib").glob("python3*/site-packages"))
            # addsitedir (not a bare path line) so the test venv's own .pth files, the
            # editable install's finder among them, are processed too.
            (tmp_site / "vct_shim.pth").write_text(
                f"import site; site.addsitedir({str(site)!r})\n")
        else:
            base = shutil.which("python3", path="/usr/local/bin:/usr/bin:/bin")
            if base is None:
                raise RuntimeError("no system python to build a venv for other users")
            subprocess.run([base, "-m", "venv", str(tmp)], check=True, capture_output=True,
                           timeout=300)
            subprocess.run([str(tmp / "bin" / "python"), "-m", "pip", "install", "-q",
                            "-e", str(REPO)], check=True, capture_output=True, timeout=600)
        subprocess.run(["chmod", "-R", "go-w,a+rX", str(tmp)], check=True)
        os.rename(tmp, venv)
    return venv


def tool_python(user: User | None = None) -> str:
    """A Python interpreter that ``user`` (default: :func:`other_user`) can execute and that
    imports this checkout's ``vllm_cache_tools`` with the test venv's dependencies."""
    global _tool_python
    if _tool_python is not None:
        return _tool_python
    user = user or other_user()
    make_traversable(REPO)
    candidates = [sys.executable, str(_shim_venv() / "bin" / "python")]
    for python in candidates:
        if _works_for(python, user):
            _tool_python = python
            return python
    # The cached shim may be stale (the test venv moved or was rebuilt): rebuild once.
    shutil.rmtree(_shim_venv(), ignore_errors=True)
    python = str(_shim_venv() / "bin" / "python")
    if _works_for(python, user):
        _tool_python = python
        return python
    raise RuntimeError(f"no Python that {user.name} can run imports vllm_cache_tools")


def vllm_cache_argv(*args: str, user: User | None = None) -> list[str]:
    """argv running ``vllm-cache ARGS`` with :func:`tool_python` (give it to :func:`run_as`)."""
    return [tool_python(user), "-c", _CLI_CODE, *args]


def python_argv(code: str, *args: str, user: User | None = None) -> list[str]:
    """argv running ``python -c CODE ARGS`` with :func:`tool_python` (for recorder writers)."""
    return [tool_python(user), "-c", code, *args]
