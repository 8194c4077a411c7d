"""autofusion: an automatic operator-fusion compiler for deep-learning models."""
from .api import compile, load
from .export import export_onnx
from .backend import CompiledModel
from .errors import (AutofusionError, GraphError, InputError, KernelBuildError, ModelLoadError,
                     NodeExecutionError, UnsupportedOpError)

__version__ = "0.1.0"
__all__ = ["compile", "load", "export_onnx", "CompiledModel", "AutofusionError", "GraphError", "InputError",
           "KernelBuildError", "ModelLoadError", "NodeExecutionError", "UnsupportedOpError"]
