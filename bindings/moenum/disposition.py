"""Dispositions (interfaces.md): one backend's result in one scenario point, and the verdict of a
point or a campaign. The strings are the C++ enum's (core/include/moenum/disposition.h), the same in
HDF5, index.json and JUnit."""
from __future__ import annotations

import enum
from typing import Iterable

from . import _core
from .traits import under_test

try:
    from enum import StrEnum
except ImportError:  # Python 3.10
    class StrEnum(str, enum.Enum):
        def __str__(self) -> str:
            return str.__str__(self)

# Disposition.PASSED == "passed", ...: members are the strings themselves.
Disposition = StrEnum("Disposition", [(s.upper(), s) for s in _core.DISPOSITIONS])

PASSED, FAILED, ERROR = Disposition.PASSED, Disposition.FAILED, Disposition.ERROR
NOT_VERIFIED, NOT_RUN, NOT_SUPPORTED = Disposition.NOT_VERIFIED, Disposition.NOT_RUN, Disposition.NOT_SUPPORTED


def ran_ok(disposition: str) -> bool:
    """It ran and nothing found it wrong: passed, or not (yet) verified."""
    return disposition in (PASSED, NOT_VERIFIED)


def combine(verdicts: Iterable[str]) -> Disposition:
    """The verdict of several: an error anywhere, else a failure anywhere, else a pass, else nothing
    was verified."""
    verdicts = set(verdicts)
    for d in (ERROR, FAILED, PASSED):
        if d in verdicts:
            return d
    return NOT_VERIFIED


def verdict(dispositions: dict, checks_passed: bool = True) -> Disposition:
    """The verdict of one scenario point from its backends' dispositions: passed only when a backend
    under test passed; an oracle's pass, a skip or a not_verified verifies nothing."""
    def one(backend: str, d: str) -> Disposition:
        if d in (ERROR, FAILED):
            return Disposition(d)
        return PASSED if d == PASSED and under_test(backend) else NOT_VERIFIED
    return combine([one(b, d) for b, d in dispositions.items()] + ([] if checks_passed else [FAILED]))
