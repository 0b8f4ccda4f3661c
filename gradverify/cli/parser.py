"""The command's arguments: every subcommand's options, their help with its
default, and examples at the end of each ``--help``.

``Parser`` is argparse's parser with two changes, both for the reader: a
subcommand's words are arranged before argparse reads them (``argv``:
options before or after the targets), and an error ends with the way to
its fix. ``Help`` fills the prose to the terminal, prints the examples as
written and says the default of every option that has one."""

from __future__ import annotations

import argparse
import sys
import textwrap
from collections.abc import Sequence
from typing import Any, NoReturn

from .._audit import command as _audit_command
from .._sweep.reports import FORMATS
from .._verify import MAX_SHRINKING_SECONDS
from ..backends import BACKENDS
from .argv import arrange, subcommands

__all__ = ["DTYPES", "Help", "Parser", "build_parser", "default_text", "examples"]

#: the dtypes a sweep checks in (``--dtype``)
DTYPES = ("float64", "float32", "float16", "bfloat16")
_REPORT_FORMATS = ["md", "json", "junit", "html"]  # (the order the files are listed in)


def default_text(action: argparse.Action) -> str | None:
    """An option's default as one types it (a list comma-separated), or None
    where leaving the option out means nothing to say (off, none, empty)."""
    d = action.default
    if not action.option_strings or d is None or d is False or d == argparse.SUPPRESS or d == []:
        return None
    if isinstance(d, (list, tuple)):
        return ",".join(map(str, d))
    return f"{d:g}" if isinstance(d, float) else str(d)


