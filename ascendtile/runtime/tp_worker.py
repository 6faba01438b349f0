"""One spawned tensor-parallel rank (started by runtime/tp_executor.py): joins the group, loads
its shard, builds an Engine replica, then serves the parent's generate() calls until told to
stop. Every rank runs the same deterministic scheduler on the same requests with the same seed,
and the logits are all-gathered, so every rank samples the same tokens and no per-step message
is needed; rank 0 sends the outputs back.

Messages (tuples over the rank's Pipe): parent -> rank ("generate", prompts, encoded, params,
use_tqdm) | ("stop",); rank -> parent ("ready", RankInfo) | ("result", (outputs, stats) on rank
0, None elsewhere) | ("error", "Type: message", traceback text)."""
from __future__ import annotations

import os
import sys
import threading
import traceback
from dataclasses import dataclass, replace
from multiprocessing.connection import Connection

import torch
from tqdm import tqdm

from ascendtile.distributed import destroy_tensor_parallel, init_tensor_parallel
from ascendtile.model import load_model
from ascendtile.runtime.config import EngineConfig
from ascendtile.runtime.engine_args import EngineArgs, create_engine
from ascendtile.runtime.generation import run_requests
from ascendtile.runtime.parallel_config import rank_device


@dataclass
class RankInfo:
    """What a rank reports once loaded. Every rank: its parameter count; rank 0 also its engine
    config (the agreed KV block count included), the model config and the tokenizer, which the
    parent keeps instead of weights."""

    num_parameters: int
    config: EngineConfig | None = None
    model_config: object = None
    tokenizer: object = None


def worker_main(rank: int, world: int, init_method: str, model: str, args: EngineArgs, num_threads: int,
                timeout_s: float, conn: Connection) -> None:
    """The body of rank `rank` of `world`; any exception goes to the parent as text and the
    process exits with code 1 (0 after a stop)."""
    code = 0
    # tqdm's default lock is a multiprocessing semaphore, which os._exit below would leave registered
    # with the parent's resource tracker (a "leaked semaphore" warning at exit); a thread lock does not.
    tqdm.set_lock(threading.RLock())
    try:
        if args.device.type == "cpu":  # ranks share the CPU: split the parent's threads between them
            torch.set_num_threads(max(1, num_threads // world))
        device = rank_device(args.device, rank)
        init_tensor_parallel(world, rank, init_method, str(device), timeout_s)
        _serve(rank, model, replace(args, device=device), conn)
    except BaseException as exc:
        code = 1
        try:
            conn.send(("error", f"{type(exc).__name__}: {exc}", traceback.format_exc()))
        except OSError:  # the parent is gone: nobody to tell
            pass
    finally:
        destroy_tensor_parallel()
    # Interpreter teardown with torch loaded takes seconds of C++ destructors on a busy machine, and
    # a worker holds nothing that needs it (the group is left, the pipe closes with the process).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _serve(rank: int, model: str, args: EngineArgs, conn: Connection) -> None:
    loaded = load_model(model, args.dtype, args.device, args.quantization)
    engine = create_engine(loaded, args)
    info = RankInfo(sum(p.numel() for p in loaded.model.parameters()))
    if rank == 0:
        info = replace(info, config=engine.config, model_config=loaded.config, tokenizer=loaded.tokenizer)
    conn.send(("ready", info))
    while (message := conn.recv())[0] == "generate":
        _, prompts, encoded, params, use_tqdm = message
        result = run_requests(engine, prompts, encoded, params, use_tqdm and rank == 0)
        conn.send(("result", result if rank == 0 else None))
