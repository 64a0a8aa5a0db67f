"""Hostile data for every human output (issue 23, items 7 and 8), on copies of a real root,
shared by tests/test_output_safety.py and benchmarks/hostile_output.py.

:func:`plant` puts escape sequences (an OSC title set ended by BEL, a cursor/erase CSI, C1
CSI, DEL, a bidi override and isolate) and a password in a model URL into each data source a
human verb prints from: a recorder manifest (the served model), a ledger line (the host
name), a file name inside an entry, two vLLM logs, a bundle's manifest (versions, CPU model)
and a store's index objects (served model, model code). :func:`run_pty` runs a command with
its stdout and stderr on a real pseudo-terminal and returns what the terminal received;
:func:`raw_controls` lists the control characters in it that are not the tool's own styling."""

from __future__ import annotations

import contextlib
import fcntl
import io
import json
import os
import pty
import re
import select
import shutil
import struct
import subprocess
import sys
import tarfile
import termios
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import zstandard

from tests.realvllm.harness import venv_python
from vllm_cache_tools.safetext import CONTROL_CHARS

PASSWORD = "Hunter2Secret"
"""The planted secret every output must hide."""
EVIL = "\x1b]0;pwned\x07\x1b[2J\x9b31m\x7f\u202eyp.evil\u2066"
"""Title set (OSC ... BEL), erase screen (CSI), a C1 CSI, DEL, a right-to-left override and
an isolate: each must be shown escaped, never reach the terminal."""
EVIL_SHOWN = "\\x1b]0;pwned\\x07"
"""How the start of :data:`EVIL` reads once escaped."""
MODEL_URL = f"https://user:{PASSWORD}@models.example/m{EVIL}"
SGR = re.compile(r"\x1b\[[0-9;]*m")
TOOL_STYLING = re.compile(r"\x1b\[[0-9;]*m|\x1b\[\?25[lh]|\r?\x1b\[(?:1A|2K)")
"""What the tool itself writes on a styled terminal: SGR (bold, colour), and the transient
progress bar of pack/unpack/push/pull (rich: cursor hidden and shown, the line erased after a
carriage return, one line up). Its label and figures are the tool's own words and numbers."""
_RAW = re.compile(f"[{CONTROL_CHARS}]")


def cli() -> str:
    return str(Path(sys.executable).parent / "vllm-cache")


@dataclass(frozen=True)
class Hostile:
    root: Path
    """A copy of the real root, every source in it planted."""
    clean: Path
    """A copy left as vLLM wrote it (pack and push read it)."""
    logs: tuple[Path, Path]
    bundle: Path
    store: str
    backend_key: str
    aot_key: str


def _manifests(cc: Path) -> list[Path]:
    return sorted(p for p in cc.rglob("vct-manifest.*.json") if ".vllm-cache-tools" not in p.parts)


def _rewrite_json(path: Path, edit: object) -> None:
    data = json.loads(path.read_text())
    edit(data)  # type: ignore[operator]
    path.write_text(json.dumps(data))


def _key_of(cc: Path, layout: str) -> str:
    if layout == "backend":
        return next(p.name for p in sorted(cc.iterdir()) if re.fullmatch(r"[0-9a-f]{10}", p.name))
    aot = cc / "torch_aot_compile"
    return next(p.name for p in sorted(aot.iterdir()) if re.fullmatch(r"[0-9a-f]{64}", p.name))


def _forget_index(cc: Path) -> None:
    # The listing index would answer with what was there before the planting.
    for p in (cc / ".vllm-cache-tools").glob("index*"):
        if p.is_dir():
            shutil.rmtree(p)
        else:
            p.unlink()


