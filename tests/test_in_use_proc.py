"""``open_paths_under`` against real processes: a file held by a descriptor and one mapped
(the descriptor closed) are both found, with their holder's pid; nothing outside the root."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from vllm_cache_tools.store.in_use import open_paths_under


def test_open_and_mapped_files_are_found_with_their_pid(tmp_path: Path) -> None:
    root = Path(os.fsdecode(os.fsencode(tmp_path) + b"/r\xffoot"))  # a name that is not UTF-8
    (root / "e").mkdir(parents=True)
    held, mapped, outside = root / "e" / "held", root / "e" / "mapped", tmp_path / "outside"
    for f in (held, mapped, outside):
        f.write_bytes(b"x" * 4096)
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import mmap, os, sys, time\n"
         "a = open(os.fsencode(sys.argv[1]), 'rb'); c = open(sys.argv[3], 'rb')\n"
         "with open(os.fsencode(sys.argv[2]), 'rb') as f:\n"
         "    m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)\n"
         "print('ok', flush=True); time.sleep(60)",
         os.fsdecode(held), os.fsdecode(mapped), str(outside)],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ok"
        found = open_paths_under(root)
    finally:
        holder.kill()
        holder.wait()
    real = os.path.realpath(root)
    assert found == {f"{real}/e/held": {holder.pid}, f"{real}/e/mapped": {holder.pid}}
    assert open_paths_under(root) == {}


def test_no_proc_folder_means_nothing_known_open(tmp_path: Path) -> None:
    assert open_paths_under(tmp_path, proc=tmp_path / "no-proc") == {}
