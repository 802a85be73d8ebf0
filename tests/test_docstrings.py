"""Docstrings and signatures as users read them: ``help()``, IDE hovers, Jupyter's ``?``.

Oracles, each independent of the code it checks:
* numpydoc's validator (``numpydoc.validate``) for the style: every public class, method,
  property and function of ``chassis``, ``chassis.datasets`` and ``chassis.bench`` has a
  docstring with a one-line summary, and every parameter of its signature is documented in a
  NumPy ``Parameters`` section (none that does not exist); a function that returns something
  (by the stub's annotation) has a ``Returns`` section;
* the stub ``chassis/_chassis.pyi``, parsed with ``ast``: the runtime signature of every method
  of the native classes (what ``help()`` prints, from ``__text_signature__``) has the stub's
  parameter names, kinds and default values;
* doctest: the ``Examples`` sections run and print what they say.
"""

from __future__ import annotations

import ast
import doctest
import importlib
import importlib.util
import inspect
import re
from dataclasses import fields, is_dataclass
from pathlib import Path
from typing import Any

import chassis
import numpy as np
import pytest

numpydoc_validate = pytest.importorskip("numpydoc.validate")

STUB = Path(chassis.__file__).with_name("_chassis.pyi")
# The numpydoc checks that apply to every public object (the rest are matters of taste).
STYLE = {
    "GL08": "no docstring",
    "SS01": "no one-line summary",
    "SS06": "the summary is more than one line",
    "PR01": "a parameter is not documented",
    "PR02": "a documented parameter does not exist",
}
MODULES = ["chassis", "chassis.datasets", "chassis.bench"]


def _public_objects() -> list[tuple[str, Any]]:
    """(dotted name, object) of every public class, method, property and function."""
    found: dict[str, Any] = {}
    for module_name in MODULES:
        if importlib.util.find_spec(module_name) is None:
            continue
        module = importlib.import_module(module_name)
        names = getattr(module, "__all__", None) or [
            n for n in vars(module) if not n.startswith("_")
        ]
        for name in names:
            obj = getattr(module, name)
            if name.startswith("_") or inspect.ismodule(obj):
                continue
            if not (inspect.isclass(obj) or callable(obj)):
                continue  # constants
            if getattr(obj, "__module__", "").split(".")[0] != "chassis":
                continue  # re-exported from elsewhere (typing, numpy)
            if inspect.isclass(obj) and issubclass(obj, BaseException):
                found[f"{module_name}.{name}"] = obj  # the class docstring only
                continue
            found[f"{module_name}.{name}"] = obj
            if inspect.isclass(obj):
                for member in dir(obj):
                    if member.startswith("_"):
                        continue
                    # Members inherited from builtins or dataclass machinery are not ours.
                    owner = next((c for c in obj.__mro__ if member in vars(c)), None)
                    if owner is None or owner.__module__.split(".")[0] != "chassis":
                        continue
                    # Methods and properties; a dataclass field's class attribute is only its
                    # default (fields are checked in the class docstring, below).
                    static = vars(owner)[member]
                    if not (
                        inspect.isroutine(static)
                        or isinstance(static, (property, staticmethod, classmethod))
                        or inspect.isgetsetdescriptor(static)
                        or inspect.ismethoddescriptor(static)
                    ):
                        continue
                    found[f"{module_name}.{name}.{member}"] = getattr(obj, member)
    return sorted(found.items())


PUBLIC = _public_objects()


def _stub_classes() -> dict[str, dict[str, ast.FunctionDef]]:
    tree = ast.parse(STUB.read_text())
    classes: dict[str, dict[str, ast.FunctionDef]] = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            methods: dict[str, ast.FunctionDef] = {}
            for item in node.body:
                if isinstance(item, ast.FunctionDef):
                    methods.setdefault(item.name, item)  # a property's getter, not its setter
            classes[node.name] = methods
        elif isinstance(node, ast.FunctionDef):
            classes.setdefault("<module>", {})[node.name] = node
    return classes


STUB_CLASSES = _stub_classes()


def _returns_something(name: str) -> bool:
    """Whether a callable returns a value: by its annotation (Python code) or by the stub
    (the native classes, whose members may be inherited, as IndexReader's are)."""
    owner_name, _, attr = name.rpartition(".")
    obj = dict(PUBLIC)[name]
    try:
        annotation = inspect.signature(obj).return_annotation
    except (TypeError, ValueError):
        annotation = inspect.Signature.empty
    if annotation is not inspect.Signature.empty:
        return annotation not in (None, "None", "NoReturn")
    owner = dict(PUBLIC).get(owner_name)
    stub_class = "<module>"
    if inspect.isclass(owner):
        definer = next((c for c in owner.__mro__ if attr in vars(c)), owner)
        stub_class = definer.__name__
    stub = STUB_CLASSES.get(stub_class, {}).get(attr)
    if stub is None or stub.returns is None:
        return True
    return not (isinstance(stub.returns, ast.Constant) and stub.returns.value is None)


def test_the_walk_finds_the_api() -> None:
    """Guards the walk itself: a walk that found nothing would pass every test below."""
    names = {name for name, _ in PUBLIC}
    for expected in [
        "chassis.VectorIndex.search",
        "chassis.VectorIndex.add_batch",
        "chassis.VectorIndex.is_empty",
        "chassis.VectorIndex.dimensions",
        "chassis.IndexReader",
        "chassis.IndexOptions",
        "chassis.Snapshot.search_batch",
        "chassis.SearchResult.distance",
        "chassis.cpu_info",
        "chassis.datasets.load",
    ]:
        assert expected in names, expected
    assert len(PUBLIC) > 80


