"""Independent jobs on this machine's cores or on Ray: the one engine behind sweeps and the claims' runs.

    with Workers(jobs=2) as workers:             # 2 processes, one torch thread each
        squares = workers.map(pow, [(2, 2), (3, 2)])
    with Workers(jobs=4, backend="ray") as workers:   # Ray tasks (the cluster at RAY_ADDRESS, or a local Ray)
        ...

A job is a module-level function and its arguments (both picklable). `map` returns the results in the
order of its items and calls `on_done(index, result)` as each one ends. `jobs=1` runs the jobs in this
process, one after the other, with this process's threads: nothing is started. A job that raises stops
the map with that error; the jobs still queued are cancelled and those under way are stopped.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from explorer.registries import SpecError
from explorer.settings import ray_address

BACKENDS = ("local", "ray")


def _set_threads(threads: int) -> None:
    import torch

    torch.set_num_threads(max(1, threads))


# What every job process imports before its first job: torch, and the compiler stack and torch.func that the
# optimizers and the probes load (seconds of a small CPU for each process that imports them itself).
PRELOAD = ("torch", "torch._dynamo", "torch.func")


def process_context():
    """The multiprocessing context job processes start from (the app's workers and `Workers`' pool): a fork
    server that imported PRELOAD once, so a process starts in a fraction of a second where a fresh interpreter
    takes seconds; "spawn" where the platform has no fork server. Never a fork of the caller, whose torch
    threads may be running. A fork server's children inherit the environment it started with, not the caller's
    now: a job process takes the caller's with `adopt_environment`."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(list(PRELOAD))  # read when the fork server starts (the first process)
    return context


def adopt_environment(env: Mapping[str, str]) -> None:
    """Make this process's environment `env` (the caller's, handed over at the start of a job process): the
    EXPLORER_* settings, the plug-in folder and the rest are read from it, as a spawned process would."""
    os.environ.clear()
    os.environ.update(env)


def _call(threads: int, fn: Callable, args: tuple) -> Any:
    """A job in a worker: `fn(*args)` with `threads` torch threads."""
    _set_threads(threads)
    return fn(*args)


def default_jobs() -> int:
    """One job per core."""
    return os.cpu_count() or 1


class Workers:
    """A pool of `jobs` workers (local processes started from process_context(), or Ray tasks) for independent
    jobs; a context manager.

    Each worker trains with `threads` torch threads (default: the cores shared out, at least one). The
    processes start at the first `map` and stay for the next ones until the pool is closed."""

    def __init__(self, jobs: int | None = None, backend: str = "local", threads: int | None = None):
        if backend not in BACKENDS:
            raise SpecError("backend", f"unknown backend {backend!r}; use one of {', '.join(BACKENDS)}")
        if jobs is not None and (not isinstance(jobs, int) or jobs < 1):
            raise SpecError("jobs", f"must be a whole number of at least 1, got {jobs!r}")
        self.jobs = jobs or default_jobs()
        self.backend = backend
        self.threads = threads or max(1, default_jobs() // self.jobs)
        self._pool = None

    def __enter__(self) -> Workers:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def in_process(self) -> bool:
        """Whether jobs run here, one after the other (one local job): nothing to start or pickle."""
        return self.backend == "local" and self.jobs == 1

    def map(self, fn: Callable, items: Sequence[tuple], on_done: Callable[[int, Any], None] | None = None) -> list:
        """[fn(*item) for item in items], run as independent jobs; `on_done(index, result)` as each ends."""
        items = [tuple(item) for item in items]
        results: list[Any] = [None] * len(items)

        def finished(index: int, value: Any) -> None:
            results[index] = value
            if on_done is not None:
                on_done(index, value)

        if not items:
            return results
        if self.in_process:
            for index, item in enumerate(items):
                finished(index, fn(*item))
        elif self.backend == "local":
            self._map_local(fn, items, finished)
        else:
            self._map_ray(fn, items, finished)
        return results

    def _map_local(self, fn, items, finished) -> None:
        from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

        if self._pool is None:
            self._pool = ProcessPoolExecutor(max_workers=self.jobs, mp_context=process_context(),
                                             initializer=adopt_environment, initargs=(dict(os.environ),))
        pending = {self._pool.submit(_call, self.threads, fn, item): index for index, item in enumerate(items)}
        try:
            while pending:
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                for future in done:
                    finished(pending.pop(future), future.result())
        except BaseException:
            self._stop_local()
            raise

    def _stop_local(self) -> None:
        pool, self._pool = self._pool, None
        if pool is None:
            return
        processes = list((getattr(pool, "_processes", None) or {}).values())
        pool.shutdown(wait=False, cancel_futures=True)
        for process in processes:  # stop the jobs under way too
            process.terminate()
        for process in processes:
            process.join(timeout=10)

    def _map_ray(self, fn, items, finished) -> None:
        ray = connect_ray(self.jobs)
        task = ray.remote(num_cpus=1)(_call)
        pending = {task.remote(self.threads, fn, item): index for index, item in enumerate(items)}
        try:
            while pending:
                done, _ = ray.wait(list(pending), num_returns=1)
                for ref in done:
                    finished(pending.pop(ref), ray.get(ref))
        except BaseException:
            for ref in pending:
                ray.cancel(ref, force=True)
            raise

    def close(self) -> None:
        """Stop the local processes (Ray stays connected for the next pool)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None


def connect_ray(cpus: int):
    """The `ray` module, connected: to the cluster at RAY_ADDRESS, else to a local Ray of `cpus` CPUs
    started once per process. A SpecError says how to install Ray when it is missing."""
    try:
        import ray
    except ImportError:
        raise SpecError("backend", "the ray backend needs Ray: pip install 'explorer[ray]' (or use --backend local)") \
            from None
    if not ray.is_initialized():
        address = ray_address()
        ray.init(address=address, include_dashboard=False, log_to_driver=False,
                 **({} if address else {"num_cpus": cpus}))
    return ray
