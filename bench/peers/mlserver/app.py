"""MLServer: writes a model repository (``settings.json`` + ``<model>/model-settings.json``)
and execs ``mlserver start`` on it. It speaks the Open Inference Protocol natively.

``lr``: the scikit-learn runtime (``mlserver_sklearn.SKLearnModel``), which answers
``predict_proba`` when the request asks for that output. ``mlp``: ``runtime.TorchMLP`` (this
folder). ``--batch N`` turns on MLServer's adaptive batching (``max_batch_size`` N,
``max_batch_time`` ``--wait-ms``). One inference worker process (``parallel_workers: 1``, its
default) behind one HTTP process.

    python app.py --model lr --path lr.joblib --port 8000 --workdir DIR [--batch 32]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", choices=["lr", "mlp"], required=True)
    parser.add_argument("--path", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--batch", type=int, default=0, help="max_batch_size; 0: no batching")
    parser.add_argument("--wait-ms", type=float, default=10.0)
    args = parser.parse_args()

    root = Path(args.workdir)
    shutil.rmtree(root, ignore_errors=True)
    folder = root / args.model
    folder.mkdir(parents=True)
    settings = {
        "host": "127.0.0.1", "http_port": args.port, "grpc_port": free_port(),
        "metrics_port": free_port(), "debug": False, "parallel_workers": 1,
        "metrics_dir": str(root / ".metrics"),
    }  # fmt: skip
    model: dict[str, object] = {
        "name": args.model,
        "parameters": {"uri": str(Path(args.path).resolve()), "version": "1"},
    }
    if args.model == "lr":
        model["implementation"] = "mlserver_sklearn.SKLearnModel"
    else:
        shutil.copy(HERE / "runtime.py", folder / "runtime.py")
        model["implementation"] = "runtime.TorchMLP"
    if args.batch:
        model["max_batch_size"] = args.batch
        model["max_batch_time"] = args.wait_ms / 1e3
    (root / "settings.json").write_text(json.dumps(settings, indent=2))
    (folder / "model-settings.json").write_text(json.dumps(model, indent=2))
    mlserver = str(Path(sys.executable).with_name("mlserver"))
    os.chdir(root)
    os.execv(mlserver, [mlserver, "start", str(root)])


if __name__ == "__main__":
    main()
