"""Errors that map to the CLI's exit codes: bad input (2), a failed environment (3)."""
from __future__ import annotations


class MoenumError(Exception):
    """Base class of moenum's own errors."""


class ScenarioError(MoenumError, ValueError):
    """Bad input: names the file, the line and the key. The CLI exits with code 2."""

    def __init__(self, message: str, file: str | None = None, line: int | None = None,
                 key: str | None = None):
        self.file, self.line, self.key, self.message = file, line, key, message
        where = ""
        if file:
            where = f"{file}:{line}: " if line else f"{file}: "
        super().__init__(f"{where}{key + ': ' if key else ''}{message}")


class EnvironmentFailure(MoenumError):
    """The machine, not the input, is at fault: a full disk, an unwritable output folder, a point that
    cannot fit in memory, a broken install, no GPU where one is required. One clear line that says
    what and where; the CLI exits with code 3."""
