"""Argument checks shared by the public entry points.

The habits, everywhere: ``TypeError`` for a wrong type, ``ValueError`` for a wrong value, the bad
value quoted with ``!r`` and what is accepted said; an unknown keyword argument is a
``TypeError`` naming the closest accepted one.
"""

from __future__ import annotations

import decimal
import difflib
import functools
import inspect
import operator
import os
import sys
from collections.abc import Callable, Collection, Iterable
from typing import Any, Final, ParamSpec, SupportsIndex, TypeVar

_P = ParamSpec("_P")
_R = TypeVar("_R")

#: Characters a MongoDB collection name may not hold (``$`` is for operators and the oplog).
_COLLECTION_FORBIDDEN: Final = ("$", "\0")


#: The folders of this package and of MongoEngine: a warning names the first frame outside them.
_LIBRARY_DIRS: Final = tuple(
    os.path.dirname(module.__file__) + os.sep
    for module in (sys.modules[__name__.rpartition(".")[0]], __import__("mongoengine"))
    if module.__file__
)


def user_stacklevel() -> int:
    """The ``stacklevel`` for :func:`warnings.warn`, called by the caller of this function, that
    names the first frame outside this package and MongoEngine: the user's code, whichever way
    it reached the warning (a constructor, a first ``save()``)."""
    level, frame = 2, sys._getframe(2)  # level 2: the frame that called the warning's caller
    while frame.f_back is not None and frame.f_code.co_filename.startswith(_LIBRARY_DIRS):
        level, frame = level + 1, frame.f_back
    return level


def is_int(value: object) -> bool:
    """Whether ``value`` is an int, bools excluded (``True`` is not a count)."""
    return isinstance(value, int) and not isinstance(value, bool)


def integer_like(value: object) -> int | None:
    """``value`` as an int if it is an integer of another number type: an integral
    :class:`~decimal.Decimal`, or a type that says it is one by ``__index__`` (NumPy's and
    pandas' ints, which MongoEngine's ``IntField`` takes by ``int()``); None for anything else
    (a bool, a float, a str and an int itself included: their callers read those)."""
    if isinstance(value, (bool, int, float, str)):
        return None
    if isinstance(value, decimal.Decimal):
        return int(value) if value.is_finite() and value == value.to_integral_value() else None
    if isinstance(value, SupportsIndex):
        return operator.index(value)
    return None


def check_int(name: str, value: object, low: int | None = None, high: int | None = None) -> int:
    """``value`` if it is an int within ``low..high`` (either bound optional).

    Raises:
        TypeError: ``value`` is not an int (a bool is not).
        ValueError: ``value`` is out of range.
    """
    if not is_int(value):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}: {value!r}")
    assert isinstance(value, int)
    if (low is not None and value < low) or (high is not None and value > high):
        if high is None:
            accepted = f"an int >= {low}"
        elif low is None:
            accepted = f"an int <= {high}"
        else:
            accepted = f"an int from {low} to {high}"
        raise ValueError(f"{name}={value!r} is out of range: expected {accepted}")
    return value


def check_room(name: str, count: int) -> None:
    """Check that a list of ``count`` values can be held in memory, before any is made (a
    counter moved, a lock held while they are made).

    Raises:
        ValueError: it cannot (the list could not be allocated).
    """
    try:
        room = [None] * count
    except (MemoryError, OverflowError):
        raise ValueError(
            f"{name}={count:,}: a list of that many values does not fit in memory; ask for "
            "fewer at a time"
        ) from None
    del room


def check_bool(name: str, value: object) -> bool:
    """``value`` if it is a bool.

    Raises:
        TypeError: it is not (``1`` and ``"yes"`` are not bools).
    """
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool (True or False), not {value!r}")
    return value


def check_callable(name: str, value: object, what: str) -> None:
    """Raise ``TypeError`` unless ``value`` is callable; ``what`` says what it must be."""
    if not callable(value):
        raise TypeError(f"{name} must be {what}, not {value!r}")


def check_collection_name(name: str, value: object) -> str:
    """``value`` if it is a collection name a document may be written to.

    Raises:
        TypeError: ``value`` is not a str.
        ValueError: it is empty, holds ``$`` or a NUL, starts or ends with ``.``, holds ``..``,
            or starts with ``system.`` (reserved by the server).
    """
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a collection name (str), not {value!r}")
    if (
        not value
        or any(char in value for char in _COLLECTION_FORBIDDEN)
        or value.startswith((".", "system."))
        or value.endswith(".")
        or ".." in value
    ):
        raise ValueError(
            f"{name}={value!r} is not a usable collection name: expected a non-empty name "
            "without '$', NUL or '..', not starting or ending with '.', not starting with "
            "'system.'"
        )
    return value


def closest(name: str, candidates: Iterable[str]) -> str | None:
    """The candidate ``name`` was most likely meant to be, or None if none is close."""
    matches = difflib.get_close_matches(name, list(candidates), n=1, cutoff=0.6)
    return matches[0] if matches else None


def unexpected_keywords(
    owner: str, given: Iterable[str], accepted: Collection[str], suggest_from: Iterable[str] = ()
) -> TypeError:
    """The error for keyword arguments ``owner`` does not take, with the closest valid names.

    Args:
        owner: what was called, e.g. ``"SequenceField()"``.
        given: the unknown names.
        accepted: every name that is taken (listed in the message).
        suggest_from: further names to suggest among (default: ``accepted``).
    """
    pool = sorted({*accepted, *suggest_from})
    parts = []
    for name in given:
        match = closest(name, pool)
        parts.append(f"{name!r} (did you mean {match!r}?)" if match else repr(name))
    noun = "argument" if len(parts) == 1 else "arguments"
    return TypeError(
        f"{owner} got an unexpected keyword {noun} {', '.join(parts)}; accepted: {', '.join(pool)}"
    )


def keyword_names(function: Callable[..., Any]) -> tuple[str, ...]:
    """The names ``function`` takes as keyword arguments (``self``/``cls`` excluded)."""
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return tuple(
        parameter.name
        for parameter in inspect.signature(function).parameters.values()
        if parameter.kind in kinds and parameter.name not in ("self", "cls")
    )


def suggest_keywords(function: Callable[_P, _R]) -> Callable[_P, _R]:
    """Make an unknown keyword argument of ``function`` a ``TypeError`` naming the closest one.

    Python's own error names the unknown keyword only; this one also says which was meant
    (``clok=`` -> ``clock``). For constructors (called rarely): the check costs about 1 us.
    """
    accepted = frozenset(keyword_names(function))
    owner = function.__qualname__.removesuffix(".__init__") + "()"

    @functools.wraps(function)
    def checked(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        unknown = [name for name in kwargs if name not in accepted]
        if unknown:
            raise unexpected_keywords(owner, unknown, accepted)
        return function(*args, **kwargs)

    return checked


__all__ = [
    "check_bool",
    "check_callable",
    "check_collection_name",
    "check_int",
    "closest",
    "is_int",
    "keyword_names",
    "suggest_keywords",
    "unexpected_keywords",
]
