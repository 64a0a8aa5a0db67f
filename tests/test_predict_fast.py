"""``predict`` through the one CLI layer (cli/coercion.py) starts the vLLM probe before it
imports the rest (live/runner.py ``prestart``): the keywords, help, errors and exit codes are
those of typer's own conversion, and the early probe run must be the one predict uses (never a
second one). The prediction itself is tested through the CLI in test_predict.py."""

from __future__ import annotations

from typing import Any

import pytest

from tests.cli_layer_support import layer_checks
from vllm_cache_tools.cli.predict_run import run_predict
from vllm_cache_tools.live import runner

SERVE = ["--", "/models/m", "--max-model-len", "128", "-cc", '{"mode": 3}']
PLAIN = [
    SERVE,
    ["--json", *SERVE],
    ["--root", "/some/root", "--python", "/v/bin/python", "--usage", "llm", *SERVE],
    ["--rank", "1", "--fresh", "--no-standby", "--no-trace", *SERVE],
    ["--root=/r", "--usage=serve", "--", "m", "--json", "--root", "x"],
]
LEFT_TO_TYPER = [
    [], ["--help"], ["-h", *SERVE], ["--version"], ["--bogus", *SERVE], ["--json"],
    ["--json", "--json", *SERVE], ["--root", *SERVE], ["--rank", "x", *SERVE],
    ["--rank", "-1", *SERVE], ["--for-host", "h.json", *SERVE], ["/models/m", *SERVE],
    ["--"], ["--root="],
]


test_plain_values_are_the_ones_typer_converts, test_help_and_errors_are_typers = layer_checks(
    "predict", "vllm_cache_tools.cli.predict.run_predict", run_predict, PLAIN, LEFT_TO_TYPER)


def test_a_prestarted_run_answers_the_same_call_once(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[Any, ...]] = []

    def fake(*a: Any, **kw: Any) -> Any:
        calls.append(a)
        return f"answer {len(calls)}"

    monkeypatch.setattr(runner, "_run_probe", fake)
    monkeypatch.setattr(runner, "_EARLY", {})
    env = {"A": "1"}
    runner.prestart(["m"], env, None, "serve", 0)
    assert runner.run_probe(["m"], env, None, "serve", 0) == "answer 1"
    assert runner.run_probe(["m"], env, None, "serve", 0) == "answer 2"  # taken once
    runner.prestart(["m"], env, None, "serve", 0)
    assert runner.run_probe(["m"], {"A": "2"}, None, "serve", 0) == "answer 4"  # another call
    assert len(calls) == 4 and runner._EARLY  # the unmatched early run is left alone


def test_an_early_error_reaches_the_caller(monkeypatch: pytest.MonkeyPatch) -> None:
    def fake(*a: Any, **kw: Any) -> Any:
        raise runner.PredictError("vLLM rejected the arguments: nope")

    monkeypatch.setattr(runner, "_run_probe", fake)
    monkeypatch.setattr(runner, "_EARLY", {})
    runner.prestart(["m"], {}, None, "serve", 0)
    with pytest.raises(runner.PredictError, match="nope"):
        runner.run_probe(["m"], {}, None, "serve", 0)