def _is_property(name: str) -> bool:
    owner_name, _, attr = name.rpartition(".")
    owner = dict(PUBLIC).get(owner_name)
    if not inspect.isclass(owner):
        return False
    static = inspect.getattr_static(owner, attr, None)
    # Python properties, and the getset descriptors of the native classes' getters.
    return isinstance(static, property) or inspect.isgetsetdescriptor(static)


@pytest.mark.parametrize("name", [name for name, _ in PUBLIC])
def test_docstring_style(name: str) -> None:
    result = numpydoc_validate.validate(name)
    errors = [f"{code} ({STYLE[code]}): {text}" for code, text in result["errors"] if code in STYLE]
    obj = dict(PUBLIC)[name]
    doc = inspect.getdoc(obj) or ""
    if (
        callable(obj)
        and not inspect.isclass(obj)
        and not _is_property(name)
        and _returns_something(name)
        and "Returns\n-------" not in doc
        and "Yields\n------" not in doc
    ):
        errors.append("RT01 (no Returns section) for a callable that returns a value")
    assert not errors, f"{name}:\n  " + "\n  ".join(errors)


def test_dataclass_fields_are_documented() -> None:
    """A dataclass's fields have no docstrings of their own: each must have an entry
    (``name : type``) in its class docstring's Parameters or Attributes section."""
    dataclasses_found = [
        (name, obj) for name, obj in PUBLIC if inspect.isclass(obj) and is_dataclass(obj)
    ]
    assert any(name == "chassis.IndexOptions" for name, _ in dataclasses_found)
    for name, cls in dataclasses_found:
        doc = inspect.getdoc(cls) or ""
        missing = [
            f.name
            for f in fields(cls)
            if not f.name.startswith("_") and not re.search(rf"^{f.name} :", doc, re.MULTILINE)
        ]
        assert not missing, f"{name}: fields without an entry in the docstring: {missing}"


def _stub_parameters(fn: ast.FunctionDef) -> list[tuple[str, str, Any]]:
    """(name, kind, default) per parameter of a stub function, as inspect names them."""
    args = fn.args
    out: list[tuple[str, str, Any]] = []
    positional = args.posonlyargs + args.args
    defaults: list[Any] = [inspect.Parameter.empty] * (len(positional) - len(args.defaults))
    defaults += [ast.literal_eval(d) for d in args.defaults]
    for i, (arg, default) in enumerate(zip(positional, defaults)):
        kind = "POSITIONAL_ONLY" if i < len(args.posonlyargs) else "POSITIONAL_OR_KEYWORD"
        out.append((arg.arg, kind, default))
    if args.vararg:
        out.append((args.vararg.arg, "VAR_POSITIONAL", inspect.Parameter.empty))
    for arg, d in zip(args.kwonlyargs, args.kw_defaults):
        out.append(
            (arg.arg, "KEYWORD_ONLY", inspect.Parameter.empty if d is None else ast.literal_eval(d))
        )
    if args.kwarg:
        out.append((args.kwarg.arg, "VAR_KEYWORD", inspect.Parameter.empty))
    return out


NATIVE = [
    (cls, method)
    for cls, methods in STUB_CLASSES.items()
    for method in methods
    if cls != "<module>" and (not method.startswith("_") or method in ("__new__",))
]


@pytest.mark.parametrize(("cls", "method"), NATIVE)
def test_signature_matches_the_stub(cls: str, method: str) -> None:
    stub = STUB_CLASSES[cls][method]
    if any(isinstance(d, ast.Name) and d.id == "property" for d in stub.decorator_list):
        return  # a property: no signature
    runtime = getattr(getattr(chassis._chassis, cls), method)
    target = getattr(chassis._chassis, cls) if method == "__new__" else runtime
    signature = inspect.signature(target)
    got = [(p.name, p.kind.name, p.default) for p in signature.parameters.values()]
    want = _stub_parameters(stub)
    if method == "__new__":
        want = want[1:]  # cls: a class's signature leaves it out
    elif not any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in stub.decorator_list):
        want = want[1:]  # self
        got = got[1:] if got and got[0][0] == "self" else got
    assert got == want, f"{cls}.{method}: runtime {signature}, stub {[w[0] for w in want]}"


def test_help_shows_the_real_defaults() -> None:
    """What the issue saw: help() showed k=None while searches return 10 results."""
    for cls in (chassis.VectorIndex, chassis.Snapshot):
        for method in ("search", "search_batch"):
            parameters = inspect.signature(getattr(cls, method)).parameters
            assert parameters["k"].default == 10, (cls, method)
    index = chassis.VectorIndex(None, 2)
    index.add_batch(np.random.default_rng(0).random((20, 2), dtype=np.float32))
    assert len(index.search([0.5, 0.5])) == 10  # the default really is 10
    ids, _ = index.search_batch(np.zeros((3, 2), dtype=np.float32))
    assert ids.shape == (3, 10)
    text = chassis.VectorIndex.search.__doc__ or ""
    assert "Parameters\n----------" in text and "k : int, default 10" in text


def _examples() -> list[tuple[str, str]]:
    out = []
    for name, obj in PUBLIC:
        doc = inspect.getdoc(obj)
        if doc and ">>>" in doc:
            out.append((name, doc))
    return out


@pytest.mark.parametrize(("name", "doc"), _examples(), ids=[n for n, _ in _examples()])
def test_examples_run(name: str, doc: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # examples that write files write them here
    module = inspect.getmodule(dict(PUBLIC)[name])
    globs = dict(vars(module)) if module is not None else {}  # as doctest gives a module's
    test = doctest.DocTestParser().get_doctest(doc, globs, name, None, 0)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    report: list[str] = []
    runner.run(test, out=report.append)
    assert runner.failures == 0, "".join(report)
