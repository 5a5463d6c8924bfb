"""Request parameters, checked: every problem is a ``tensorboard.errors`` client error
(400) naming the parameter, never a 500. Values are looked up, never used to build paths."""

from __future__ import annotations

import re

from tensorboard import errors
from werkzeug import wrappers

from tb_syncfinder.catalogue import KIND_NAMES

MAX_PARAM_CHARS = 2048


def text(request: wrappers.Request, name: str, required: bool = False) -> str | None:
    """One value of ``name`` (an empty value counts as absent)."""
    values = request.args.getlist(name)
    if len(values) > 1:
        raise errors.InvalidArgumentError(f"parameter {name!r} given {len(values)} times")
    value = values[0] if values else None
    if value == "":
        value = None
    if value is None:
        if required:
            raise errors.InvalidArgumentError(f"parameter {name!r} is required")
        return None
    if len(value) > MAX_PARAM_CHARS or "\x00" in value:
        raise errors.InvalidArgumentError(f"parameter {name!r} is malformed")
    return value


def integer(
    request: wrappers.Request, name: str, default: int | None, lo: int, hi: int
) -> int | None:
    value_text = text(request, name)
    if value_text is None:
        return default
    if not re.fullmatch(r"-?[0-9]{1,12}", value_text.strip()):
        raise errors.InvalidArgumentError(
            f"parameter {name!r} must be an integer, got {value_text!r}"
        )
    value = int(value_text)
    if not lo <= value <= hi:
        raise errors.InvalidArgumentError(f"parameter {name!r} must be in {lo}..{hi}, got {value}")
    return value


def number(request: wrappers.Request, name: str, lo: float, hi: float) -> float:
    """A required decimal number (``46.97``, ``4.7e1``) in ``lo``..``hi``: no NaN, no
    infinity, no hex."""
    value_text = text(request, name, required=True)
    assert value_text is not None
    if not re.fullmatch(r"[0-9]{0,24}(\.[0-9]{0,24})?([eE][-+]?[0-9]{1,3})?", value_text.strip()):
        raise errors.InvalidArgumentError(
            f"parameter {name!r} must be a number, got {value_text!r}"
        )
    try:
        value = float(value_text)
    except ValueError:  # "." or "e5": matched, but no number
        raise errors.InvalidArgumentError(
            f"parameter {name!r} must be a number, got {value_text!r}"
        ) from None
    if not lo <= value <= hi:
        raise errors.InvalidArgumentError(
            f"parameter {name!r} must be in {lo:g}..{hi:g}, got {value:g}"
        )
    return value


def flag(request: wrappers.Request, name: str) -> bool:
    value = text(request, name)
    if value in (None, "0", "false"):
        return False
    if value in ("1", "true"):
        return True
    raise errors.InvalidArgumentError(f"parameter {name!r} must be 0 or 1, got {value!r}")


def kind(request: wrappers.Request) -> str | None:
    value = text(request, "kind")
    if value is not None and value not in KIND_NAMES:
        raise errors.InvalidArgumentError(f"unknown kind {value!r}; one of {', '.join(KIND_NAMES)}")
    return value


def step(request: wrappers.Request) -> int | None:
    return integer(request, "step", None, -(10**12), 10**12)
