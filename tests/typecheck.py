"""Calling eqxrl as a user does: without the jaxtyping/beartype hook the test run switches on."""

import contextlib

import jaxtyping


@contextlib.contextmanager
def no_runtime_typecheck():
    """Call eqxrl as a user does, without the jaxtyping/beartype test hook (reaches our own ValueErrors)."""
    jaxtyping.config.update("jaxtyping_disable", True)
    try:
        yield
    finally:
        jaxtyping.config.update("jaxtyping_disable", False)