def plant(real_root: Path, logs: Sequence[Path], tmp: Path, env: Mapping[str, str]) -> Hostile:
    clean = tmp / "clean"
    shutil.copytree(real_root, clean, symlinks=True)
    root = tmp / "hostile"
    shutil.copytree(real_root, root, symlinks=True)
    cc = root / "torch_compile_cache"
    # A manifest: the served model (ls's MODEL, show, audit, stats/drift per model).
    def served_by_evil(d: dict) -> None:  # type: ignore[type-arg]
        d.setdefault("model", {})["model"] = MODEL_URL
        if isinstance(d.get("versions"), dict) and isinstance(d["versions"].get("vllm"), str):
            d["versions"]["vllm"] += EVIL

    for m in _manifests(cc):
        _rewrite_json(m, served_by_evil)
    # A ledger line: the host name (stats --by host, drift).
    ledgers = sorted((cc / ".vllm-cache-tools" / "ledger").glob("*.jsonl"))
    line = json.loads(ledgers[0].read_text().splitlines()[0])
    line.update(host="pod" + EVIL, start="f" * 16, time=line["time"] + 1)
    with ledgers[0].open("a") as f:
        f.write(json.dumps(line) + "\n")
    # A file name inside a backend entry (show lists its files).
    backend_key = _key_of(cc, "backend")
    prefix = next(p for p in sorted((cc / backend_key).glob("rank_*/*")) if p.is_dir())
    (prefix / f"notes{EVIL}.txt").write_text("planted\n")
    _forget_index(cc)
    # Two logs, their names too: every path in them (log, log --compare, explain --logs).
    out_logs = []
    for i, p in enumerate(logs[:2]):
        text = p.read_text(errors="replace").replace(str(real_root), str(real_root) + EVIL)
        text = text.replace("Using cache directory", f"Using cache directory{EVIL}")
        q = tmp / f"vllm-{i}{EVIL}.log"
        q.write_text(text)
        out_logs.append(q)
    # A bundle whose manifest carries escapes in what unpack compares and reports.
    aot_key = _key_of(clean / "torch_compile_cache", "aot")
    packed = tmp / "clean.tzst"
    _check(subprocess.run([cli(), "pack", "--root", str(clean), aot_key, "-o", str(packed)],
                          capture_output=True, text=True, env=dict(env), timeout=300))
    bundle = tmp / "hostile.tzst"
    _rewrite_bundle(packed, bundle)
    # A store whose index objects carry escapes and a password.
    store_dir = tmp / "store"
    store = f"file://{store_dir}"
    _check(subprocess.run([cli(), "push", "--root", str(clean), aot_key, store],
                          capture_output=True, text=True, env=dict(env), timeout=300))
    for idx in sorted(p for p in store_dir.rglob("*.json") if p.parent.name != "blobs"):
        data = json.loads(idx.read_text())
        if isinstance(data.get("entry"), dict):
            data["entry"]["checkpoint"] = MODEL_URL
            data["entry"]["model"] = f"LlamaModel.forward{EVIL}"
            data["entry"]["hardware"] = {**data["entry"].get("hardware", {}),
                                         "label": "cpu" + EVIL}
            idx.write_text(json.dumps(data))
    return Hostile(root, clean, (out_logs[0], out_logs[1]), bundle, store, backend_key,
                   aot_key)


def _check(res: subprocess.CompletedProcess[str]) -> None:
    if res.returncode != 0:
        raise AssertionError(f"{res.args}: exit {res.returncode}: {res.stderr[-2000:]}")


def _rewrite_bundle(src: Path, dst: Path) -> None:
    """``src`` with its manifest's versions and packing CPU model carrying :data:`EVIL`."""
    raw = zstandard.ZstdDecompressor().stream_reader(src.open("rb"), read_across_frames=True)
    with contextlib.closing(raw), tarfile.open(fileobj=raw, mode="r|") as tin, \
            dst.open("wb") as f, zstandard.ZstdCompressor().stream_writer(f) as zw, \
            tarfile.open(fileobj=zw, mode="w|", format=tarfile.PAX_FORMAT) as tout:
        for member in tin:
            data = tin.extractfile(member).read() if member.isreg() else b""  # type: ignore[union-attr]
            if member.name == "vllm-cache-bundle.json":
                doc = json.loads(data)
                for e in doc["entries"]:
                    e["versions"]["torch"] = "2.13.0+cpu" + EVIL
                    e["versions"]["vllm"] = "0.32.0" + EVIL
                    e["checkpoint"] = "m" + EVIL
                doc["packed_on"]["cpu"] = {**doc["packed_on"].get("cpu", {}),
                                           "model": "Xeon" + EVIL}
                data = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode() + b"\n"
                member.size = len(data)
            tout.addfile(member, io.BytesIO(data))