class Help(argparse.HelpFormatter):
    """Examples as written, prose paragraphs filled to the terminal; each
    option's help followed by its default, unless the help already says it
    (argparse's own ``ArgumentDefaultsHelpFormatter`` would print lists as
    Python lists, and ``None`` for an option whose absence means something)."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        # (argparse's hook for descriptions and epilogs: RawDescriptionHelpFormatter keeps all of a text
        # as written, the plain formatter none of it; here a paragraph of indented lines, an example, is kept)
        paragraphs = text.split("\n\n")
        return "\n\n".join(
            "\n".join(indent + ln for ln in p.splitlines())
            if p.startswith("examples:") or p.startswith("  ")
            else textwrap.fill(" ".join(p.split()), width, initial_indent=indent, subsequent_indent=indent)
            for p in paragraphs
        )

    def _get_help_string(self, action: argparse.Action) -> str | None:
        # (the one method argparse's formatters override to change an option's help)
        text = action.help or ""
        shown = default_text(action)
        if shown is None or "default" in text:
            return text
        return f"{text} (default: {shown.replace('%', '%%')})".strip()


class Parser(argparse.ArgumentParser):
    """argparse's parser; a subcommand's words arranged first (``argv.arrange``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", Help)
        super().__init__(*args, **kwargs)

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        if not subcommands(self):  # (a parser of subcommands hands their words on as they are)
            args = arrange(self, sys.argv[1:] if args is None else args)
        return super().parse_known_args(args, namespace)

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        fix = ""
        if "Fix:" not in message:
            lines = (self.epilog or "").splitlines()
            example = next((ln.partition("#")[0].strip() for ln in lines if ln.startswith("  gradverify")), None)
            fix = f" Fix: e.g. `{example}`;" if example else " Fix:"
            fix += f" `{self.prog} --help` lists each option with its default, and examples."
        self.exit(2, f"{self.prog}: error: {message.rstrip('.')}.{fix}\n")


def examples(*lines: str) -> str:
    """An epilog: real command lines, each checked to parse by the tests."""
    return "examples:\n" + "\n".join("  " + ln for ln in lines)


def _formats(text: str) -> list[str]:
    fs = [f.strip() for f in text.split(",") if f.strip()]
    bad = [f for f in fs if f not in FORMATS]
    if bad or not fs:
        raise argparse.ArgumentTypeError(
            f"expected some of {','.join(FORMATS)}, comma-separated; found {text!r}. Fix: e.g. --format md,json"
        )
    return fs


_OPTIONS_ANYWHERE = (
    "Options may come before or after the targets. An option of several values takes the words after it "
    "that are its values (--backend torch jax), a comma list (--backend torch,jax), or the option repeated."
)


def build_parser() -> argparse.ArgumentParser:
    """The ``gradverify`` command's parser, every subcommand in it."""
    p = Parser(
        prog="gradverify",
        description="Prove gradients right, or show where they are wrong.\n\n"
        "Each subcommand's --help lists its options, each with its default, and examples. " + _OPTIONS_ANYWHERE,
        epilog=examples(
            "gradverify check bias_act:swish --backend torch",
            "gradverify check all --shard 1/4 --report r1       # one CI job of four; merge joins them",
            "gradverify merge r1/results.jsonl r2/results.jsonl r3/results.jsonl r4/results.jsonl",
            "gradverify triage rerun tests/test_grads.py::test_swish",
        ),
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=Parser)
    _check(sub)
    _merge(sub)
    help_ = "the bundled ops and activations, with their kinks and conventions"
    sub.add_parser("list", help=help_, description=help_, epilog=examples("gradverify list"))
    _triage(sub)
    _audit_command.add_parser(sub)
    _write(sub)
    _report(sub)
    return p


def _check(sub: Any) -> None:
    help_ = "verify bundled ops, examples, or module:function targets"
    c = sub.add_parser(
        "check",
        help=help_,
        description=f"{help_}: each target x backend x impl x dtype is one case, run through gv.verify. "
        "Exit status 0 all passed, 1 a gradient check failed, 2 a usage or internal error.\n\n" + _OPTIONS_ANYWHERE,
        epilog=examples(
            "gradverify check bias_act:swish --backend torch",
            "gradverify check --backend torch jax --dtype float32,float64 layer_norm rms_norm",
            "gradverify check mymodule:softplus --strategy mymodule:args --report reports",
            "gradverify check all --shard 1/4 --report r1   # one CI job of four; gradverify merge joins them",
        ),
    )
    c.add_argument(
        "targets",
        nargs="+",
        metavar="TARGET",
        help="all, bias_act[:NAME], a normalization, an example, module:fn or module:fn=module:strategy "
        "(gradverify list names the bundled ones)",
    )
    c.add_argument(
        "--backend", nargs="+", choices=(*BACKENDS, "all"), default=["all"], metavar="BACKEND",
        help=f"{', '.join(BACKENDS)} or all",
    )  # fmt: skip
    c.add_argument(
        "--impl", choices=("reference", "fused", "both"), default="both",
        help="reference (the op written plainly, the framework's AD), fused (its hand-written rules) or both",
    )  # fmt: skip
    c.add_argument("--dtype", nargs="+", choices=DTYPES, default=["float64"], metavar="DTYPE", help=", ".join(DTYPES))
    c.add_argument("--seed", type=int, default=0, help="the base seed; each case derives its own from it and its id")
    c.add_argument("--max-examples", type=int, default=10, metavar="N", help="drawn inputs per case")
    c.add_argument(
        "--order", type=int, default=1, metavar="N", help="1: first derivatives; 2 (or any N) also the rules' own"
    )
    c.add_argument("--batched", action="store_true", help="also check the JVP and VJP under vmap (torch, jax)")
    c.add_argument(
        "--max-shrinking-seconds", type=float, default=MAX_SHRINKING_SECONDS, metavar="S",
        help="stop shrinking a failing case after S seconds",
    )  # fmt: skip
    c.add_argument(
        "--strategy", metavar="MODULE:NAME", action="append", default=[],
        help="the argument strategy of a module:function target (one per such target, in order; one serves all)",
    )  # fmt: skip
    c.add_argument("--report", metavar="DIR", default="reports", help="the directory the reports are written to")
    c.add_argument("--no-report", action="store_true", help="write no files (the counterexamples are not kept)")
    c.add_argument("--format", type=_formats, default=_REPORT_FORMATS, help="some of md,json,junit,html")
    c.add_argument("--workers", type=int, default=1, metavar="N", help="spawned worker processes; 1 runs here")
    c.add_argument(
        "--scheduler", metavar="tcp://HOST:PORT",
        help="run the cases on this Dask cluster, the dask extra (default: none, they run here)",
    )  # fmt: skip
    c.add_argument(
        "--shard", metavar="K/N",
        help="run every N-th case from the K-th, one CI job of N; merge joins them (default: every case)",
    )  # fmt: skip


def _merge(sub: Any) -> None:
    help_ = "join the results of a sweep's shards into one report"
    m = sub.add_parser(
        "merge",
        help=help_,
        description=f"{help_}: every shard K/N of one sweep (gradverify check --shard K/N), each at least once; "
        "a shard missing is an error that names it.",
        epilog=examples(
            "gradverify merge r1/results.jsonl r2/results.jsonl --report reports",
            "gradverify merge --format md,json r1/results.jsonl r2/results.jsonl",
        ),
    )
    m.add_argument("files", nargs="+", metavar="FILE", help="results.jsonl (or report.json) of each shard")
    m.add_argument("--report", metavar="DIR", default="reports", help="the directory the merged report goes to")
    m.add_argument("--format", type=_formats, default=_REPORT_FORMATS, help="some of md,json,junit,html")


def _triage(sub: Any) -> None:
    help_ = "tell a real gradient bug from a flaky test"
    t = sub.add_parser(
        "triage",
        help=help_,
        description=f"{help_}: from the JUnit XML of several CI runs, or by rerunning one test or target.",
        epilog=examples(
            "gradverify triage junit run1/junit.xml run2/junit.xml run3/junit.xml --report triage",
            "gradverify triage rerun tests/test_grads.py::test_swish --seeds 8",
        ),
    )
    tsub = t.add_subparsers(dest="mode", required=True, metavar="MODE")
    help_ = "JUnit XML from several CI runs: flip rates and the environment fields that separate them"
    tj = tsub.add_parser(
        "junit",
        help=help_,
        description=help_,
        epilog=examples(
            "gradverify triage junit run*/junit.xml", "gradverify triage junit --report triage a.xml b.xml"
        ),
    )
    tj.add_argument("files", nargs="+", metavar="FILE.xml", help="a JUnit XML file of each CI run")
    tj.add_argument(
        "--report", metavar="DIR", help="also write triage.md, .json and .html there (default: none, print only)"
    )
    help_ = "rerun a test or a check target across seeds, thread counts and repeated calls"
    tr = tsub.add_parser(
        "rerun",
        help=help_,
        description=help_,
        epilog=examples(
            "gradverify triage rerun tests/test_grads.py::test_swish --seeds 4 --threads 1,4",
            "gradverify triage rerun --backend jax --dtype float32 bias_act:swish",
        ),
    )
    tr.add_argument(
        "target", metavar="TARGET", help="a pytest node id, bias_act:NAME, a normalization, an example, or module:fn"
    )
    tr.add_argument("--backend", choices=BACKENDS, default="torch", help="the backend of a check target")
    tr.add_argument("--impl", choices=("reference", "fused"), default="fused", help="the implementation checked")
    tr.add_argument("--dtype", default="float64", metavar="DTYPE", help="the dtype of a check target's inputs")
    tr.add_argument(
        "--seeds", type=int, metavar="N", help="seeds to rerun with (default: 8 for a check target, 4 for a node id)"
    )
    tr.add_argument("--threads", default="1,4", metavar="T,T", help="thread counts, comma-separated")
    tr.add_argument("--max-examples", type=int, default=20, metavar="N", help="drawn inputs per seed")
    tr.add_argument("--strategy", metavar="MODULE:NAME", help="the argument strategy of a module:function target")
    tr.add_argument("--report", metavar="DIR", help="also write triage-rerun.md, .json and .html there (default: none)")


def _write(sub: Any) -> None:
    w = sub.add_parser(
        "write",
        help="write property-based tests from recorded checker calls, or from a package's custom rules",
        description="Write one pytest module of property-based gradient tests: from the calls a suite made "
        "(record them with pytest --gradverify-replace=record), or from the autograd.Functions, custom_jvp / "
        "custom_vjp functions and modules a package defines (shapes read from jaxtyping annotations).",
        epilog=examples(
            "gradverify write gradverify-records -o tests/test_gradients_properties.py",
            "gradverify write mylib --except ValueError -o tests/test_mylib_properties.py",
        ),
    )
    w.add_argument("target", metavar="RECORDS|PACKAGE", help="a records directory (or calls-*.jsonl), or a package")
    w.add_argument(
        "-o", "--output", metavar="FILE", default="tests/test_gradients_properties.py", help="the module to write"
    )
    w.add_argument("--max-examples", type=int, default=25, metavar="N", help="drawn inputs per written test")
    w.add_argument(
        "--except", dest="except_", nargs="+", default=[], metavar="EXCEPTION",
        help="exceptions fn raises at inputs outside its contract (a builtin name or package.module.Error): "
        "the written tests reject such drawn inputs (default: none)",
    )  # fmt: skip


def _report(sub: Any) -> None:
    help_ = "render a saved JSON report again, as HTML or Markdown"
    r = sub.add_parser(
        "report",
        help=help_,
        description=help_,
        epilog=examples(
            "gradverify report reports/report.json",
            "gradverify report --format md reports/report.json --output summary.md",
        ),
    )
    r.add_argument("file", metavar="FILE.json", help="a report.json written by gradverify check or merge")
    r.add_argument("--format", choices=("html", "md"), default="html", help="html or md")
    r.add_argument("--output", metavar="PATH", help="the file to write (default: report.<format> beside FILE)")
