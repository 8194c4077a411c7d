"""The systems compared: one small class per system, each with load(), compile() and run().

    load()     untimed: bring the model into memory in the form the system starts from
               (a freshly built nn.Module for the PyTorch systems; nothing for the ONNX ones,
               which start from the file)
    compile()  timed, reported as compile/session-creation time: everything from that starting
               point until the system can run (for torch.compile this includes the first call,
               because that is when Inductor compiles)
    run()      one inference on the bound example inputs; returns the outputs in the system's
               own array type, converted only when checked (never inside the timed loop)

Every ONNX-consuming system reads the same exported file. Threads: the runner sets
torch.set_num_threads once for the process (PyTorch eager, Inductor's kernels and autofusion's
PyTorch kernels all use it); ONNX Runtime and OpenVINO get the same count through their own
options.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn


@dataclass
class ModelCase:
    """One model as every system sees it."""
    name: str
    onnx_path: str
    inputs: dict[str, torch.Tensor]        # named example inputs, in the forward's order
    build: Callable[[], nn.Module] | None  # a fresh eval-mode module with the same weights
                                           # (None: an ONNX-only model, e.g. the micro ones)
    threads: int

    def numpy_inputs(self) -> dict[str, np.ndarray]:
        return {k: v.numpy() for k, v in self.inputs.items()}


class System:
    name = ""      # key in the JSON
    label = ""     # column header in the table
    peer = True    # a system a user would pick instead of autofusion
    precision = "fp32"   # what it computes in; only fp32 peers count as autofusion's best peer
    package = None       # an optional package it needs; when missing, the system is skipped

    def load(self, case: ModelCase) -> None:
        self.case = case

    def compile(self) -> None:
        raise NotImplementedError

    def run(self):
        raise NotImplementedError

    def info(self) -> dict:
        """Facts worth keeping in the JSON besides timings (e.g. operator counts)."""
        return {}


# ---- autofusion ----------------------------------------------------------------------------

# what a system may leave out, to measure its effect side by side: name -> the fused ops disabled
LEFT_OUT = {"regions": ("AutoFusion",), "gate": ("ConvGateFusionOp",), "residual": ("MatMulResidualFusionOp",)}


class Autofusion(System):
    """autofusion at one level on one backend: "native" (the C++ one, named plainly) or "torch"
    (its PyTorch/oneDNN kernels, named with a -torch suffix), without some of its fusions
    (LEFT_OUT, named -noregions, -nogate, -noresidual), in fp32 or, named with a -bf16 suffix, in bf16
    (convolutions and products; its precision guard on random calibration inputs)."""
    peer = False

    def __init__(self, level: int, backend: str = "native", without: tuple[str, ...] = (),
                 precision: str = "fp32", calibration=None):
        self.level = level
        self.backend = backend
        self.precision = precision
        self.calibration = calibration   # the guard's inputs (None: random)
        self.disable = tuple(op for w in without for op in LEFT_OUT[w])
        native = backend == "native"
        reduced = precision != "fp32"
        self.name = f"autofusion-L{level}" + ("" if native else f"-{backend}") + \
            "".join(f"-no{w}" for w in without) + (f"-{precision}" if reduced else "")
        self.label = f"autofusion L{level}" + ("" if native else f" ({backend})") + \
            "".join(f" (no {w})" for w in without) + (f" {precision}" if reduced else "")

    def compile(self) -> None:
        import autofusion
        self.model = autofusion.compile(self.case.onnx_path, level=self.level,
                                        backend=self.backend, disable=list(self.disable),
                                        precision=self.precision, calibration=self.calibration)
        # torch tensors in, torch tensors out: the zero-conversion path of CompiledModel
        self.feeds = {n: self.case.inputs[n] for n in self.model.input_names}

    def run(self):
        return self.model(**self.feeds)

    def info(self) -> dict:
        report = self.model.report
        info = {"ops_before": report.ops_before, "ops_after": report.ops_after,
                "rules": {r.name: r.matched for r in report.rules if r.matched}}
        plan = getattr(self.model, "plan", None)
        if callable(getattr(plan, "summary", None)):
            info["plan"] = plan.summary()
        precision = report.precision or {}
        if precision.get("checked") is not None:   # the guard's findings, bf16 only
            info["precision"] = {"compute": precision["compute"],
                                 "kept_fp32": [c["node"] for c in precision["checked"] if c["kept_fp32"]],
                                 "end_to_end": precision["end_to_end"]}
        return info


# ---- ONNX Runtime --------------------------------------------------------------------------

class OnnxRuntime(System):
    def __init__(self, optimization: str):
        self.optimization = optimization     # "ORT_DISABLE_ALL" or "ORT_ENABLE_ALL"
        on = optimization == "ORT_ENABLE_ALL"
        self.name = "ort-enable-all" if on else "ort-disable-all"
        self.label = "ORT opt all" if on else "ORT opt off"

    def compile(self) -> None:
        import onnxruntime as ort
        options = ort.SessionOptions()
        options.graph_optimization_level = getattr(ort.GraphOptimizationLevel, self.optimization)
        # the same cores as everyone else: one intra-op pool, nodes run one after another
        options.intra_op_num_threads = self.case.threads
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        self.session = ort.InferenceSession(self.case.onnx_path, options,
                                            providers=["CPUExecutionProvider"])
        feeds = self.case.numpy_inputs()
        self.feeds = {i.name: feeds[i.name] for i in self.session.get_inputs()}

    def run(self):
        return self.session.run(None, self.feeds)


# ---- OpenVINO ------------------------------------------------------------------------------

class OpenVino(System):
    """OpenVINO's CPU plugin, set up for batch-1 latency: the latency hint, one stream, one
    infer request, the common thread count. precision "fp32" forces f32 inference; "bf16" keeps
    OpenVINO's default, which is bf16 on CPUs with avx512_bf16 or AMX (as here), f32 elsewhere —
    either way it is not counted as an fp32 peer."""
    package = "openvino"

    def __init__(self, precision: str):
        self.precision = precision
        f32 = precision == "fp32"
        self.name = "openvino-f32" if f32 else "openvino"
        self.label = "OpenVINO f32" if f32 else "OpenVINO default (bf16 here)"

    def compile(self) -> None:
        import openvino as ov
        import openvino.properties as props
        import openvino.properties.hint as hints
        config = {props.inference_num_threads(): self.case.threads,
                  hints.performance_mode(): hints.PerformanceMode.LATENCY,
                  hints.num_requests(): 1,
                  props.num_streams(): 1}
        if self.precision == "fp32":
            config[hints.inference_precision()] = ov.Type.f32
        self.compiled = ov.Core().compile_model(self.case.onnx_path, "CPU", config)
        self.request = self.compiled.create_infer_request()
        feeds = self.case.numpy_inputs()
        # a port has every name of its tensor (GPT-2's input_ids is also '/model/Reshape_output_0'
        # once OpenVINO folds the reshape), so feed by position, matched through any of them
        self.feeds = {k: feeds[next(n for n in port.get_names() if n in feeds)]
                      for k, port in enumerate(self.compiled.inputs)}

    def run(self):
        # outputs copied out of the request (share_outputs off): fresh arrays, as ORT returns
        return self.request.infer(self.feeds, share_inputs=True).to_tuple()

    def info(self) -> dict:
        """The settings as the compiled model reports them: what really ran."""
        import openvino.properties as props
        import openvino.properties.hint as hints
        get = self.compiled.get_property
        return {"inference_precision": get(hints.inference_precision()).get_type_name(),
                "threads": get(props.inference_num_threads()),
                "streams": get(props.num_streams())}


# ---- PyTorch -------------------------------------------------------------------------------

class TorchEager(System):
    name = "torch-eager"
    label = "PyTorch eager"

    def load(self, case: ModelCase) -> None:
        super().load(case)
        self.module = case.build()
        self.args = tuple(case.inputs.values())

    def compile(self) -> None:
        pass

    def run(self):
        with torch.inference_mode():
            return self.module(*self.args)


class Inductor(TorchEager):
    """torch.compile with the Inductor backend, with or without freezing.

    Freezing (weights turned into constants, so Inductor can fold BatchNorm into Conv and
    pre-pack weights for oneDNN) is switched on only by the global
    `torch._inductor.config.freezing = True`: `torch.compile(options={"freezing": True})` alone
    silently does not freeze. The flag is read when Inductor compiles, i.e. at the first call,
    so it is set around that call and restored after, leaving the other systems unaffected.

    Each Inductor system compiles its own module instance, and the freezing one also passes
    the option: Dynamo reuses compiled code across instances of the same architecture when
    the backends compare equal, and two plain torch.compile() calls do, so without the option
    the frozen system would silently run the unfrozen system's code. compile() checks that it
    really produced a new graph.
    """

    def __init__(self, freezing: bool):
        self.freezing = freezing
        self.name = "inductor-freezing" if freezing else "inductor"
        self.label = "Inductor+freezing" if freezing else "Inductor"

    def compile(self) -> None:
        import torch._inductor.config as inductor_config
        from torch._dynamo.utils import counters
        graphs_before = counters["stats"]["unique_graphs"]
        compiled = torch.compile(self.module, backend="inductor",
                                 options={"freezing": True} if self.freezing else None)
        previous = inductor_config.freezing
        inductor_config.freezing = self.freezing
        try:
            with torch.inference_mode():
                compiled(*self.args)
        finally:
            inductor_config.freezing = previous
        self.graphs = counters["stats"]["unique_graphs"] - graphs_before
        if self.graphs == 0:
            raise RuntimeError("torch.compile reused another system's compiled code")
        self.module = compiled

    def info(self) -> dict:
        return {"graphs_compiled": self.graphs}


def all_systems() -> list[System]:
    """Fresh instances of every system, in table-column order: ours first, then the peers."""
    return [Autofusion(0), Autofusion(1), Autofusion(2), Autofusion(2, without=("regions",)),
            Autofusion(2, without=("gate",)), Autofusion(2, without=("residual",)), Autofusion(2, backend="torch"),
            Autofusion(2, precision="bf16"), Autofusion(2, without=("gate",), precision="bf16"),
            Autofusion(2, without=("residual",), precision="bf16"),
            OnnxRuntime("ORT_DISABLE_ALL"), OnnxRuntime("ORT_ENABLE_ALL"),
            OpenVino("fp32"), OpenVino("bf16"),
            TorchEager(), Inductor(freezing=False), Inductor(freezing=True)]


SYSTEM_NAMES = [s.name for s in all_systems()]
REFERENCE = TorchEager.name     # every system's outputs are checked against this one
# The least tolerance a reduced precision is checked at, whatever --tolerance says: bf16 keeps 8
# bits of mantissa (each rounding ~0.4%), compounded over dozens of layers (OpenVINO's bf16 on
# 64 Conv+BN+ReLU blocks: 2.3e-2 from fp32).
PRECISION_TOLERANCE = {"bf16": 5e-2}


def as_arrays(outputs) -> list[np.ndarray]:
    """A system's outputs (one array or tensor, or a sequence of them) as float64 numpy arrays."""
    if isinstance(outputs, (torch.Tensor, np.ndarray)):
        outputs = [outputs]
    arrays = []
    for o in outputs:
        a = o.detach().cpu().numpy() if isinstance(o, torch.Tensor) else np.asarray(o)
        arrays.append(a.astype(np.float64))
    return arrays


def max_rel_diff(outputs: Sequence[np.ndarray], reference: Sequence[np.ndarray]) -> float:
    """max over outputs of max|out - ref| / max|ref|: one number, relative to each output's own
    scale. inf for a missing output, a shape mismatch, or a NaN where the reference has none."""
    if len(outputs) != len(reference):
        return float("inf")
    worst = 0.0
    for out, ref in zip(outputs, reference):
        if out.shape != ref.shape or (np.isnan(out) != np.isnan(ref)).any():
            return float("inf")
        valid = ~np.isnan(ref)
        if not valid.any():
            continue
        diff = float(np.abs(out[valid] - ref[valid]).max())
        scale = max(float(np.abs(ref[valid]).max()), 1e-30)
        worst = max(worst, diff / scale)
    return worst
