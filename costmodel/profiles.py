"""Named sets of a cost model's constants ("profiles", one per kind of executor) and the one
way a name is looked up, so that every model that has them (``rate``, ``dist``) answers an
unknown name with the same one-line error."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar

from reopt.costmodel.errors import ReoptError

T = TypeVar("T")


def pick(profiles: Mapping[str, T], default: str, name: str | None, kind: str) -> T:
    """The profile ``name`` of ``profiles`` (None: ``default``); an unknown name is a
    one-line error naming the ``kind`` (``rate``, ``dist``) and the choices."""
    try:
        return profiles[default if name is None else name]
    except KeyError:
        raise ReoptError(f"unknown {kind} profile '{name}' (choose from "
                         f"{', '.join(profiles)})") from None