def run_pty(argv: Sequence[str], env: Mapping[str, str], timeout: float = 300,
            columns: int = 200) -> tuple[int, str]:
    """(exit status, what the terminal received) of ``argv`` with stdin, stdout and stderr
    on one pseudo-terminal ``columns`` wide. The pty's own ``\\r\\n`` reads as ``\\n``."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    proc = subprocess.Popen(list(argv), stdin=slave, stdout=slave, stderr=slave,
                            env=dict(env), close_fds=True, start_new_session=True)
    os.close(slave)
    out = bytearray()
    deadline = time.monotonic() + timeout
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                proc.kill()
                raise AssertionError(f"{argv}: no end within {timeout} s")
            ready, _, _ = select.select([master], [], [], min(left, 1.0))
            if not ready:
                if proc.poll() is not None:
                    break
                continue
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: every writer of the terminal has closed it
                break
            if not chunk:
                break
            out += chunk
    finally:
        os.close(master)
    return proc.wait(), out.decode("utf-8", errors="backslashreplace").replace("\r\n", "\n")


def raw_controls(text: str, styled: bool = False) -> list[str]:
    """The control and bidi characters in ``text`` other than line breaks and tabs (and,
    ``styled``, the tool's own :data:`TOOL_STYLING`), as their escapes."""
    if styled:
        text = TOOL_STYLING.sub("", text)
    return sorted({repr(c) for c in _RAW.findall(text) if c not in "\n\t"})


def human_env(base: Mapping[str, str], styled: bool = False) -> dict[str, str]:
    env = {k: v for k, v in base.items() if k not in ("NO_COLOR", "TERM", "CI")}
    env.update({"TERM": "xterm-256color"} if styled else {"TERM": "dumb", "NO_COLOR": "1"})
    return env


def verbs(h: Hostile) -> dict[str, list[str]]:
    """Every human output that prints data from a cache, log, manifest, bundle or store."""
    r = str(h.root)
    return {
        "ls": ["ls", "--root", r],
        "ls --wide": ["ls", "--root", r, "--wide"],
        "ls --by-owner": ["ls", "--root", r, "--by-owner"],
        "show backend (file name)": ["show", "--root", r, h.backend_key],
        "show aot (manifest)": ["show", "--root", r, h.aot_key[:12]],
        "audit": ["audit", "--root", r],
        "stats": ["stats", r],
        "stats --by host": ["stats", r, "--by", "host"],
        "drift": ["drift", r],
        "verify": ["verify", "--root", r],
        "prune --dry-run": ["prune", "--root", r, "--max-size", "1", "--dry-run"],
        "log": ["log", str(h.logs[0])],
        "log --compare": ["log", "--compare", str(h.logs[0]), str(h.logs[1])],
        "explain --logs": ["explain", "--logs", str(h.logs[0]), str(h.logs[1])],
        "pack (refused: secret in a manifest)": ["pack", "--root", r, h.aot_key[:12], "-o",
                                                 str(h.root.parent / "refused.tzst")],
        "unpack": ["unpack", str(h.bundle), "--root", str(h.root.parent / "unpacked"),
                   "--python", str(venv_python())],
        "ls URL": ["ls", h.store],
        "stats URL": ["stats", h.store],
        "pull URL": ["pull", h.store, h.aot_key[:12], "--root", str(h.root.parent / "pulled"),
                     "--python", str(venv_python())],
        "explain (entries)": ["explain", "--root", r, *sorted(
            p.name for p in (h.root / "torch_compile_cache").iterdir()
            if re.fullmatch(r"[0-9a-f]{10}", p.name))[:2]],
    }
