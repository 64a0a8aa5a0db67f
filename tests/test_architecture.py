"""The layering of docs/architecture.md is checked by import-linter (``nox -s lint``); this
test proves the check passes on the tree and fails on a planted upward import."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
LINT = Path(sys.executable).parent / "lint-imports"

pytestmark = pytest.mark.skipif(not LINT.exists(), reason="import-linter is not installed")


def _lint(top: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(top)}
    return subprocess.run([str(LINT), "--config", str(top / "pyproject.toml")], cwd=top,
                          env=env, capture_output=True, text=True, timeout=300)


def test_layers_hold_and_a_planted_upward_import_breaks_them(tmp_path: Path) -> None:
    shutil.copytree(REPO / "vllm_cache_tools", tmp_path / "vllm_cache_tools",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    r = _lint(tmp_path)
    assert r.returncode == 0, r.stdout[-3000:]
    assert "2 kept, 0 broken" in r.stdout
    # A reader that imports the CLI: an upward import two floors up.
    errors = tmp_path / "vllm_cache_tools" / "read" / "errors.py"
    errors.write_text(errors.read_text() + "\nimport vllm_cache_tools.cli.common  # planted\n")
    r = _lint(tmp_path)
    assert r.returncode != 0
    assert "vllm_cache_tools.read is not allowed to import vllm_cache_tools.cli" in r.stdout
    # The recorder (inside vLLM) must not import a third-party package either.
    errors.write_text(errors.read_text().replace("import vllm_cache_tools.cli.common  # planted",
                                                 ""))
    hooks = tmp_path / "vllm_cache_tools" / "recorder" / "write.py"
    hooks.write_text(hooks.read_text() + "\nimport rich  # planted\n")
    r = _lint(tmp_path)
    assert r.returncode != 0 and "vllm_cache_tools.recorder" in r.stdout and "rich" in r.stdout


def test_json_documents_live_in_views() -> None:
    """analyze/, maintain/ and store/ return records; the documents --json prints are built in
    views/ (fleet/records.py's bundle manifest is a file format, not a view)."""
    import ast

    pkg = Path(__file__).resolve().parent.parent / "vllm_cache_tools"
    found = []
    for sub in ("analyze", "maintain", "store", "keys", "read"):
        for f in sorted((pkg / sub).rglob("*.py")):
            for node in ast.walk(ast.parse(f.read_text())):
                if isinstance(node, ast.FunctionDef) and node.name.endswith("_json") \
                        and not node.name.startswith("_"):
                    found.append(f"{f.relative_to(pkg)}:{node.lineno} {node.name}")
    assert found == []
