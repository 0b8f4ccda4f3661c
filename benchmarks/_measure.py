"""Measurement helpers shared by the ops benchmarks.

Times are taken side by side: every variant runs once per round, rounds
repeat, and each variant reports its min and median, so a noisy moment of
the machine hits all variants alike. Memory is counted exactly by torch:
bytes saved for backward through ``saved_tensors_hooks`` (each storage once,
as it is held once) and bytes allocated by a call through the profiler.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch


def saved_bytes(f: Callable[[], object]) -> int:
    """Bytes held for backward by what ``f`` builds: each saved storage once."""
    seen: dict[tuple[int, int], int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        seen[(storage.data_ptr(), storage.nbytes())] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = f()
    del out
    return sum(seen.values())


def allocated_bytes(f: Callable[[], object], device: str = "cpu") -> int:
    """Bytes the CPU allocator handed out during one call of ``f``; on CUDA,
    the rise of the allocator's peak above what was allocated before."""
    if device == "cuda":
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        f()
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - before
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True) as prof:
        f()
    return sum(e.self_cpu_memory_usage for e in prof.events() if e.self_cpu_memory_usage > 0)


def side_by_side(
    fns: dict[str, Callable[[], object]], reps: int, warmup: int = 2, device: str = "cpu"
) -> dict[str, tuple[float, float]]:
    """{name: (min, median) seconds}, the variants interleaved round by round;
    on CUDA timed by CUDA events around each call (the kernels, not the launch)."""
    for f in fns.values():
        for _ in range(warmup):
            f()
    samples: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(reps):
        for name, f in fns.items():
            if device == "cuda":
                begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                begin.record()
                f()
                end.record()
                torch.cuda.synchronize()
                samples[name].append(begin.elapsed_time(end) / 1e3)
                continue
            t0 = time.perf_counter()
            f()
            samples[name].append(time.perf_counter() - t0)
    return {k: (min(v), statistics.median(v)) for k, v in samples.items()}


def ms(t: float) -> str:
    return f"{t * 1e3:.3f}" if t < 0.01 else f"{t * 1e3:.2f}"


def mib(n: int | None) -> str:
    return "-" if n is None else f"{n / 2**20:.2f}"


def start(default_reps: int) -> argparse.Namespace:
    """Parse --reps/--threads, pin torch's threads, print the run's header."""
    p = argparse.ArgumentParser()
    p.add_argument("--reps", type=int, default=default_reps)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    args = p.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        p.error(
            "--device cuda: expected a CUDA device, found none (torch.cuda.is_available() is False); use --device cpu"
        )
    torch.set_num_threads(args.threads)
    where = torch.cuda.get_device_name() if args.device == "cuda" else f"CPU, {args.threads} thread(s)"
    print(f"torch {torch.__version__}, {where}, float32, {args.reps} interleaved rounds\n")
    return args
