"""A compiled model served by Ray Serve: replicas, dynamic request batching, HTTP on loopback and
a bounded load test. It starts Ray, deploys, sends the requests, checks every answer against the
model run here, prints what it measured, and stops Ray again.

    pip install -e ".[serve]"                      # ray[serve] and httpx
    python examples/serve_with_ray.py              # examples/tiny_resnet.onnx, 2 replicas
    python examples/serve_with_ray.py MODEL.onnx --replicas 2 --requests 400 --clients 8

Each replica is a process of Ray's that compiles the model once (the native build cache on disk
is shared, so only the first build compiles anything) on its share of the cores. Requests carry
one input as a .npy body; the replica's batch handler (ray.serve.batch) stacks the requests that
arrive together and makes one call where the model's first input dim is symbolic (a batch), else
one call per request. A model with one input is served as written; one whose batch dim is
fixed at 1 is given a symbolic one (its graph must not depend on the batch being 1).
"""
from __future__ import annotations

import argparse
import io
import os
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import onnx

HERE = Path(__file__).resolve().parent


def with_symbolic_batch(path: Path, into: Path) -> Path:
    """The model with its input's and outputs' first dim named "batch" (a copy, written to into)."""
    model = onnx.load(str(path))
    for v in [*model.graph.input, *model.graph.output]:
        dims = v.type.tensor_type.shape.dim
        if dims and dims[0].HasField("dim_value"):
            dims[0].dim_param = "batch"
    for v in list(model.graph.value_info):   # inferred shapes of the fixed batch, dropped
        model.graph.value_info.remove(v)
    onnx.save(model, str(into))
    return into


def deployment(serve, replicas: int, threads: int, max_batch: int):
    @serve.deployment(num_replicas=replicas, ray_actor_options={"num_cpus": threads},
                      max_ongoing_requests=4 * max_batch)
    class Compiled:
        def __init__(self, path: str):
            import autofusion
            self.model = autofusion.compile(path, threads=threads)
            (self.input,) = self.model.graph.inputs
            self.batched = isinstance(self.input.shape[0], str)

        @serve.batch(max_batch_size=max_batch, batch_wait_timeout_s=0.004)
        async def infer(self, xs: list[np.ndarray]) -> list[np.ndarray]:
            if self.batched:
                return list(np.asarray(self.model(np.stack(xs))))
            return [np.asarray(self.model(x[None]))[0] for x in xs]

        async def __call__(self, request) -> bytes:
            from starlette.responses import Response
            x = np.load(io.BytesIO(await request.body()))
            out = io.BytesIO()
            np.save(out, await self.infer(x))
            return Response(out.getvalue(), media_type="application/octet-stream")

    return Compiled


def load_test(url: str, xs: list[np.ndarray], clients: int) -> tuple[list[np.ndarray], list[float], float]:
    """Every input posted once, `clients` at a time: the answers, each request's seconds, the total."""
    import httpx

    def post(x: np.ndarray, client: httpx.Client) -> tuple[np.ndarray, float]:
        body = io.BytesIO()
        np.save(body, x)
        start = time.perf_counter()
        reply = client.post(url, content=body.getvalue(), timeout=60)
        reply.raise_for_status()
        return np.load(io.BytesIO(reply.content)), time.perf_counter() - start

    with httpx.Client() as client, ThreadPoolExecutor(clients) as pool:
        start = time.perf_counter()
        done = list(pool.map(lambda x: post(x, client), xs))
        total = time.perf_counter() - start
    return [a for a, _ in done], [s for _, s in done], total


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("model", nargs="?", type=Path, default=HERE / "tiny_resnet.onnx")
    p.add_argument("--replicas", type=int, default=2)
    p.add_argument("--requests", type=int, default=200)
    p.add_argument("--clients", type=int, default=8)
    p.add_argument("--max-batch", type=int, default=8)
    p.add_argument("--port", type=int, default=8123)
    args = p.parse_args(argv)

    import ray
    from ray import serve

    import autofusion

    cores = len(os.sched_getaffinity(0))
    threads = max(1, cores // args.replicas)
    with tempfile.TemporaryDirectory() as tmp:
        path = with_symbolic_batch(args.model, Path(tmp) / "batched.onnx")
        local = autofusion.compile(str(path), threads=threads)
        (x0,) = local.graph.inputs
        shape = [d if isinstance(d, int) else 1 for d in x0.shape][1:]
        rng = np.random.default_rng(0)
        xs = [rng.standard_normal(shape).astype(np.float32) for _ in range(args.requests)]
        want = [np.asarray(local(x[None]))[0] for x in xs]

        ray.init(num_cpus=max(cores, args.replicas * threads), include_dashboard=False,
                 log_to_driver=False, configure_logging=False)
        try:
            serve.start(http_options={"host": "127.0.0.1", "port": args.port})
            app = deployment(serve, args.replicas, threads, args.max_batch).bind(str(path))
            serve.run(app, name="autofusion", route_prefix="/")
            url = f"http://127.0.0.1:{args.port}/"
            load_test(url, xs[:args.clients], args.clients)   # warm-up: every replica's first calls
            got, seconds, total = load_test(url, xs, args.clients)
        finally:
            serve.shutdown()
            ray.shutdown()

    worst = max(float(np.abs(g - w).max()) for g, w in zip(got, want))
    ms = np.asarray(seconds) * 1e3
    print(f"{args.model.name}: {args.replicas} replica(s) of {threads} thread(s), batches up to "
          f"{args.max_batch}, {args.clients} clients on loopback")
    print(f"answered {len(got)} of {len(xs)} requests in {total:.2f} s: {len(got) / total:.0f} requests/s, "
          f"p50 {np.percentile(ms, 50):.1f} ms, p99 {np.percentile(ms, 99):.1f} ms")
    print(f"largest difference from the model run here: {worst:.3g}")
    return 0 if len(got) == len(xs) and worst <= 1e-4 else 1


if __name__ == "__main__":
    raise SystemExit(main())
