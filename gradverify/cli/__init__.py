"""The ``gradverify`` command.

    gradverify check TARGET... [--backend B...] [--impl I] [--dtype D...] [--seed S]
                     [--max-examples N] [--order N] [--report DIR] [--format md,json,junit,html]
                     [--scheduler ADDRESS | --workers N] [--shard K/N]
    gradverify merge FILE... [--report DIR] [--format ...]
    gradverify list
    gradverify triage junit FILE.xml... [--report DIR]
    gradverify triage rerun TARGET|NODE_ID [--seeds S] [--threads T,T] [--report DIR]
    gradverify audit torch [--ops NAME...] ... | gradverify audit merge FILE... [--report DIR]
    gradverify write RECORDS|PACKAGE [-o FILE]
    gradverify report FILE.json [--format html|md] [--output PATH]

A target is a bundled op (``bias_act``, ``bias_act:swish``, ``layer_norm``,
``all``), a built-in example (``examples``, ``example:seed-bug``) or a user's
``module:function`` with ``--strategy module:name``. Each target x backend x
impl x dtype is one case run through ``gv.verify``. Options come before or
after the targets (``parser`` and ``argv``: how a word is read).

Exit status: 0 all passed, 1 a gradient check failed, 2 usage or internal error,
130 interrupted. A sweep's last line reads ``N passed, N failed`` (plus
skipped/inconclusive counts). gradverify.ops is imported by the subcommands
that use it (with the strategies it costs ~90 ms of start-up, and Hypothesis).

The modules: ``parser`` (the arguments, their help and examples), ``argv``
(options anywhere), ``sweep`` (check and merge), ``commands`` (the others),
``signals`` (SIGINT and SIGTERM), ``paths`` (paths as the reader sees them).
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

from .._audit import command as _audit_command
from .._errors import UsageError
from ..backends import BACKENDS
from .commands import junit as _junit, list_ as _list, report as _report, rerun as _rerun, write as _write
from .parser import build_parser
from .signals import Signals, in_finalizer as _in_finalizer  # noqa: F401  (the signal tests name it here)
from .sweep import check as _check, merge as _merge

__all__ = ["BACKENDS", "build_parser", "main", "run"]


def run() -> None:
    """The ``gradverify`` program: ``main`` with the process's arguments, and
    its exit status - 130 for a signal that lands at any point, the
    interpreter's shutdown included."""
    raise SystemExit(main(program=True))


def main(argv: Sequence[str] | None = None, program: bool = False) -> int:
    """The command on ``argv`` (default: the process's); its exit status.
    ``program``: the process ends with it (see ``run``).

    Example::

        main(["check", "bias_act:relu", "--backend", "numpy", "--no-report"])  # 0: it passed
    """
    with Signals(program) as signals:
        code = _main(list(sys.argv[1:] if argv is None else argv))
    return 130 if signals.received else code


def _current_directory_importable() -> None:
    """``module:function`` targets import from the current directory, as under
    ``python -m`` and pytest: the console script's own ``sys.path[0]`` is its
    ``bin/`` directory. Spawned ``--workers`` inherit the path; Dask workers
    need the module importable where they run."""
    import os

    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)


def _audit(args: argparse.Namespace, command: str) -> int:
    # the audit prints its report directory as given and a separator after it:
    # given without one of its own (``--report audit/`` is said ``audit/``, not ``audit//``)
    args.report = str(Path(args.report))
    return _audit_command.main(args, command)


def _main(argv: list[str]) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0) and 2

    _current_directory_importable()
    command = "gradverify " + shlex.join(argv)  # (as typed: what the reports say reproduces the run)
    run_command = {  # (looked up at each call: a test may replace one)
        "check": lambda: _check(args, command),
        "merge": lambda: _merge(args, command),
        "list": lambda: _list(),
        "audit": lambda: _audit(args, command),
        "triage": lambda: _junit(args) if args.mode == "junit" else _rerun(args),
        "write": lambda: _write(args),
        "report": lambda: _report(args),
    }[args.command]
    try:
        return run_command()
    except UsageError as e:
        print(f"gradverify: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # outside a sweep (which writes what finished): nothing to keep
        print("gradverify: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # gradverify's own bug: say so, with what to report, exit 2
        import traceback

        traceback.print_exc()
        print(
            f"gradverify: internal error: {type(e).__name__}: {e}\n"
            "This is a bug in gradverify, not in your input: please report it with the traceback above "
            "and the command that ran.",
            file=sys.stderr,
        )
        return 2
