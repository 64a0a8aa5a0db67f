"""Moving a load-failed entry's files aside (issue 29, item 4), the fast parts: the switch,
the move (real files, no link followed, nothing removed), and how verify and ls show it. The
real vLLM starts are in tests/test_quarantine_realvllm.py."""

from __future__ import annotations

import json
import os
from pathlib import Path

from tests.conftest import run_cli
from vllm_cache_tools.recorder import guard, quarantine
from vllm_cache_tools.store.quarantine import quarantined

ENTRY = "00c085ba3e/rank_0_0/backbone"


def test_the_switch() -> None:
    env = "VLLM_CACHE_TOOLS_GUARD"
    assert not quarantine.allowed({})
    assert not quarantine.allowed({env: "warn"})
    assert quarantine.allowed({env: "warn,quarantine"})
    assert quarantine.allowed({env: " Quarantine "})
    assert quarantine.allowed({env: "strict"})
    # The guard's own mode is read from the same variable, beside the word.
    assert guard.mode({env: "warn,quarantine"}) == "warn"
    assert guard.mode({env: "strict+quarantine"}) == "strict"
    assert guard.mode({env: "quarantine"}) == "warn"


def _tree(tmp_path: Path) -> tuple[Path, Path]:
    cc = tmp_path / "root" / "torch_compile_cache"
    entry = cc / ENTRY
    entry.mkdir(parents=True)
    (entry / "artifact_0").write_bytes(b"cut" * 10)
    (entry / "vllm_compile_cache.py").write_text("{}\n")
    return cc, entry


def test_move_aside_keeps_the_bytes_and_says_why(tmp_path: Path) -> None:
    cc, entry = _tree(tmp_path)
    q = quarantine.move_aside(str(cc), str(entry), ["artifact_0", "missing"], tree="backend",
                              key="00c085ba3e", rank="rank_0_0", prefix="backbone",
                              reason="RuntimeError: Bytes object is corrupted")
    assert q is not None
    moved = Path(q)
    assert moved.parent == cc / ".vllm-cache-tools" / "quarantine"
    assert (moved / "artifact_0").read_bytes() == b"cut" * 10
    assert not (entry / "artifact_0").exists() and (entry / "vllm_compile_cache.py").exists()
    why = json.loads((moved / "why.json").read_text())
    assert why["files"] == ["artifact_0"] and why["from"] == ENTRY
    [found] = quarantined(cc)
    assert (found.key, found.tree, found.files, found.size) == (
        "00c085ba3e", "backend", ("artifact_0",), 30)
    assert found.reason.startswith("RuntimeError")


def test_nothing_to_move_makes_no_note_and_a_link_is_moved_as_a_link(tmp_path: Path) -> None:
    cc, entry = _tree(tmp_path)
    assert quarantine.move_aside(str(cc), str(entry), ["nope"], tree="backend", key="k",
                                 rank="rank_0_0", prefix="", reason="x") is None
    secret = tmp_path / "secret"
    secret.write_text("not the cache's")
    os.symlink(secret, entry / "artifact_1")
    q = quarantine.move_aside(str(cc), str(entry), ["artifact_1"], tree="backend", key="k",
                              rank="rank_0_0", prefix="", reason="x")
    assert q is not None and os.path.islink(Path(q) / "artifact_1")
    assert secret.read_text() == "not the cache's"
    # A folder outside the compile cache is refused.
    try:
        quarantine.move_aside(str(cc), str(tmp_path), ["secret"], tree="backend", key="k",
                              rank="r", prefix="", reason="x")
    except OSError:
        pass
    else:
        raise AssertionError("moved from outside the compile cache")
    assert secret.exists()


def test_verify_notes_and_ls_names_the_folder(tmp_path: Path) -> None:
    cc, entry = _tree(tmp_path)
    quarantine.move_aside(str(cc), str(entry), ["artifact_0"], tree="backend",
                          key="00c085ba3e", rank="rank_0_0", prefix="backbone",
                          reason="RuntimeError: Bytes object is corrupted")
    (cc / ".vllm-cache-tools" / "quarantine" / "planted").mkdir()  # no why.json: still shown
    r = run_cli("verify", "--root", str(cc.parent), "--json")
    assert "Traceback" not in r.stderr, r.stderr
    notes = [p for p in json.loads(r.stdout)["problems"] if p["kind"] == "quarantined"]
    assert len(notes) == 2
    assert "Bytes object is corrupted" in notes[0]["detail"]
    assert "no readable why.json" in notes[1]["detail"]
    r = run_cli("ls", "--root", str(cc.parent))
    assert "2 folder(s) of files the recorder moved aside" in r.stderr
    assert "Traceback" not in r.stderr


def test_only_a_fault_of_the_file_moves_it_and_each_move_has_its_own_folder() -> None:
    from vllm_cache_tools.recorder.quarantine import artifact_fault, folder_name

    class OutOfMemoryError(RuntimeError):  # torch's name for a device out of memory
        pass

    assert artifact_fault(RuntimeError("Bytes object is corrupted, checksum does not match"))
    assert artifact_fault(SyntaxError("unterminated string literal"))
    assert not artifact_fault(MemoryError())
    assert not artifact_fault(ImportError("No module named 'triton'"))
    assert not artifact_fault(OutOfMemoryError("CUDA out of memory"))
    names = {folder_name("backend", "86937bda5d", "rank_0_0", "backbone", now=0.0)
             for _ in range(50)}  # one second, one process: 50 failures, 50 folders
    assert len(names) == 50
