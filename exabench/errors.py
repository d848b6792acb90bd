"""Errors a user can act on: each names the file, the key, the value and what is valid."""

from __future__ import annotations


class ExabenchError(Exception):
    """Base for errors exabench reports to a user without a traceback."""


class ConfigError(ExabenchError):
    """A config, site or parameter value that is not valid.

    The message always says where (file), what (key path), the offending value
    and what would be valid, so that the user can fix it without reading code.
    """

    def __init__(self, file: str, key: str, value: object, valid: str, problem: str = "is not valid"):
        self.file, self.key, self.value, self.valid, self.problem = file, key, value, valid, problem
        shown = repr(value)
        if len(shown) > 120:
            shown = shown[:117] + "..."
        super().__init__(f"{file}: key '{key}' = {shown} {problem}; valid: {valid}")


class NotRunnableHere(RuntimeError):
    """A run that asks for what this hardware lacks (tf32 without an Ampere GPU): recorded `skipped` with
    this message, like an NCCL allreduce without a GPU, and not retried, since a retry cannot help. An
    acceptance still judges a skipped run a failure: a GPU site whose node cannot run it fails the node."""


class LayoutError(ExabenchError):
    """A resource request that cannot fit the site (names site, field, value and limit)."""

    def __init__(self, site: str, field: str, value: object, limit: str):
        self.site, self.field, self.value, self.limit = site, field, value, limit
        super().__init__(f"site '{site}': {field} = {value!r} does not fit; limit: {limit}")


class ContainerError(ConfigError):
    """An image that is missing, unbuilt or not the one the site pinned."""
