"""Execution: kernel tables per backend and the generated-code executor."""
from .executor import CompiledModel, Program, check_supported, evaluate_node
from .torch_cpu import KERNELS

__all__ = ["CompiledModel", "Program", "check_supported", "evaluate_node", "KERNELS"]
