"""`python -m autofusion.benchmarks.serving`: a model served to several client threads at once, and
to one client on a machine with a core taken by another process; each system in a process of its
own, the systems in turn, every configuration `--passes` times.

    python -m autofusion.benchmarks.serving --part clients   # requests/s and p50/p99 with 1, 2, 4 clients
    python -m autofusion.benchmarks.serving --part busy      # one client, idle and with one core busy

clients  Each client thread calls the model on its own input as fast as it can for `--seconds`;
         requests/s over all of them, and the latency of each request. autofusion in latency mode
         (streams=1: one call at a time on every thread) and in throughput mode (streams = the
         cores, one thread each); ONNX Runtime with one session shared by the clients (its intra-op
         pool on every core); OpenVINO with the THROUGHPUT hint and one infer request per client.
         fp32 throughout (OpenVINO's inference precision f32), and bf16 (autofusion's
         precision="bf16", OpenVINO's bf16; ONNX Runtime has none).
busy     One client; idle, then with another process spinning on one core (a Python loop, not
         pinned): the median and p99 latency. autofusion on every core (its default) and on one
         thread fewer; ONNX Runtime; OpenVINO with the LATENCY hint, f32.

Models: the zoo's static exports (benchmarks/models.py) at their usual size. The machine's
thread count is its usable cores (os.sched_getaffinity).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

from . import dynamic, models

CORES = len(os.sched_getaffinity(0))
MODELS = ["mobilenet_v3_large", "resnet50", "bert-base"]
SIZES = {"bert-base": 128}


def model_path(name: str, out: Path) -> str:
    return dynamic.export(name, out, SIZES.get(name, 224))


# ---- one system in this process ----------------------------------------------------------------

def make_calls(system: str, path: str, name: str, precision: str, clients: int, threads: int):
    """One callable per client, each calling the system on its own input."""
    feeds = [models.inputs_at(name, SIZES.get(name, 224)) for _ in range(clients)]
    if system.startswith("autofusion"):
        import torch

        import autofusion
        streams = CORES if "throughput" in system else 1
        torch.set_num_threads(threads)
        model = autofusion.compile(path, threads=threads, streams=streams, precision=precision)
        return [lambda f=f: model(**f) for f in feeds]
    arrays = [{k: v.numpy() for k, v in f.items()} for f in feeds]
    if system == "ort":
        import onnxruntime as ort
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        names = [i.name for i in session.get_inputs()]
        return [lambda a=a: session.run(None, {n: a[n] for n in names}) for a in arrays]
    import openvino as ov
    import openvino.properties as props
    import openvino.properties.hint as hints
    mode = hints.PerformanceMode.THROUGHPUT if system == "openvino-throughput" else hints.PerformanceMode.LATENCY
    config = {props.inference_num_threads(): threads, hints.performance_mode(): mode,
              hints.inference_precision(): ov.Type.bf16 if precision == "bf16" else ov.Type.f32}
    compiled = ov.Core().compile_model(path, "CPU", config)
    requests = [compiled.create_infer_request() for _ in range(clients)]
    ports = [[a[next(n for n in port.get_names() if n in a)] for port in compiled.inputs] for a in arrays]
    # a first infer on this thread: OpenVINO 2026.4's Python binding initialises a function-local
    # static on its first infer, and client threads doing so at once hang for good (one holds
    # the static's guard waiting for the GIL, another the GIL waiting for the guard: seen with 4
    # clients in bf16, no CPU used)
    requests[0].infer(ports[0], share_inputs=True)
    return [lambda r=r, p=p: r.infer(p, share_inputs=True) for r, p in zip(requests, ports)]


def serve(calls, seconds: float) -> dict:
    """Each call on a thread of its own, as fast as it goes, for `seconds`, after each client's
    warm-up (on its own thread, as a server's workers warm up: a warm-up on the main thread
    would give it an OpenMP pool beside the model's streams, docs/runtime.md)."""
    latencies: list[list[float]] = [[] for _ in calls]
    warm = threading.Barrier(len(calls) + 1)
    start = stop = 0.0

    def client(k: int) -> None:
        for _ in range(3):
            calls[k]()
        warm.wait()   # every client warm, then the clock starts
        warm.wait()
        own = latencies[k]
        while (t := time.perf_counter()) < stop:
            calls[k]()
            own.append(time.perf_counter() - t)

    threads = [threading.Thread(target=client, args=(k,)) for k in range(len(calls))]
    for t in threads:
        t.start()
    warm.wait()
    start = time.perf_counter()
    stop = start + seconds
    warm.wait()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    ms = np.concatenate([np.asarray(x) for x in latencies]) * 1e3
    return {"requests_per_s": float(len(ms) / elapsed), "p50_ms": float(np.percentile(ms, 50)),
            "p99_ms": float(np.percentile(ms, 99)), "requests": int(len(ms))}


def worker(spec: dict) -> None:
    calls = make_calls(spec["system"], spec["path"], spec["model"], spec["precision"], spec["clients"],
                       spec["threads"])
    print(json.dumps({**{k: v for k, v in spec.items() if k != "path"}, **serve(calls, spec["seconds"])}),
          flush=True)


# ---- the driver ----------------------------------------------------------------------------------

def run_worker(spec: dict) -> dict:
    done = subprocess.run([sys.executable, "-m", "autofusion.benchmarks.serving", "--worker", json.dumps(spec)],
                          capture_output=True, text=True, timeout=900)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode or not lines:
        return {**spec, "error": (done.stderr.strip().splitlines() or ["no output"])[-1]}
    return json.loads(lines[-1])


def clients_part(names: list[str], out: Path, args) -> list[dict]:
    rows = []
    for name in names:
        path = model_path(name, out)
        for precision in args.precisions:
            systems = ["autofusion", "autofusion-throughput", "openvino-throughput"] + \
                (["ort"] if precision == "fp32" else [])
            for clients in args.clients:
                for _ in range(args.passes):
                    for system in systems:
                        row = run_worker({"system": system, "model": name, "precision": precision,
                                          "clients": clients, "threads": CORES, "seconds": args.seconds,
                                          "path": path})
                        print(json.dumps(row), flush=True)
                        rows.append(row)
    return rows


def busy_part(names: list[str], out: Path, args) -> list[dict]:
    rows = []
    systems = [("autofusion", CORES), ("autofusion", max(1, CORES - 1)), ("ort", CORES),
               ("openvino-latency", CORES)]
    for name in names:
        path = model_path(name, out)
        for load in ("idle", "one core busy"):
            spinner = None
            if load != "idle":
                spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
                time.sleep(1.0)
            try:
                for _ in range(args.passes):
                    for system, threads in systems:
                        row = run_worker({"system": system, "model": name, "precision": "fp32", "clients": 1,
                                          "threads": threads, "seconds": args.seconds, "path": path})
                        row["load"] = load
                        print(json.dumps(row), flush=True)
                        rows.append(row)
            finally:
                if spinner is not None:
                    spinner.kill()
                    spinner.wait()
    return rows


def _median(rows: list[dict], key: str) -> float | None:
    values = [r[key] for r in rows if key in r]
    return float(np.median(values)) if values else None


def clients_table(rows: list[dict]) -> str:
    lines = ["| model | precision | clients | autofusion latency mode | autofusion throughput mode | ORT | "
             "OpenVINO THROUGHPUT | best autofusion vs best peer |", "|---|---|---:|---:|---:|---:|---:|---:|"]
    keys = sorted({(r["model"], r["precision"], r["clients"]) for r in rows},
                  key=lambda k: (MODELS.index(k[0]) if k[0] in MODELS else 99, k[1], k[2]))
    for model, precision, clients in keys:
        cell, rps = [], {}
        for system in ("autofusion", "autofusion-throughput", "ort", "openvino-throughput"):
            these = [r for r in rows if (r["model"], r["precision"], r["clients"], r["system"]) ==
                     (model, precision, clients, system)]
            rps[system] = _median(these, "requests_per_s")
            p99 = _median(these, "p99_ms")
            cell.append("—" if rps[system] is None else f"{rps[system]:.0f} (p99 {p99:.1f} ms)")
        ours = max((v for k, v in rps.items() if k.startswith("autofusion") and v), default=None)
        peers = max((v for k, v in rps.items() if not k.startswith("autofusion") and v), default=None)
        ratio = f"{ours / peers:.2f}x" if ours and peers else "—"
        lines.append(f"| {model} | {precision} | {clients} | " + " | ".join(cell) + f" | {ratio} |")
    return "\n".join(lines)


def busy_table(rows: list[dict]) -> str:
    lines = ["| model | load | system | threads | p50 ms | p99 ms |", "|---|---|---|---:|---:|---:|"]
    keys = sorted({(r["model"], r["load"], r["system"], r["threads"]) for r in rows},
                  key=lambda k: (k[0], k[1] != "idle", k[2], -k[3]))
    for model, load, system, threads in keys:
        these = [r for r in rows if (r["model"], r["load"], r["system"], r["threads"]) == (model, load, system, threads)]
        p50, p99 = _median(these, "p50_ms"), _median(these, "p99_ms")
        lines.append(f"| {model} | {load} | {system} | {threads} | " +
                     ("— | —" if p50 is None else f"{p50:.2f} | {p99:.2f}") + " |")
    return "\n".join(lines)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m autofusion.benchmarks.serving", description=__doc__.split("\n")[0])
    p.add_argument("--part", choices=["clients", "busy"], default="clients")
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--precisions", default="fp32,bf16")
    p.add_argument("--clients", default="1,2,4")
    p.add_argument("--seconds", type=float, default=4.0)
    p.add_argument("--passes", type=int, default=2)
    p.add_argument("--out", type=Path, default=Path("bench-out"))
    p.add_argument("--save", type=Path, help="write the table (.md) and rows (.json) under this stem")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        return worker(json.loads(args.worker))
    args.precisions = args.precisions.split(",")
    args.clients = [int(c) for c in args.clients.split(",")]
    names = args.models.split(",")
    rows = clients_part(names, args.out, args) if args.part == "clients" else busy_part(names, args.out, args)
    table = clients_table(rows) if args.part == "clients" else busy_table(rows)
    print(table)
    if args.save:
        args.save.parent.mkdir(parents=True, exist_ok=True)
        args.save.with_suffix(".md").write_text(table + "\n")
        args.save.with_suffix(".json").write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
