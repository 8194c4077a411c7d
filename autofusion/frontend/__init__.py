"""Model readers: ONNX files and ModelProtos into the IR."""
from .onnx_import import import_onnx, load_model

__all__ = ["import_onnx", "load_model"]
