"""Writers: the IR back to ONNX."""
from .onnx_export import export_onnx

__all__ = ["export_onnx"]
