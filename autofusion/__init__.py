"""autofusion: an automatic operator-fusion compiler for deep-learning models."""
from .api import compile, load
from .export import export_html, export_onnx
from .debug import debug_view
from .backend import CompiledModel
from .profiling import Profile, profile
from .custom import register_op, unregister_op
from .errors import (AutofusionError, GraphError, InputError, KernelBuildError, ModelLoadError,
                     NodeExecutionError, UnsupportedOpError)

__version__ = "0.1.0"
__all__ = ["compile", "load", "export_html", "export_onnx", "debug_view", "register_op", "unregister_op",
           "profile", "Profile", "CompiledModel", "AutofusionError", "GraphError", "InputError",
           "KernelBuildError", "ModelLoadError", "NodeExecutionError", "UnsupportedOpError"]
