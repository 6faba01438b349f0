"""TPExecutor: the parent side of spawned tensor parallelism. It starts one worker process per
rank (multiprocessing spawn; runtime/tp_worker.py), sends each generate() call's requests to
every rank once and returns rank 0's outputs.

While it waits it watches every worker: a rank's exception (forwarded as text), a worker that
exits (its exit code or signal) or, at startup, a deadline, is a RuntimeError naming the rank,
after every worker has been terminated and joined. Workers are also stopped on shutdown(), when
the executor is garbage collected and at interpreter exit (weakref.finalize), so none is left
behind. A rank hanging mid-run is bounded by the collectives' timeout (timeout_s): its peers
raise, and that error reaches the parent."""
from __future__ import annotations

import multiprocessing
import signal
import time
import weakref
from multiprocessing.connection import Connection, wait

import torch

from ascendtile.distributed import local_init_method
from ascendtile.runtime.engine_args import EngineArgs
from ascendtile.runtime.generation import GenerationStats
from ascendtile.runtime.outputs import RequestOutput
from ascendtile.runtime.sampling_params import SamplingParams
from ascendtile.runtime.tp_worker import RankInfo, worker_main

STOP_GRACE_S = 10.0  # a stopped worker's time to leave the group and exit before it is terminated
DEATH_GRACE_S = 0.5  # after one rank fails, how long the others' exits are awaited, to name them too


def _stop(processes: list, conns: list[Connection], grace_s: float = STOP_GRACE_S) -> None:
    """Ask every live worker to stop, give them grace_s, then terminate and kill what is left;
    join all."""
    for process, conn in zip(processes, conns):
        if process.is_alive():
            try:
                conn.send(("stop",))
            except OSError:  # the worker already closed its end
                pass
    deadline = time.monotonic() + grace_s
    for process in processes:
        process.join(max(0.0, deadline - time.monotonic()))
    for process in processes:
        if process.is_alive():
            process.terminate()
            process.join(2.0)
        if process.is_alive():
            process.kill()
            process.join()
    for conn in conns:
        conn.close()


def _exit_text(code: int | None) -> str:
    if code is not None and code < 0:
        return f"was killed by {signal.Signals(-code).name} (exit code {code})"
    return f"exited with code {code}"


class TPExecutor:
    """`size` spawned ranks serving generate() calls for one LLM. timeout_s bounds the startup
    (spawn, rendezvous, loading) and every collective inside the ranks."""

    def __init__(self, model: str, args: EngineArgs, size: int, timeout_s: float) -> None:
        context = multiprocessing.get_context("spawn")
        init_method = local_init_method()
        self.processes, self.conns = [], []
        self._tracebacks: list[str] = []  # of the ranks' exceptions, for the RuntimeError's message
        self._finalizer = weakref.finalize(self, _stop, self.processes, self.conns)
        for rank in range(size):
            parent_end, child_end = context.Pipe()
            process = context.Process(target=worker_main, name=f"ascendtile-tp-rank{rank}", daemon=True, args=(
                rank, size, init_method, model, args, torch.get_num_threads(), timeout_s, child_end))
            process.start()
            child_end.close()  # the parent's copy: only the worker's end may stay open, so its death is an EOF
            self.processes.append(process)
            self.conns.append(parent_end)
        infos: list[RankInfo] = self._watched("ready", time.monotonic() + timeout_s)
        self.info: RankInfo = infos[0]
        self.num_parameters = sum(info.num_parameters for info in infos)

    @property
    def pids(self) -> list[int]:
        """The workers' process ids, rank order."""
        return [process.pid for process in self.processes]

    def generate(self, prompts: list[str | None], encoded: list[list[int]], params: list[SamplingParams],
                 use_tqdm: bool) -> tuple[list[RequestOutput], GenerationStats]:
        """Every rank runs the requests (arguments as runtime/generation.run_requests); rank 0's
        outputs and stats come back."""
        if not self._finalizer.alive:
            raise RuntimeError("tensor-parallel workers: shut down (an earlier failure or shutdown()); create a new LLM")
        for rank, conn in enumerate(self.conns):
            try:
                conn.send(("generate", prompts, encoded, params, use_tqdm))
            except OSError:
                self._fail(f"rank {rank} {self._death(rank)}")
        return self._watched("result", None)[0]

    def shutdown(self) -> None:
        """Stop and join every worker (idempotent)."""
        self._finalizer()

    def _exit_code(self, rank: int) -> int | None:
        self.processes[rank].join(1.0)  # an EOF may come just before the exit
        return self.processes[rank].exitcode

    def _death(self, rank: int) -> str:
        """Why a worker ended: its error message if it sent one, else its exit code or signal."""
        conn = self.conns[rank]
        try:
            while conn.poll():
                message = conn.recv()
                if message[0] == "error":
                    return self._raised(rank, message)
        except (EOFError, OSError):
            pass
        return _exit_text(self._exit_code(rank))

    def _raised(self, rank: int, message: tuple) -> str:
        self._tracebacks.append(f"--- rank {rank} ---\n{message[2]}")
        return f"raised {message[1]}"

    def _abort(self) -> None:
        """Stop every worker now: a surviving rank may sit in a collective or mid-generate, deaf to
        a stop message."""
        if self._finalizer.detach() is not None:
            _stop(self.processes, self.conns, grace_s=0.0)

    def _watched(self, kind: str, deadline: float | None) -> list:
        """_replies, stopping every worker when the wait ends any other way (e.g. KeyboardInterrupt):
        the ranks' unread replies would otherwise answer the next call."""
        try:
            return self._replies(kind, deadline)
        except BaseException:
            self._abort()
            raise

    def _fail(self, what: str):
        self._abort()
        raise RuntimeError("\n".join([f"tensor-parallel {what}; every worker has been stopped", *self._tracebacks]))

    def _replies(self, kind: str, deadline: float | None) -> list:
        """Each rank's payload of its next `kind` message, rank order; a RuntimeError (after
        stopping every worker) naming each failed rank when a rank reports an error or exits, or
        when the deadline passes."""
        replies, pending = [None] * len(self.conns), set(range(len(self.conns)))
        sentinels = {process.sentinel: rank for rank, process in enumerate(self.processes)}
        while pending:
            timeout = None if deadline is None else deadline - time.monotonic()
            if timeout is not None and timeout <= 0:
                self._fail(f"ranks {sorted(pending)}: no {kind!r} message within the timeout")
            ready = wait([self.conns[r] for r in pending] + list(sentinels), timeout)
            failures = {}
            for rank in sorted(pending):
                if self.conns[rank] not in ready:
                    continue
                try:
                    message = self.conns[rank].recv()
                except EOFError:
                    failures[rank] = _exit_text(self._exit_code(rank))
                    continue
                if message[0] == "error":
                    failures[rank] = self._raised(rank, message)
                else:
                    replies[rank] = message[1]
                    pending.discard(rank)
            if failures:  # a rank's error may be the echo of a peer's death: give that death a moment to show
                ready += wait([s for s, rank in sentinels.items() if rank not in failures], DEATH_GRACE_S)
            for sentinel, rank in sentinels.items():
                if sentinel in ready and rank not in failures:
                    failures[rank] = self._death(rank)
            if failures:
                self._fail("; ".join(f"rank {rank} {why}" for rank, why in sorted(failures.items())))
        return replies
