"""``vllm-cache ls`` as an operator sees it: on an 80-column terminal (a real pseudo-terminal)
and piped, over the shipped example and over a root with many entries whose keys share long
prefixes. No key is cut, no row wraps, and every key shown pastes back into the CLI."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import secrets
import shutil
import struct
import subprocess
import sys
import tempfile
import termios
from pathlib import Path

import pytest
from rich.cells import cell_len

from tests.conftest import REPO, run_cli
from tests.trees import age
from vllm_cache_tools.cli.ls import LS_COLUMNS
from vllm_cache_tools.cli.render import Column, render, unique_prefixes
from vllm_cache_tools.store.lookup import locate_entry
from vllm_cache_tools.store.scan import scan

SAMPLE = REPO / "examples" / "sample_cache"
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
BOX = re.compile(r"[\u2500-\u257f]")
HEX = re.compile(r"^[0-9a-f]{8,64}$")
STATES = {"complete", "partial", "corrupt", "unloadable", "in-use", "unknown"}


def run_tty(*args: str, columns: int = 80, env_columns: bool = True) -> str:
    """``vllm-cache ARGS`` with stdout on a pseudo-terminal ``columns`` wide (its window size,
    and COLUMNS too unless ``env_columns`` is off); the screen text, ANSI codes removed."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "NO_COLOR")}
    env["TERM"] = "xterm-256color"
    if env_columns:
        env["COLUMNS"] = str(columns)
    exe = Path(sys.executable).parent / "vllm-cache"
    with tempfile.TemporaryFile() as err:
        p = subprocess.Popen([str(exe), *args], stdin=subprocess.DEVNULL, stdout=slave,
                             stderr=err, env=env)
        os.close(slave)
        chunks = []
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
        os.close(master)
        assert p.wait(timeout=120) == 0, err.seek(0) or err.read().decode()
    return ANSI.sub("", b"".join(chunks).decode()).replace("\r\n", "\n")


def table_rows(text: str) -> tuple[list[str], list[list[str]]]:
    """Header cells and the rows (split on runs of blanks) of an ``ls`` table."""
    lines = text.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("KEY"))
    header = lines[head].split()
    rows = []
    for line in lines[head + 1:]:
        if not line.strip():
            break
        rows.append(line.split())
    return header, rows


def check_table(text: str, root: Path, width: int | None) -> list[str]:
    """The rules every ``ls`` table keeps; returns the keys shown."""
    assert not BOX.search(text), "box-drawing characters in the table"
    if width is not None:
        for line in text.splitlines():
            assert cell_len(line) <= width, f"{cell_len(line)} columns: {line!r}"
    header, rows = table_rows(text)
    info = scan(root, check_in_use=False)
    assert len(rows) == len(info.entries), "one line per entry (nothing wrapped)"
    keys = [r[0] for r in rows]
    full = {e.key for e in info.entries}
    for k, r in zip(keys, rows, strict=True):
        assert HEX.match(k), f"cut or malformed key {k!r}"
        assert "…" not in k
        assert sum(f.startswith(k) for f in full) == 1 or k in full, f"{k} is ambiguous"
        assert locate_entry(k, root).name.startswith(k)
        assert any(c in STATES for c in r), f"no whole state in {r}"
    assert len({locate_entry(k, root).name for k in keys}) == len(full), "every entry shown"
    for col in ("KEY", "SIZE", "STATE", "MODEL"):
        assert col in header
    assert "LAST" in header
    return keys


def test_unique_prefixes() -> None:
    aot = ["0123456789ab" + "c" * 52, "0123456789ab" + "d" * 52,  # share 12: need 13
           "fedcba987654" + "0" * 52, "28fd362d4e" + "1" * 54]   # starts like a backend key
    backend = ["28fd362d4e", "28fd362d4f", "ffffffffff"]
    p = unique_prefixes([*aot, *backend], {64: 12})
    assert p[aot[0]] == aot[0][:13] and p[aot[1]] == aot[1][:13]
    assert p[aot[2]] == aot[2][:12] and p[aot[3]] == aot[3][:12]
    assert all(p[k] == k for k in backend)
    for k, short in p.items():
        others = [o for o in p if o != k and o.startswith(short)]
        assert not others or short == k, (k, short, others)


