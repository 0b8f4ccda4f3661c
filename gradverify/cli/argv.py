"""Options before or after the targets: one subcommand's words arranged for argparse.

argparse reads an option of several values (``nargs="+"``, ``--backend torch
jax``) greedily, so ``gradverify check --backend torch bias_act`` hands it
the target too; and it reads a subcommand's positionals in one stretch, so
an option between two targets (``check relu --seed 1 tanh``) leaves the
second unrecognised. ``arrange`` rewrites the words of the subcommand that
runs before argparse reads them, so that every spelling an argparse user
expects means one thing:

* an option of several values takes the word after it (always: a wrong one
  is argparse's ``invalid choice`` to report), then each following word that
  is one of its choices - ``--backend torch jax bias_act`` leaves
  ``bias_act`` a target, and ``all`` after ``--backend`` stays a backend, as
  it always was. An option with an open vocabulary (``audit --ops``,
  ``write --except``) takes the words up to the next option, less those its
  subcommand's required positionals would otherwise go without (``audit --ops
  add mul torch``: ``torch`` is the framework) - the minimum argparse itself
  leaves each positional when it splits words between them;
* its values may also come as a comma list (``--backend torch,jax``) or with
  the option repeated (``--backend torch --backend jax``): all of them are
  gathered into one occurrence;
* the options come first, in the order given, then ``--``, then the
  positionals in theirs (a word after the user's own ``--`` is a positional).

The rules are read from the parser itself (its options' ``nargs`` and
``choices``), so a new option gets them without a table to keep.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator, Sequence

__all__ = ["arrange", "subcommands", "walk"]

_NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")  # (argparse's own: a value, not an option)
_MANY = ("+", "*")


def _actions(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    # (argparse lists a parser's arguments nowhere public; ``_actions`` is what its own formatter reads)
    return list(parser._actions)


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The parser's subcommands by name ({} for a parser that runs one)."""
    found: dict[str, argparse.ArgumentParser] = {}
    for action in _actions(parser):
        if isinstance(action, argparse._SubParsersAction):
            found.update(action.choices)
    return found


def walk(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """Every parser under ``parser`` (itself first) with the words that reach it."""
    yield path, parser
    for name, sub in subcommands(parser).items():
        yield from walk(sub, (*path, name))


def _option_like(word: str) -> bool:
    return word.startswith("-") and word != "-" and not _NEGATIVE_NUMBER.match(word)


def _option(word: str, by_name: dict[str, argparse.Action]) -> tuple[argparse.Action | None, str | None]:
    """The option a word names (exactly, as ``--name=value``, as ``-xVALUE``,
    or by an unambiguous prefix of a long name, as argparse reads it) and the
    value attached to it; (None, None) for anything else."""
    name, eq, value = word.partition("=")
    if word in by_name:
        return by_name[word], None
    if eq and name in by_name:
        return by_name[name], value
    if not word.startswith("--") and word[:2] in by_name and by_name[word[:2]].nargs != 0:
        return by_name[word[:2]], word[2:]
    if word.startswith("--"):
        matches = {by_name[s] for s in by_name if s.startswith(name)}
        if len(matches) == 1:
            return matches.pop(), value if eq else None
    return None, None


def _arity(action: argparse.Action) -> int | None:
    """How many words a single-valued option takes (None: ``?``, one if it looks like a value)."""
    if action.nargs is None:
        return 1
    if isinstance(action.nargs, int):
        return action.nargs
    return None


def _required(parser: argparse.ArgumentParser) -> int:
    """The fewest words the parser's positionals take between them."""
    least = {None: 1, "+": 1}
    return sum(
        a.nargs if isinstance(a.nargs, int) else least.get(a.nargs, 0) for a in _actions(parser) if not a.option_strings
    )


def _values(word: str) -> list[str]:
    return [v for v in word.split(",") if v]


def arrange(parser: argparse.ArgumentParser, words: Sequence[str]) -> list[str]:
    """The words of one subcommand, rearranged as the module's docstring says."""
    words = list(words)
    by_name = {s: a for a in _actions(parser) for s in a.option_strings}
    options: list[str] = []
    positionals: list[tuple[int, str]] = []  # (where it stood, the word)
    many: dict[argparse.Action, list[tuple[int, str]]] = {}  # each value with where it stood
    open_words: list[tuple[argparse.Action, int, str]] = []  # open-vocabulary words after an option's first
    i = 0
    while i < len(words):
        word = words[i]
        if word == "--":
            positionals += [(j, w) for j, w in enumerate(words[i + 1 :], i + 1)]
            break
        action, attached = _option(word, by_name) if _option_like(word) else (None, None)
        i += 1
        if action is None and _option_like(word):
            options.append(word)  # (an unknown option: argparse says so)
        elif action is None:
            positionals.append((i - 1, word))
        elif action.nargs in _MANY:
            values = many.setdefault(action, [])
            if attached is not None:
                values += [(i - 1, v) for v in _values(attached)]
            elif i < len(words) and not _option_like(words[i]) and words[i] != "--":
                values += [(i, v) for v in _values(words[i])]
                i += 1
            while i < len(words) and not _option_like(words[i]) and words[i] != "--":
                more = _values(words[i])
                if action.choices is not None and not (more and all(v in action.choices for v in more)):
                    break
                if action.choices is None:
                    open_words.append((action, i, words[i]))
                values += [(i, v) for v in more]
                i += 1
        else:
            options.append(word)
            n = _arity(action)
            if attached is None and n is None and i < len(words) and not _option_like(words[i]):
                n = 1
            if attached is None and n:
                options += words[i : i + n]
                i += n
    short = _required(parser) - len(positionals)
    for action, at, word in open_words[-short:] if short > 0 else []:
        many[action] = [(j, v) for j, v in many[action] if j != at]
        positionals.append((at, word))
    for action, values in many.items():
        options += [max(action.option_strings, key=len), *(v for _, v in values)]
    rest = [w for _, w in sorted(positionals)]
    return options + (["--", *rest] if rest else [])
