"""Execution: implementations per op, lowering to a plan, the torch and native backends."""
from .executor import Program, check_supported, evaluate_node
from .lower import Plan, lower
from .model import CompiledModel
from .torch_cpu import KERNELS
from . import onnxruntime_fallback  # noqa: F401,E402 - the kernel of OnnxRuntimeCall (ops without one)
from . import control_flow  # noqa: F401,E402 - the kernels of If, Loop and Scan

__all__ = ["CompiledModel", "Plan", "Program", "check_supported", "evaluate_node", "lower", "KERNELS"]
