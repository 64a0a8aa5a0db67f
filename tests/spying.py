"""Recording the calls of one method while the real one runs (``monkeypatch`` undoes it)."""

from __future__ import annotations

from typing import Any

import pytest


def spy_on(monkeypatch: pytest.MonkeyPatch, owner: type, name: str) -> list[tuple[Any, ...]]:
    """The arguments (``self`` left out; keyword arguments' values after the positional ones)
    of each call of ``owner.name`` from now on, in order; each call goes on to the real
    method."""
    calls: list[tuple[Any, ...]] = []
    real = getattr(owner, name)

    def spy(self: object, *args: Any, **kwargs: Any) -> Any:
        calls.append((*args, *kwargs.values()))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(owner, name, spy)
    return calls
