"""Inputs: which files make one log (plain, rotated ``.1``/``.2``, gzip, zstd, stdin), checking
them, and reading them in big blocks pre-filtered by :data:`ANCHORS`, with grep (split
across cores on big files) as an optional faster pre-filter.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vllm_cache_tools.errors import VctError
from vllm_cache_tools.read.logs.patterns import ANCHORS

MAX_LINE = 1 << 20
"""Longer lines are cut there (a line this long is never one of ours, but must not cost
memory)."""
class LogInputError(VctError, ValueError):
    """A log input could not be opened; the message is one line meant for users."""

# --------------------------------------------------------------------------------------------
# Inputs: files (plain, gzip, zstd, rotated), stdin; grep as an optional pre-filter


@dataclass(frozen=True)
class LogInput:
    """One input: a path, or ``-`` for stdin."""

    name: str

    @property
    def is_stdin(self) -> bool:
        return self.name == "-"

    @property
    def display(self) -> str:
        return "<stdin>" if self.is_stdin else self.name


_ROTATED = re.compile(r"^(?P<base>.+?)(?:\.(?P<n>\d+))?(?P<gz>\.gz|\.zst)?$")


def group_inputs(names: Sequence[str]) -> list[list[LogInput]]:
    """Split the inputs into streams. Rotated files of one log (``vllm.log``, ``vllm.log.1``,
    ``vllm.log.2.gz``, ``vllm.log.3.zst``) form one stream, oldest first, since a start can
    straddle a rotation; every other input is a stream of its own, in the order given."""
    groups: dict[str, list[tuple[int, int, str]]] = {}
    order: list[str] = []
    for pos, name in enumerate(names):
        if name == "-":
            key, n = f"-#{pos}", 0
        else:
            m = _ROTATED.match(name)
            assert m is not None
            key = m.group("base")
            n = int(m.group("n")) if m.group("n") else 0
        if key not in groups:
            groups[key] = []
            order.append(key)
        groups[key].append((n, pos, name))
    return [[LogInput(name) for _, _, name in sorted(groups[k], key=lambda t: (-t[0], t[1]))]
            for k in order]


def check_inputs(names: Sequence[str]) -> None:
    """Fail early, with one line, on inputs that cannot be read."""
    for name in names:
        if name == "-":
            continue
        p = Path(name)
        if not p.exists():
            raise LogInputError(f"{name}: no such log file")
        if p.is_dir():
            raise LogInputError(f"{name}: is a directory, not a log file")
        if not os.access(p, os.R_OK):
            raise LogInputError(f"{name}: permission denied")


def _is_gzip(head: bytes) -> bool:
    return head[:2] == b"\x1f\x8b"


def _is_zstd(head: bytes) -> bool:
    return head[:4] == b"\x28\xb5\x2f\xfd"


def compressed(head: bytes) -> bool:
    """Whether a log starting with ``head`` (4 bytes) is gzip or zstd (read by Python, never
    by grep)."""
    return _is_gzip(head) or _is_zstd(head)


CHUNK = 1 << 20

ZSTD_SLICE = 1 << 10
"""Compressed bytes given to the zstd decompressor at once: a zstd block expands at most
about 32,768 times (an RLE block), so one call makes at most 32 MiB whatever the input."""


def zstd_reader(read1: Callable[[int], bytes]) -> Callable[[int], bytes]:
    """``read(n)``: the decompressed bytes of every zstd frame of ``read1``'s input in turn, at
    least ``n`` of them unless the input ends. Raises EOFError when the input ends inside a
    frame (zstandard's own stream reader ends such a stream without a word: a log cut short
    by its compressor would look whole) and ``zstandard.ZstdError`` on damaged data, each
    after the bytes decompressed before it were returned."""
    import zstandard

    dctx = zstandard.ZstdDecompressor()
    dobj = dctx.decompressobj()
    data = memoryview(b"")
    pos = 0
    in_frame = False
    failed: Exception | None = None

    def read(n: int) -> bytes:
        nonlocal failed
        if failed is not None:
            raise failed
        out: list[bytes] = []
        try:
            _fill(n, out)
        except (EOFError, zstandard.ZstdError) as exc:
            if not out:
                raise
            failed = exc  # said at the next read: what came before the cut is read first
        return b"".join(out)

    def _fill(n: int, out: list[bytes]) -> None:
        nonlocal dobj, data, pos, in_frame
        got = 0
        while got < n:
            if pos >= len(data):
                data, pos = memoryview(read1(CHUNK)), 0
                if not data:
                    if in_frame:
                        raise EOFError("the data ends inside a zstd frame")
                    break
            piece = data[pos:pos + ZSTD_SLICE]
            pos += len(piece)
            in_frame = True
            b = dobj.decompress(piece)
            if dobj.eof:  # one frame done; a next one may follow (zstd -c a b, appended logs)
                rest = dobj.unused_data
                dobj, in_frame = dctx.decompressobj(), False
                if rest:
                    data, pos = memoryview(bytes(rest) + bytes(data[pos:])), 0
            if b:
                out.append(b)
                got += len(b)

    return read


def _blocks(read: Callable[[int], bytes]) -> Iterator[bytes]:
    """The input in big pieces that end at a line end. A line longer than :data:`MAX_LINE`
    is cut there and its rest skipped, so memory stays bounded whatever the input."""
    carry = b""
    cut: bytes | None = None  # the start of an over-long line whose end is being skipped
    while True:
        data = read(CHUNK)
        if not data:
            if cut is not None:
                yield cut + b"\n"
            elif carry:
                yield carry
            return
        if cut is not None:
            nl = data.find(b"\n")
            if nl < 0:
                continue
            yield cut + b"\n"
            cut = None
            data = data[nl + 1:]
        if carry:
            data = carry + data
        last = data.rfind(b"\n")
        if last < 0:
            carry = data
        else:
            yield data[:last + 1]
            carry = data[last + 1:]
        if len(carry) > MAX_LINE:
            cut, carry = carry[:MAX_LINE], b""


def _filtered(read: Callable[[int], bytes]) -> Iterator[tuple[int, bytes]]:
    """(line number, line) of the lines holding an anchor: each piece is searched for each
    anchor in C (``bytes.find``), so lines without one cost no Python work."""
    base = 0
    for block in _blocks(read):
        starts: set[int] = set()
        for anchor in ANCHORS:
            i = block.find(anchor)
            while i >= 0:
                starts.add(block.rfind(b"\n", 0, i) + 1)
                e = block.find(b"\n", i)
                if e < 0:
                    break
                i = block.find(anchor, e)
        line, prev = base, 0
        for s in sorted(starts):
            line += block.count(b"\n", prev, s)
            e = block.find(b"\n", s)
            yield line + 1, block[s:e] if e >= 0 else block[s:]
            prev = s
        base += block.count(b"\n")


SPLIT_MIN = 64 << 20
"""Files at least this big are searched by several greps at once (one per CPU, at most
MAX_PARTS)."""
MAX_PARTS = 16


def _grep_cmd(exe: str, offsets: bool) -> list[str]:
    cmd = [exe, "-a", "-n"] + (["-b"] if offsets else []) + ["-F"]
    for anchor in ANCHORS:
        cmd += ["-e", anchor.decode()]
    return cmd


def _grep_lines(path: str) -> Iterator[tuple[int, bytes]] | None:
    """Candidate lines through ``grep -F`` with the same anchors (about 2.5 times faster than
    the Python search on a 1 GiB log, benchmarks/bench_log.py); None when there is no grep.
    A big file is cut into parts at line ends and each part searched by its own grep."""
    exe = shutil.which("grep")
    if exe is None:
        return None
    env = {**os.environ, "LC_ALL": "C"}
    try:
        size = os.path.getsize(path)
        parts = min(os.cpu_count() or 1, MAX_PARTS) if size >= SPLIT_MIN else 1
        if parts > 1:
            return _grep_split(exe, path, size, parts, env)
        proc = subprocess.Popen([*_grep_cmd(exe, False), "--", path], stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                                bufsize=1 << 20)
    except OSError:
        return None
    return _read_grep(proc)


def _line_ends(path: str, size: int, parts: int) -> list[int]:
    """Part boundaries: ``parts + 1`` offsets, each (but 0 and ``size``) just after a line
    end."""
    cuts = [0]
    with open(path, "rb") as f:
        for i in range(1, parts):
            f.seek(max(cuts[-1], size * i // parts))
            while True:
                chunk = f.read(1 << 16)
                if not chunk:
                    return [*cuts, size]
                nl = chunk.find(b"\n")
                if nl >= 0:
                    cuts.append(f.tell() - len(chunk) + nl + 1)
                    break
    return [*cuts, size]


class _Part(threading.Thread):
    """One grep over ``[start, EOF)`` of the file, stopped once it reports a line at or past
    ``end``: keeps (local line number, line) of its own range in a spooled file and the local
    number of the first line past it (the same line the next part's grep reports first: that
    is how the parts' line numbers are joined)."""

    def __init__(self, exe: str, path: str, start: int, end: int, env: dict[str, str]) -> None:
        super().__init__(daemon=True)
        self.limit = end - start
        self.kept = tempfile.SpooledTemporaryFile(max_size=8 << 20)  # noqa: SIM115
        self.first_local: int | None = None
        self.past_local: int | None = None
        self.error: str | None = None
        self.f = open(path, "rb")  # noqa: SIM115 - closed in run()
        self.f.seek(start)
        self.proc = subprocess.Popen(_grep_cmd(exe, True), stdin=self.f,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                                     bufsize=1 << 20)

    def run(self) -> None:
        for n, line in self.lines():
            self.kept.write(b"%d:%s\n" % (n, line))

    def lines(self) -> Iterator[tuple[int, bytes]]:
        """(local line number, line) of this part's range, as grep reports them (the first
        part is read this way directly, the others by their thread into ``kept``)."""
        proc = self.proc
        assert proc.stdout is not None and proc.stderr is not None
        killed = False
        try:
            out: Any = proc.stdout
            for block in _blocks(out.read1):
                for raw in block.split(b"\n")[:-1]:  # blocks end at a line end
                    c1 = raw.find(b":")
                    c2 = raw.find(b":", c1 + 1)
                    try:
                        n, off = int(raw[:c1]), int(raw[c1 + 1:c2])
                    except ValueError:
                        continue
                    if self.first_local is None:
                        self.first_local = n
                    if off >= self.limit:
                        self.past_local = n
                        killed = True
                        proc.kill()
                        return
                    yield n, raw[c2 + 1:]
        finally:
            self.error = _finish_grep(proc, killed)
            self.f.close()


def _grep_split(exe: str, path: str, size: int, parts: int,
                env: dict[str, str]) -> Iterator[tuple[int, bytes]]:
    cuts = _line_ends(path, size, parts)
    workers = [_Part(exe, path, cuts[i], cuts[i + 1], env) for i in range(len(cuts) - 1)]
    for w in workers[1:]:
        w.start()
    delta = 0  # global line number = local + delta
    try:
        yield from workers[0].lines()  # the first part streams while the others search
        if workers[0].error is not None:
            raise LogInputError(f"grep failed: {workers[0].error}")
        for i, w in enumerate(workers):
            if i == 0:
                continue
            w.join()
            if w.error is not None:
                raise LogInputError(f"grep failed: {w.error}")
            if i > 0:
                prev = workers[i - 1]
                if prev.past_local is None:
                    return  # no candidate line after the previous part's range: done
                # The previous part's first line past its range is this part's first line.
                assert w.first_local is not None
                delta += prev.past_local - w.first_local
            w.kept.seek(0)
            for raw in _blocks(w.kept.read):
                for line in raw.split(b"\n")[:-1]:
                    colon = line.find(b":")
                    yield int(line[:colon]) + delta, line[colon + 1:]
    finally:
        for w in workers:
            if w.proc.poll() is None:
                w.proc.kill()
            if w.is_alive() or w.ident is not None:
                w.join()
            w.kept.close()


def _read_grep(proc: subprocess.Popen[bytes]) -> Iterator[tuple[int, bytes]]:
    assert proc.stdout is not None and proc.stderr is not None
    try:
        out: Any = proc.stdout  # a BufferedReader: read1 takes what grep has written so far
        for block in _blocks(out.read1):
            lines = block.split(b"\n")
            if block.endswith(b"\n"):
                lines.pop()
            for raw in lines:  # "LINENO:line" (grep -n)
                colon = raw.find(b":")
                try:
                    n = int(raw[:colon])
                except ValueError:
                    continue
                yield n, raw[colon + 1:]
    finally:
        error = _finish_grep(proc)
    if error is not None:
        raise LogInputError(f"grep failed: {error}")


def _finish_grep(proc: subprocess.Popen[bytes], killed: bool = False) -> str | None:
    """Close a grep's pipes and reap it; its error (exit status 2 or more) in one line, or
    None (1 means no line matched; a grep we killed has no error)."""
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    err = proc.stderr.read(4096)
    proc.stderr.close()
    rc = proc.wait()
    if killed or rc <= 1:
        return None
    msg = err.decode("utf-8", "replace").strip().splitlines()
    return msg[-1] if msg else f"exit status {rc}"
