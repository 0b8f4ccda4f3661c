"""``python -m gradverify.cli``: the ``gradverify`` program."""

from . import run

__all__ = ["run"]

run()
