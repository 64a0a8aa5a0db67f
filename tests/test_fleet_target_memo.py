"""The target environment's facts are kept while nothing they were read from changed
(fleet/target_memo.py): a repeated unpack or pull decision starts no child process, and an
edit, an install or a removal in that environment is seen at once."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from vllm_cache_tools.fleet.here import target


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A bare venv whose site-packages holds a torch with only ``version.py`` (what the
    probe reads; nothing is imported)."""
    d = tmp_path_factory.mktemp("tenv") / "v"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(d)], check=True)
    site = next((d / "lib").glob("python3*/site-packages"))
    (site / "torch").mkdir()
    (site / "torch" / "__init__.py").write_text("raise ImportError('not imported')\n")
    (site / "torch" / "version.py").write_text("__version__ = '2.13.0+cpu'\ncuda = None\n")
    return d


def _site(venv: Path) -> Path:
    return next((venv / "lib").glob("python3*/site-packages"))


def _count_children(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    calls: list[object] = []
    real = subprocess.run

    def run(*a: object, **k: object) -> object:
        calls.append(a)
        return real(*a, **k)  # type: ignore[call-overload]

    monkeypatch.setattr(subprocess, "run", run)
    return calls


def test_memo_hit_and_invalidation(venv: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    py = str(venv / "bin" / "python")
    calls = _count_children(monkeypatch)
    first = target(py)
    assert first.env.torch == "2.13.0+cpu" and first.env.triton is None
    assert first.vllm_origin is None and len(calls) == 1
    again = target(py)
    assert again == first and len(calls) == 1  # from the memo: no child

    # An edit in place of a file the answer was read from.
    vf = _site(venv) / "torch" / "version.py"
    vf.write_text("__version__ = '2.14.0+cpu'\ncuda = None\n")
    assert target(py).env.torch == "2.14.0+cpu" and len(calls) == 2

    # A package installed beside it (a new folder in site-packages).
    dist = _site(venv) / "triton-3.9.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: triton\nVersion: 3.9.0\n")
    assert target(py).env.triton == "3.9.0" and len(calls) == 3
    vllm = _site(venv) / "vllm"
    vllm.mkdir()
    (vllm / "__init__.py").write_text("")
    assert target(py).vllm_origin == str(vllm / "__init__.py") and len(calls) == 4
    assert target(py).env.triton == "3.9.0" and len(calls) == 4

    # A removal.
    (dist / "METADATA").unlink()
    dist.rmdir()
    assert target(py).env.triton is None and len(calls) == 5


def test_memo_off(venv: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    py = str(venv / "bin" / "python")
    monkeypatch.setenv("VLLM_CACHE_TOOLS_PROBE_MEMO", "0")
    calls = _count_children(monkeypatch)
    target(py)
    target(py)
    assert len(calls) == 2


def test_memo_not_followed_when_planted(venv: Path, monkeypatch: pytest.MonkeyPatch,
                                        tmp_path: Path) -> None:
    """A memo file replaced by a symlink (or garbage) is ignored, never trusted."""
    from vllm_cache_tools.fleet import target_memo
    from vllm_cache_tools.store.locate import user_cache_dir

    py = str(venv / "bin" / "python")
    target(py)
    d = user_cache_dir() / target_memo.DIRNAME
    (memo,) = list(d.iterdir())
    fake = tmp_path / "fake.json"
    fake.write_bytes(memo.read_bytes().replace(b"2.1", b"9.9"))
    memo.unlink()
    os.symlink(fake, memo)
    calls = _count_children(monkeypatch)
    assert target(py).env.torch.startswith("2.1")  # type: ignore[union-attr]
    assert len(calls) == 1
    memo.unlink()
    memo.write_text("{not json")
    target(py)
    assert len(calls) == 2
