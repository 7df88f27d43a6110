"""What the interpreter's lock costs a model run in a thread beside a busy event loop.

With `--inline-runs thread` the model computes in one thread while the loop holds Python's
lock, reading and refusing; the computation releases the lock, and the thread needs it back
on the way (the TorchScript call's return, its tensors in and out). It waits up to a switch
interval (`sys.setswitchinterval`) each time, with the model idle. This times runs of the
overload scenario's wide MLP (64 rows, one intra-op thread) alone, then beside a thread that
never releases the lock (pure Python, as the loop under overload), at each switch interval:
ms per run, and how much of its own pace the spinning thread kept.

    python bench/inline_gil.py [--intervals-ms 5,0.5,0.2,0.1,0.05] [--seconds 1.5]
"""

from __future__ import annotations

import argparse
import sys
import threading
import time

import models
import numpy as np
import torch


def spin(seconds: float) -> int:
    """Pure-Python iterations in `seconds`: holds the lock but at the interval's hand-overs."""
    count, end = 0, time.perf_counter() + seconds
    while time.perf_counter() < end:
        count += 1
    return count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--intervals-ms", default="5,0.5,0.2,0.1,0.05")
    parser.add_argument("--seconds", type=float, default=1.5)
    parser.add_argument("--rows", type=int, default=64)
    args = parser.parse_args()
    torch.set_num_threads(1)
    model = torch.jit.load(str(models.ensure().wide))
    rows = np.random.default_rng(0).random((args.rows, 20), dtype=np.float32)

    def run() -> None:
        model(torch.from_numpy(rows)).numpy()

    with torch.inference_mode():
        for _ in range(50):
            run()
        started = time.perf_counter()
        for _ in range(300):
            run()
        alone = (time.perf_counter() - started) / 300
    pace = spin(args.seconds)
    print(f"{args.rows} rows alone: {alone * 1e3:.2f} ms a run")
    print("switch interval | ms a run beside a spinning thread | its pace kept | cores")
    default = sys.getswitchinterval()
    for interval in (float(v) / 1e3 for v in args.intervals_ms.split(",")):
        sys.setswitchinterval(interval)
        stop, runs = threading.Event(), [0]

        def work(stop: threading.Event, runs: list[int]) -> None:
            with torch.inference_mode():
                while not stop.is_set():
                    run()
                    runs[0] += 1

        thread = threading.Thread(target=work, args=(stop, runs))
        thread.start()
        cpu = time.process_time()
        kept = spin(args.seconds) / pace
        cores = (time.process_time() - cpu) / args.seconds
        stop.set()
        thread.join()
        ms = args.seconds * 1e3 / max(runs[0], 1)
        print(f"{interval * 1e3:g} ms | {ms:.2f} | {kept:.2f} | {cores:.2f}")
    sys.setswitchinterval(default)


if __name__ == "__main__":
    main()
