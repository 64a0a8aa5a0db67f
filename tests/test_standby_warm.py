"""The standby's warm-up (issue 24): what the answer before it imported is imported ahead,
from a file only this user wrote in the private runtime folder; a failed import stops the
warm-up and is reported; a link, a foreign or an oversized file is not read. (That a warmed
standby answers exactly as a fresh probe does is tests/test_standby.py, with real vLLM.)"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from vllm_cache_tools.live import probe as live_probe
from vllm_cache_tools.live import standby


@pytest.fixture
def warm_state() -> Iterator[None]:
    live_probe._WARM.clear()
    saved: dict[str, Any] = {m: sys.modules.pop(m) for m in ("tabnanny", "pyclbr")
                             if m in sys.modules}
    try:
        yield
    finally:
        live_probe._WARM.clear()
        for m in ("tabnanny", "pyclbr"):
            sys.modules.pop(m, None)
        sys.modules.update(saved)


def test_write_warm_is_private_and_whole(tmp_path: Path) -> None:
    sock = tmp_path / "probe-x.sock"
    standby.write_warm(sock, {"modules": ["json", 3, "tabnanny"], "cuda": "yes"})
    path = standby.warm_path(sock)
    assert path.name == "probe-x.sock.warm.json"
    assert path.stat().st_mode & 0o777 == 0o600
    assert json.loads(path.read_text()) == {"modules": ["json", "tabnanny"], "cuda": False}
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temporary file left


def test_warm_up_imports_in_order_and_stops_at_a_failure(tmp_path: Path, warm_state: None
                                                         ) -> None:
    sock = tmp_path / "probe-x.sock"
    standby.write_warm(sock, {"modules": ["json", "tabnanny", "vct_no_such_module_x",
                                          "pyclbr"], "cuda": True})
    live_probe._warm_up(str(sock))
    assert "tabnanny" in sys.modules and "pyclbr" not in sys.modules
    assert live_probe._WARM == {"modules": 1,
                                "error": "vct_no_such_module_x: ModuleNotFoundError"}


def test_warm_up_reads_no_link_and_no_foreign_or_huge_file(tmp_path: Path, warm_state: None
                                                           ) -> None:
    sock = tmp_path / "probe-x.sock"
    real = tmp_path / "elsewhere.json"
    real.write_text(json.dumps({"modules": ["tabnanny"]}))
    standby.warm_path(sock).symlink_to(real)
    live_probe._warm_up(str(sock))
    assert "tabnanny" not in sys.modules and live_probe._WARM == {}
    standby.warm_path(sock).unlink()
    standby.warm_path(sock).write_text(json.dumps({"modules": ["tabnanny"]}) + " " * (9 << 20))
    live_probe._warm_up(str(sock))
    assert "tabnanny" not in sys.modules
    if os.getuid() == 0:  # as root: a file another user owns is not read
        standby.write_warm(sock, {"modules": ["tabnanny"]})
        os.chown(standby.warm_path(sock), 65534, 65534)
        live_probe._warm_up(str(sock))
        assert "tabnanny" not in sys.modules


def test_an_answer_lists_what_it_imported_dependencies_first() -> None:
    warm = live_probe.warm_list()
    assert isinstance(warm["cuda"], bool)
    names = warm["modules"]
    assert "json" in names and "json.decoder" in names
    # In the order the imports completed: json/__init__ imports json.decoder, which finishes
    # first (importing it again in this order imports json itself first anyway).
    assert names.index("json.decoder") < names.index("json")
    assert not any(n.startswith("_vct_") or n == "__main__" for n in names)
