"""Errors raised by the model.

Each error carries a stable ``code`` (a short snake_case name listed in
``spec/ERRORS.md``) so vectors and conformance reports can name the condition
without matching message text. The builtin base class (``ValueError``,
``TypeError``, ``RuntimeError``) is what an implementation must raise.
"""

from __future__ import annotations

from collections.abc import Callable


class SpecError(Exception):
    """Base of every error the model raises; ``code`` names the condition."""

    code: str

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{message} [{code}]")
        self.code = code


class SpecValueError(SpecError, ValueError):
    """A value is out of range, inconsistent, or mismatched."""


class SpecTypeError(SpecError, TypeError):
    """A value has the wrong type."""


class SpecRuntimeError(SpecError, RuntimeError):
    """An operation is not allowed in the current lifecycle state."""


def require(condition: bool, code: str, message: str) -> None:
    """Raise ``SpecValueError(code)`` unless ``condition`` holds."""
    if not condition:
        raise SpecValueError(code, message)


class InvariantViolation(AssertionError):
    """A named invariant does not hold; ``detail`` describes the counterexample."""

    def __init__(self, name: str, detail: str) -> None:
        super().__init__(f"{name} violated: {detail}")
        self.name = name
        self.detail = detail


def check(condition: bool, name: str, detail: str | Callable[[], str]) -> None:
    """Raise ``InvariantViolation(name)`` unless ``condition`` holds (``detail`` may be lazy)."""
    if not condition:
        raise InvariantViolation(name, detail() if callable(detail) else detail)
