"""How an external backend says it cannot run here or does not implement something."""
from __future__ import annotations


class NotRun(Exception):
    """Not possible here (no torch, no CUDA, no TransformerEngine): disposition not_run."""


class NotSupported(Exception):
    """The backend does not implement this recipe or option: disposition not_supported."""