def test_predict_takes_the_early_run(monkeypatch: pytest.MonkeyPatch, tmp_path: Any,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    """The early run has exactly the arguments predict passes to run_probe (the environment
    with the resolved root among them): one probe run, not two."""
    calls: list[tuple[Any, ...]] = []

    def fake(*a: Any, **kw: Any) -> Any:
        calls.append((a, kw))
        raise runner.PredictError("stop here")

    monkeypatch.setattr(runner, "_run_probe", fake)
    monkeypatch.setattr(runner, "_EARLY", {})
    monkeypatch.setenv("VLLM_CACHE_ROOT", str(tmp_path / "elsewhere"))
    with pytest.raises(SystemExit) as exc:
        run_predict(["m", "--max-model-len", "128"], root=tmp_path, usage="llm", rank=1,
                    no_standby=True, early=True)
    assert exc.value.code == 2 and "stop here" in capsys.readouterr().err
    assert len(calls) == 1 and not runner._EARLY
    (vargs, env, _python, usage, rank), kw = calls[0]
    assert vargs == ["m", "--max-model-len", "128"] and (usage, rank) == ("llm", 1)
    assert env["VLLM_CACHE_ROOT"] == str(tmp_path)
    assert kw["standby"] is False and kw["memo"] is True


def test_text_output_keeps_bracketed_evidence(capsys: pytest.CaptureFixture[str]) -> None:
    """The AOT tree's evidence prints whole (was: rich took "[the artifact's copies ...]" for
    a style tag and dropped it, leaving "artifact present, sources unchanged " with a trailing
    space); paths with brackets too."""
    from vllm_cache_tools.analyze.predict import Prediction, TreePrediction
    from vllm_cache_tools.cli.predict_run import _render

    evidence = ("the artifact's copies of 23 traced files match the files now, as vLLM's "
                "loader compares them")
    aot = TreePrediction("0b85" * 16, "/tmp/[pod]/root/torch_compile_cache/x/rank_0_0/model",
                         True, "artifact present, sources unchanged", evidence)
    backend = TreePrediction("28fd362d4e", "/tmp/[pod]/b", True,
                             "not consulted: the AOT artifact loads")
    parts = {"vllm_version": "0.32.0", "torch_version": "2.13.0+cpu", "env_hash": "e" * 64,
             "config_hash": "de926b2dc5", "compiler_hash": "279cece295", "code_hash": "c" * 64}
    _render(Prediction(True, backend, aot, parts), json_out=False)
    lines = capsys.readouterr().out.splitlines()
    assert f"artifact present, sources unchanged [{evidence}]" in lines[3]
    assert lines[2].strip() == aot.path and lines[5].strip() == "/tmp/[pod]/b"
    assert lines[6].strip() == "not consulted: the AOT artifact loads"


def test_a_rank_the_start_does_not_have_is_a_usage_error(tmp_path: Any) -> None:
    """--rank -1 (typer's int) and --rank 1 of a one-rank start: one line, exit 2 (were: a
    prediction for rank_-1_0 / rank_1_0, folders vLLM never names). A stand-in interpreter
    answers as the probe of a one-rank start."""
    from tests.conftest import run_cli

    exe = tmp_path / "python"
    exe.write_text("#!/bin/sh\ncat >/dev/null\n"
                   "echo '{\"rank\": 1, \"dp_index\": 0, \"world_size\": 1}' >/dev/fd/$3\n")
    exe.chmod(0o755)
    env = {"VLLM_CACHE_TOOLS_PROBE_MEMO": "0", "VLLM_CACHE_TOOLS_PROBE_STANDBY": "0"}
    for rank, says in (("-1", "--rank must be 0 or more (got -1)"),
                       ("1", "--rank 1: this start has 1 worker rank(s)")):
        r = run_cli("predict", "--root", str(tmp_path), "--python", str(exe), "--rank", rank,
                    "--", "m", env=env)
        assert r.returncode == 2 and says in r.stderr, r.stderr
        assert r.stderr.count("\n") == 1 and not r.stdout


def test_the_argument_vllm_rejects_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    """The probe's answer for arguments vLLM's parser rejects carries argparse's own message
    (was: "invalid vLLM arguments (argparse exit 2)", which named neither the argument nor
    the reason: a typo such as --pythn before `--` reaches vLLM's parser). A stand-in parser
    and stand-in vLLM modules."""
    import argparse
    import sys
    import types

    from vllm_cache_tools.live import probe

    names = ("vllm", "vllm.engine", "vllm.engine.arg_utils", "vllm.usage",
             "vllm.usage.usage_lib")
    fake = {n: types.ModuleType(n) for n in names}
    fake["vllm.engine.arg_utils"].AsyncEngineArgs = object  # type: ignore[attr-defined]
    fake["vllm.engine.arg_utils"].EngineArgs = object  # type: ignore[attr-defined]
    fake["vllm.usage.usage_lib"].UsageContext = object  # type: ignore[attr-defined]
    for n, m in fake.items():
        monkeypatch.setitem(sys.modules, n, m)
    parser = argparse.ArgumentParser(prog="vllm serve")
    parser.add_argument("--model")
    parser.add_argument("--max-model-len", type=int)
    monkeypatch.setattr(probe, "describe",
                        lambda req: probe.build_config(req["args"], req["usage"]))
    for args, says in ((["m", "--pythn", "x"], "unrecognized arguments: --pythn x"),
                       (["m", "--max-model-len", "abc"],
                        "argument --max-model-len: invalid int value: 'abc'")):
        monkeypatch.setitem(probe._PARSERS, "llm", parser)
        out = probe.answer({"args": args, "usage": "llm"})
        assert out["error"] == f"invalid vLLM arguments: {says}"
        assert out["error_kind"] == "arguments"


def test_a_root_that_is_a_file_is_refused_before_the_probe(tmp_path: Any) -> None:
    """--root FILE: one line, exit 2, and no probe started (was: a MISS, exit 1, for folders
    under a file, where vLLM cannot start). A missing root stays a cold cache."""
    from tests.conftest import run_cli

    afile = tmp_path / "afile"
    afile.write_text("")
    marker = tmp_path / "probe-ran"
    exe = tmp_path / "python"
    exe.write_text(f"#!/bin/sh\ntouch {marker}\ncat >/dev/null\n"
                   "echo '{\"error\": \"stand-in\", \"error_kind\": \"probe\"}' >/dev/fd/$3\n")
    exe.chmod(0o755)
    env = {"VLLM_CACHE_TOOLS_PROBE_MEMO": "0", "VLLM_CACHE_TOOLS_PROBE_STANDBY": "0"}
    r = run_cli("predict", "--root", str(afile), "--python", str(exe), "--", "m", env=env)
    assert r.returncode == 2, r.stderr
    assert r.stderr == (f"vllm-cache: error: cache root {afile} is not a directory "
                        "(from --root)\n")
    assert not marker.exists()
    r = run_cli("predict", "--root", str(tmp_path / "missing"), "--python", str(exe), "--",
                "m", env=env)
    assert r.returncode == 2 and "stand-in" in r.stderr and marker.exists()
