"""Writers: the IR back to ONNX; the HTML report with the graph before and after fusion."""
from .html import export_html
from .onnx_export import export_onnx

__all__ = ["export_html", "export_onnx"]
