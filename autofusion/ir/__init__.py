"""The IR: a small typed graph with ONNX operator semantics, and the op table."""
from .dtypes import DType
from .graph import Dim, Graph, Node, Shape, Value, format_graph, op_key
from .dims import broadcast_shapes, shape_value
from .ops import OPS, OpClass, OpDef, lookup, ops_of_class, register
from . import shapes  # noqa: F401,E402 - registers the ONNX operators in the table
from . import sequences  # noqa: F401,E402 - registers the sequence ops
from .builder import FUSED_DOMAIN, GraphBuilder
from .verify import verify
from . import fused_ops  # noqa: F401,E402 - registers the fused ops in the table
from . import torch_call  # noqa: F401,E402 - registers TorchCall (unmapped PyTorch ops)
from . import onnx_runtime_call  # noqa: F401,E402 - registers OnnxRuntimeCall (ops without a kernel)
from . import control_flow  # noqa: F401,E402 - registers If, Loop and Scan (subgraph bodies)

__all__ = ["DType", "Dim", "Graph", "Node", "Shape", "Value", "format_graph", "op_key", "OPS",
           "OpClass", "OpDef", "broadcast_shapes", "lookup", "ops_of_class", "register",
           "shape_value", "FUSED_DOMAIN", "GraphBuilder", "verify"]