def test_render_fits_by_dropping_then_cutting_only_what_may_be_cut() -> None:
    cols = (Column("KEY"), Column("A", drop=2), Column("B", drop=1),
            Column("MODEL", shrink_to=8))
    rows = [["k" * 12, "a" * 10, "b" * 10, "/some/long/path/to/the-model"]]
    wide = render(cols, rows, None)
    assert wide[1] == "  ".join(rows[0])
    narrow = render(cols, rows, 30)
    assert narrow[0].split() == ["KEY", "MODEL"]
    assert all(cell_len(line) <= 30 for line in narrow)
    assert narrow[1].startswith("k" * 12) and narrow[1].endswith("/the-model")
    # Columns that may not be cut stay whole even when nothing else fits.
    tiny = render(cols, rows, 10)
    assert tiny[1].startswith("k" * 12)


@pytest.mark.parametrize("env_columns", [True, False])
def test_sample_cache_at_80_columns(env_columns: bool) -> None:
    text = run_tty("ls", "--root", str(SAMPLE), columns=80, env_columns=env_columns)
    keys = check_table(text, SAMPLE, 80)
    header, _ = table_rows(text)
    assert "TORCH" not in header  # left out first
    for k in keys:
        r = run_cli("show", k, "--root", str(SAMPLE), "--json")
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["key"].startswith(k)


def test_sample_cache_piped_and_wide() -> None:
    r = run_cli("ls", "--root", str(SAMPLE), env={"COLUMNS": "80"})
    assert r.returncode == 0, r.stderr
    check_table(r.stdout, SAMPLE, None)
    assert "…" not in r.stdout
    header, _ = table_rows(r.stdout)
    assert header == " ".join(c.header for c in LS_COLUMNS).split()
    assert all(not line.endswith(" ") for line in r.stdout.splitlines())
    wide = run_tty("ls", "--root", str(SAMPLE), "--wide", columns=80)
    assert table_rows(wide)[0] == header


