"""predict's stage line: on a terminal's stderr only (not piped, not CI, not --json), erased
before anything else is printed. A stand-in interpreter plays the probe (no vLLM needed)."""

from __future__ import annotations

import io
import os
import pty
import subprocess
import sys
import time
from pathlib import Path

import pytest

from vllm_cache_tools.cli.stageline import StageLine, wanted

ERASE = "\r\x1b[2K"


def _fake_probe(tmp_path: Path) -> str:
    """Says two stages on stderr, then answers with an error (predict then fails cleanly)."""
    exe = tmp_path / "python"
    exe.write_text("#!/bin/sh\ncat >/dev/null\n"
                   "echo 'VCT_STAGE importing vLLM and torch' >&2\nsleep 0.4\n"
                   "echo 'VCT_STAGE vLLM building its config' >&2\nsleep 0.4\n"
                   "echo '{\"error\": \"stand-in\", \"error_kind\": \"probe\"}' >/dev/fd/$3\n")
    exe.chmod(0o755)
    return str(exe)


def _terminal_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "GITHUB_ACTIONS",
                                                             "GITLAB_CI", "BUILDKITE",
                                                             "JENKINS_URL", "TF_BUILD")}
    return {**env, "TERM": "xterm"}


def _predict_on_a_terminal(tmp_path: Path, *extra: str, env: dict[str, str] | None = None
                           ) -> tuple[int, str, str]:
    """Run ``vllm-cache predict`` with stderr on a pseudo-terminal: (status, stdout, what
    the terminal got)."""
    exe = Path(sys.executable).parent / "vllm-cache"
    main, sub = pty.openpty()
    proc = subprocess.Popen([str(exe), "predict", "--root", str(tmp_path / "root"),
                             "--python", _fake_probe(tmp_path), *extra, "--", "m"],
                            stdout=subprocess.PIPE, stderr=sub, stdin=subprocess.DEVNULL,
                            env=env or _terminal_env(), text=True)
    os.close(sub)
    got = b""
    while True:
        try:
            chunk = os.read(main, 4096)
        except OSError:  # the other end closed
            break
        if not chunk:
            break
        got += chunk
    out = proc.stdout.read() if proc.stdout else ""
    os.close(main)
    return proc.wait(timeout=60), out, got.decode("utf-8", "replace")


def test_stage_line_on_a_terminal_erased_before_the_message(tmp_path: Path) -> None:
    rc, out, term = _predict_on_a_terminal(tmp_path)
    assert rc == 2 and out == ""
    assert "predict: importing vLLM and torch" in term
    assert "predict: vLLM building its config" in term
    after = term.rpartition(ERASE)[2]
    assert "the vLLM probe failed: stand-in" in after and "predict:" not in after
    assert "VCT_STAGE" not in term


def test_no_stage_line_with_json_in_ci_or_piped(tmp_path: Path) -> None:
    rc, _, term = _predict_on_a_terminal(tmp_path, "--json")
    assert rc == 2 and "predict:" not in term and ERASE not in term
    rc, _, term = _predict_on_a_terminal(tmp_path, env={**_terminal_env(), "CI": "true"})
    assert rc == 2 and "predict:" not in term and ERASE not in term
    exe = Path(sys.executable).parent / "vllm-cache"
    piped = subprocess.run([str(exe), "predict", "--root", str(tmp_path / "root"), "--python",
                            _fake_probe(tmp_path), "--", "m"], capture_output=True, text=True,
                           env=_terminal_env(), timeout=60)
    assert piped.returncode == 2
    assert "\r" not in piped.stderr and "\x1b" not in piped.stderr
    assert "predict:" not in piped.stderr and "VCT_STAGE" not in piped.stderr
    assert "the vLLM probe failed: stand-in" in piped.stderr


def test_wanted_and_disabled_line() -> None:
    assert not wanted(io.StringIO(), {})
    main, sub = pty.openpty()
    try:
        with os.fdopen(sub, "w", closefd=False) as tty:
            assert wanted(tty, {"TERM": "xterm"})
            assert not wanted(tty, {"TERM": "dumb"})
            assert not wanted(tty, {"CI": "1"})
            assert wanted(tty, {"CI": "false"})
    finally:
        os.close(main)
        os.close(sub)
    buf = io.StringIO()
    with StageLine(stream=buf) as show:  # not a terminal: nothing, whatever it is told
        show("reading the cache")
        time.sleep(0.15)
    assert buf.getvalue() == ""


def test_line_fits_the_terminal_and_is_erased(monkeypatch: pytest.MonkeyPatch) -> None:
    buf = io.StringIO()
    line = StageLine("predict: ", stream=buf, enabled=True, interval=0.02)
    monkeypatch.setattr(line, "_width", lambda: 30)
    with line as show:
        show("a stage with a rather long description that would wrap")
        time.sleep(0.1)
    text = buf.getvalue()
    assert text.endswith(ERASE)
    drawn = [d for d in text.split(ERASE) if d]
    assert drawn and all(len(d) <= 29 for d in drawn)
    assert drawn[0].startswith(tuple(line.frames))


def test_probe_stages_reach_progress_and_odd_bytes_do_not_stall(tmp_path: Path) -> None:
    from vllm_cache_tools.live.runner import run_probe

    exe = tmp_path / "python"
    exe.write_text("#!/bin/sh\ncat >/dev/null\n"
                   "echo 'VCT_STAGE importing vLLM and torch' >&2\n"
                   "printf 'a log line that is not UTF-8: \\377\\376\\n' >&2\n"
                   "echo '{\"vllm_version\": \"0\"}' >/dev/fd/$3\n")
    exe.chmod(0o755)
    stages: list[str] = []
    r = run_probe(["m"], {}, str(exe), "llm", memo=False, standby=False,
                  progress=stages.append)
    assert r.data == {"vllm_version": "0"} and r.served_by == "probe"
    assert stages == ["starting the vLLM probe", "importing vLLM and torch"]


def test_stage_relay_overlay_and_retarget() -> None:
    """A probe stage said under the store read's overlay, or before the listener took the
    run, is shown once the overlay ends / at the handover (CI once saw it hidden)."""
    from vllm_cache_tools.live.runner import StageRelay

    seen: list[str] = []
    relay = StageRelay(seen.append)
    relay.overlay("reading the cache")
    relay("importing vLLM and torch")
    assert seen == ["reading the cache"]
    relay.overlay(None)
    assert seen[-1] == "importing vLLM and torch"
    early = StageRelay(None)
    early("vLLM building its config")
    later: list[str] = []
    early.retarget(later.append)
    early("done")
    assert later == ["vLLM building its config", "done"]
