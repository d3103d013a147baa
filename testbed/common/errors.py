"""One error type for bad input: names the file, the key and what was expected."""

from __future__ import annotations

from pathlib import Path


class InputError(Exception):
    """Bad user input. The CLI prints it as one line and exits with status 2."""

    def __init__(self, file: str | Path | None, key: str | None, expected: str) -> None:
        self.file = str(file) if file is not None else None
        self.key = key
        self.expected = expected
        super().__init__(self.message())

    def message(self) -> str:
        parts = [p for p in (self.file, self.key) if p]
        where = ": ".join(parts)
        return f"{where}: expected {self.expected}" if where else f"expected {self.expected}"
