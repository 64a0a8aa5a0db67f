"""Source files named by a manifest or a probe are read the safe way (issue 12 item 4):
a FIFO, a device or a huge file neither hangs nor fills memory."""

from __future__ import annotations

import json
import os
import shutil
import threading
from pathlib import Path

from vllm_cache_tools.analyze.predict import _manifest_files
from vllm_cache_tools.read.noatime import read_source_text
from vllm_cache_tools.store.types import Entry, TreeStats

SAMPLE = Path(__file__).resolve().parent.parent / "examples" / "sample_cache"


def test_read_source_text_refuses_what_is_not_a_source(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo.py"
    os.mkfifo(fifo)
    big = tmp_path / "big.py"
    big.write_bytes(b"x" * 2048)
    good = tmp_path / "good.py"
    good.write_text("print('hi')\n")
    link = tmp_path / "link.py"
    link.symlink_to(good)
    done = threading.Event()

    def run() -> None:
        assert read_source_text(fifo) is None
        assert read_source_text("/dev/zero") is None
        assert read_source_text(big, limit=1024) is None
        assert read_source_text(tmp_path / "missing.py") is None
        assert read_source_text(good) == "print('hi')\n"
        assert read_source_text(link) is None  # a planted link is never followed
        done.set()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(10)
    assert done.is_set(), "a source read hung"


def test_predict_reads_manifest_named_files_safely(tmp_path: Path) -> None:
    """A real recorder manifest whose traced files were swapped for a FIFO and /dev/zero."""
    cc = tmp_path / "torch_compile_cache"
    shutil.copytree(SAMPLE / "torch_compile_cache", cc, symlinks=True)
    backend = sorted(p for p in cc.iterdir() if len(p.name) == 10)[0]
    (mpath,) = backend.glob("rank_0_0/backbone/vct-manifest.*.json")
    data = json.loads(mpath.read_text())
    model_file = data["traced_files"][0]["path"]
    fifo = tmp_path / "traced.fifo"
    os.mkfifo(fifo)
    data["traced_files"] = [{"path": model_file}, {"path": str(fifo)}, {"path": "/dev/zero"}]
    mpath.write_text(json.dumps(data))
    e = Entry(key=backend.name, layout="backend", path=backend, stats=TreeStats(), ranks=(),
              prefixes=(), state="complete", state_detail="", created=None,
              created_source="", modified=None, last_used=None, last_used_source=None,
              vllm_version=None, torch_version=None, model=None, hardware=None)
    out: dict[str, object] = {}
    t = threading.Thread(target=lambda: out.setdefault(
        "r", _manifest_files([e], {"forwards": [{"file": model_file}]})), daemon=True)
    t.start()
    t.join(10)
    assert "r" in out, "predict hung on a FIFO named by a manifest"
    files, _ = out["r"]  # type: ignore[misc]
    assert files[str(fifo)] is None and files["/dev/zero"] is None
