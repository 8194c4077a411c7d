"""Writers: the IR back to ONNX; the HTML report with the graph before and after fusion."""
from .html import export_html
from .kernels import dump_kernels
from .onnx_export import export_onnx

__all__ = ["dump_kernels", "export_html", "export_onnx"]