@pytest.fixture(scope="module")
def many_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example root with 90 more entries: AOT keys sharing 12 to 15 leading hex digits,
    one starting with a backend key, backend keys sharing 9; ages from minutes to weeks."""
    tmp = tmp_path_factory.mktemp("many")
    root = tmp / "root"
    shutil.copytree(SAMPLE, root)
    cc = root / "torch_compile_cache"
    aot_src = next((cc / "torch_aot_compile").iterdir()) / "rank_0_0"
    be_src = next(p for p in cc.iterdir() if re.fullmatch(r"[0-9a-f]{10}", p.name))
    rnd = secrets.SystemRandom()

    def hexs(n: int) -> str:
        return "".join(rnd.choice("0123456789abcdef") for _ in range(n))

    aot_keys = [be_src.name + hexs(54)]
    for shared in (12, 13, 14, 15):
        stem = hexs(shared)
        aot_keys += [stem + c + hexs(63 - shared) for c in "012345"]
    aot_keys += [hexs(64) for _ in range(20)]
    be_stem = hexs(9)
    be_keys = [be_stem + c for c in "0123456789abcdef"] + [hexs(10) for _ in range(29)]
    for k in aot_keys:  # the rank folder only, its files linked: ~2 MB for all of them
        shutil.copytree(aot_src, cc / "torch_aot_compile" / k / "rank_0_0",
                        copy_function=os.link)
    for i, k in enumerate(be_keys):
        shutil.copytree(be_src, cc / k)
        age(cc / k, days=(i * 0.37) % 40)
    return root


def test_many_entries_at_80_columns_and_piped(many_root: Path) -> None:
    assert len(scan(many_root, check_in_use=False).entries) == 94
    text = run_tty("ls", "--root", str(many_root), columns=80)
    keys = check_table(text, many_root, 80)
    assert max(len(k) for k in keys if len(k) > 10) >= 16  # 15 shared digits need 16
    assert min(len(k) for k in keys if len(k) > 10) == 12
    piped = run_cli("ls", "--root", str(many_root), "--sort", "size")
    assert piped.returncode == 0, piped.stderr
    assert check_table(piped.stdout, many_root, None)
    # The longest prefixes, pasted back into the real CLI: show, and ls itself.
    longest = sorted(keys, key=len)[-3:]
    for k in longest:
        r = run_cli("show", k, "--root", str(many_root), "--json")
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["key"].startswith(k)
    again = run_cli("ls", *longest, "--root", str(many_root))
    assert sorted(row[0] for row in table_rows(again.stdout)[1]) == sorted(longest)
    shorter = run_cli("ls", longest[-1][:-1], "--root", str(many_root))
    assert shorter.returncode == 2 and "ambiguous" in shorter.stderr
    # A filter still prints prefixes unique in the whole root, not just among listed rows.
    filtered = run_cli("ls", "--root", str(many_root), "--filter", "layout=aot")
    _, rows = table_rows(filtered.stdout)
    for row in rows:
        assert locate_entry(row[0], many_root).name.startswith(row[0])


def test_narrow_terminal_keeps_keys_whole(many_root: Path) -> None:
    text = run_tty("ls", "--root", str(many_root), columns=60)
    _, rows = table_rows(text)
    assert all(HEX.match(r[0]) for r in rows)
    assert len(rows) == 94


def test_bracketed_text_of_the_cache_is_printed_whole(tmp_path: Path) -> None:
    """A root and logs whose paths hold "[abc]": show and explain print them whole (was: rich took
    "[abc]" for a style tag and printed /tmp/.../root with the folder's name gone)."""
    root = tmp_path / "[abc]" / "root"
    shutil.copytree(SAMPLE, root)
    r = run_cli("show", "28fd", "--root", str(root))
    assert r.returncode == 0, r.stderr
    assert f"  path               {root}/torch_compile_cache/28fd362d4e" in r.stdout.splitlines()
    logs = shutil.copytree(REPO / "examples" / "sample_logs", tmp_path / "[abc]" / "logs")
    r = run_cli("explain", "--logs", str(logs / "1-cold-start.log"),
                str(logs / "3-long-max-model-len-env.log"))
    assert r.returncode == 0, r.stderr
    assert f"  old {logs}/1-cold-start.log" in r.stdout.splitlines()


def test_an_existing_name_without_a_slash_is_a_path(monkeypatch: pytest.MonkeyPatch,
                                                   tmp_path: Path) -> None:
    """`show rank_0_0` from inside an entry, `explain run.log ...` from the log's folder: a
    name that exists and is not a bare hex key is looked up as a path (was: "'rank_0_0' is
    neither an entry key (hex) nor a path"). A bare hex name stays a key."""
    from vllm_cache_tools.store.lookup import EntryNotFound

    root = tmp_path / "root"
    shutil.copytree(SAMPLE, root, symlinks=True)
    entry = root / "torch_compile_cache" / "28fd362d4e"
    monkeypatch.chdir(entry)
    assert locate_entry("rank_0_0") == entry
    monkeypatch.chdir(tmp_path)
    (tmp_path / "run.log").write_text("")
    with pytest.raises(EntryNotFound, match=r"run\.log is not inside a compile-cache entry"):
        locate_entry("run.log", root)
    (tmp_path / "39ecaca4bf").write_text("")
    assert locate_entry("39ecaca4bf", root) == root / "torch_compile_cache" / "39ecaca4bf"
    (tmp_path / "39ECACA4BF").write_text("")  # in upper case too: keys are read in one place
    assert locate_entry("39ECACA4BF", root) == root / "torch_compile_cache" / "39ecaca4bf"


def test_stdin_on_a_terminal_is_refused_where_dash_reads_it(tmp_path: Path) -> None:
    """log (no FILE), unpack - and predict --for-host - with a terminal on stdin: one line
    saying what to give, exit 2, in one wording (predict --for-host - waited for typing)."""
    exe = Path(sys.executable).parent / "vllm-cache"
    for args, what in ((["log"], "one or more vLLM log files"), (["unpack", "-"], "a bundle file"),
                       (["predict", "--for-host", "-", "--", "m"], "a host profile file")):
        master, slave = pty.openpty()
        try:
            r = subprocess.run([str(exe), *args], stdin=slave, capture_output=True, text=True,
                               timeout=120, cwd=tmp_path)
        finally:
            os.close(slave)
            os.close(master)
        assert (r.returncode, r.stdout) == (2, ""), (args, r.stderr)
        assert r.stderr == f"vllm-cache: error: give {what}, or pipe one in (- reads stdin)\n"
