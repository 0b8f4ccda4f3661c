"""What the pytest plugin's ``gradverify`` fixture does beyond binding the
checker: the test's seed, the global random generators seeded from it (and
restored after it), and tests that draw their inputs with Hypothesis's
``@given`` allowed to take the fixture.

Nothing here imports torch, numpy's random state or Hypothesis unless the
test's own modules already have."""

from __future__ import annotations

import contextlib
import random
import sys
from collections.abc import Iterator
from typing import Any

from .._verify import derive_seed

__all__ = ["allow_under_given", "seed_for", "seed_key", "seeded_generators"]

FIXTURE = "gradverify"


def seed_key(item: Any) -> str:
    """What a test's seed is derived from: its file's name and its name
    within the file, parameters included (``test_ops.py::TestX::test_y[a]``).
    Unlike the node id it does not change with the directory pytest runs
    from (the rootdir); renaming the test or its file does change it, which
    ``@pytest.mark.gradverify(seed=...)`` pins against."""
    return "::".join([item.path.name, *item.nodeid.split("::")[1:]])


def seed_for(base: int, item: Any) -> int:
    """The seed a test's gradverify calls get from the base seed (``--gradverify-seed``)."""
    return derive_seed(base, seed_key(item))


@contextlib.contextmanager
def seeded_generators(seed: int) -> Iterator[None]:
    """Python's, numpy's and (where loaded) torch's global generators seeded
    from ``seed`` while the test runs, as pytest-randomly seeds them, and
    put back as they were after it: code under test that draws from them
    (a dropout, ``torch.randn`` in fn) gives the same values in a rerun of
    the test, so its ``reproduce: pytest ...`` line reproduces."""
    saved: list[tuple[Any, Any]] = [(random.setstate, random.getstate())]
    random.seed(seed)
    np = sys.modules.get("numpy")
    if np is not None:
        saved.append((np.random.set_state, np.random.get_state()))
        np.random.seed(seed % 2**32)
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(torch, "manual_seed"):
        saved.append((torch.random.set_rng_state, torch.random.get_rng_state()))
        cuda = getattr(torch, "cuda", None)
        if cuda is not None and cuda.is_initialized():
            saved.append((cuda.set_rng_state_all, cuda.get_rng_state_all()))
        torch.manual_seed(seed % 2**63)  # (seeds the CUDA generators too)
    try:
        yield
    finally:
        for restore, state in reversed(saved):
            restore(state)


def allow_under_given(item: Any) -> None:
    """A ``@given`` test that takes the fixture passes Hypothesis's
    function-scoped-fixture health check, suppressed for it as Hypothesis
    documents for a fixture that is safe to share between the examples of
    one test: the checker holds the test's seed and options, which no
    example changes, and every call it makes is recorded on its own.

    Only where the fixture is the test's one function-scoped fixture: with
    another (``tmp_path``) Hypothesis still reports that one. Called while
    the fixture is set up, before Hypothesis checks, when the test runs."""
    obj = getattr(item, "obj", None)
    if not getattr(obj, "is_hypothesis_test", False):
        return
    import inspect

    from hypothesis import HealthCheck, settings

    try:
        named = set(inspect.signature(item.function).parameters)
        # (the fixtures Hypothesis's own check looks at: those the test names)
        info = item.session._fixturemanager.getfixtureinfo(node=item, func=item.function, cls=None)
        scopes = {name: defs[-1].scope for name, defs in info.name2fixturedefs.items() if defs and name in named}
    except (AttributeError, TypeError, ValueError):
        return  # (pytest's fixture records not as expected: Hypothesis decides)
    if any(scope == "function" for name, scope in scopes.items() if name != FIXTURE):
        return
    test = getattr(obj, "__func__", obj)
    # (what @settings attaches to a @given test, read when it runs)
    own = getattr(test, "_hypothesis_internal_use_settings", None) or settings.default
    if HealthCheck.function_scoped_fixture not in own.suppress_health_check:
        suppressed = [*own.suppress_health_check, HealthCheck.function_scoped_fixture]
        test._hypothesis_internal_use_settings = settings(own, suppress_health_check=suppressed)
