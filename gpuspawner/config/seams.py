"""Whether a class offers everything a protocol (a seam) states: for the checks at the
boundary (the admin tools' reading of a config) and the tests that hold every implementation
and double to its seam (tests/architecture), where mypy's static check cannot reach."""

from __future__ import annotations

import inspect
import re
from typing import Any

ATTRIBUTE = re.compile(r"\bself\.(\w+)")


def members(protocol: type) -> list[str]:
    """The names a protocol states: its methods, properties and annotated attributes."""
    found: dict[str, None] = {}
    for klass in reversed(protocol.__mro__):
        if klass is object or getattr(klass, "_is_protocol", False) is False:
            continue
        names = [*vars(klass), *getattr(klass, "__annotations__", {})]
        found.update(dict.fromkeys(n for n in names if not n.startswith("_")))
    return list(found)


def missing(implementation: Any, protocol: type) -> list[str]:
    """What `implementation` (a class or an instance) lacks of `protocol`, by name: a member
    it does not have, or a method whose parameters cannot take the protocol's."""
    lacking = []
    for name in members(protocol):
        stated = inspect.getattr_static(protocol, name, None)  # None: an annotation
        try:
            given = inspect.getattr_static(implementation, name)
        except AttributeError:
            if not _set_on_instances(implementation, name):
                lacking.append(name)
            continue
        if inspect.isfunction(stated) and not _takes(given, stated):
            lacking.append(f"{name}{inspect.signature(stated)}")
    return lacking


def _set_on_instances(implementation: Any, name: str) -> bool:
    """An attribute each instance gets (a trait's, an annotation's, an `__init__`'s) need
    not be on the class."""
    klass = implementation if isinstance(implementation, type) else type(implementation)
    traits = getattr(klass, "class_traits", None)
    if traits is not None and name in traits():
        return True
    for owner in klass.__mro__:
        if name in getattr(owner, "__annotations__", {}):
            return True
        init = vars(owner).get("__init__")
        if init is not None and name in _assigned_in(init):
            return True
    return False


def _assigned_in(function: Any) -> set[str]:
    """The attributes `function` assigns on `self` (`self.a = …`, `self.a, self.b = …`)."""
    try:
        lines = inspect.getsource(function).splitlines()
    except (OSError, TypeError):
        return set()
    targets = [line.split("=")[0] for line in lines if "=" in line and "==" not in line]
    return {name for target in targets for name in ATTRIBUTE.findall(target)}


def _takes(given: Any, stated: Any) -> bool:
    """Whether `given` can be called as the protocol's method `stated` is."""
    if isinstance(given, staticmethod | classmethod):
        given = given.__func__
    if not callable(given):
        return False
    try:
        wanted = inspect.signature(stated)
        offered = inspect.signature(given)
    except (TypeError, ValueError):
        return True
    positional = [
        p
        for p in wanted.parameters.values()
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    try:
        offered.bind(*positional)
    except TypeError:
        return False
    return True
