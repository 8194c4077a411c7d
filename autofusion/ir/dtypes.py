"""Element types. The codes are ONNX's TensorProto codes, so import and export are a lookup."""
from __future__ import annotations

import enum
import functools
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import torch


class DType(enum.IntEnum):
    FLOAT = 1
    UINT8 = 2
    INT8 = 3
    UINT16 = 4
    INT16 = 5
    INT32 = 6
    INT64 = 7
    STRING = 8
    BOOL = 9
    FLOAT16 = 10
    DOUBLE = 11
    UINT32 = 12
    UINT64 = 13
    COMPLEX64 = 14
    COMPLEX128 = 15
    BFLOAT16 = 16
    FLOAT8E4M3FN = 17
    FLOAT8E4M3FNUZ = 18
    FLOAT8E5M2 = 19
    FLOAT8E5M2FNUZ = 20
    UINT4 = 21
    INT4 = 22
    FLOAT4E2M1 = 23

    @property
    def is_float(self) -> bool:
        return self in _FLOATS

    @property
    def is_integer(self) -> bool:
        return self in _INTEGERS

    @property
    def numpy(self) -> np.dtype:
        """The numpy dtype of this element type (bfloat16/float8/int4 have none)."""
        try:
            return np.dtype(_TO_NUMPY[self])
        except KeyError:
            raise TypeError(f"{self.name} has no numpy equivalent") from None

    @staticmethod
    def from_numpy(dtype: np.dtype | type) -> DType:
        dtype = np.dtype(dtype)
        for k, v in _TO_NUMPY.items():
            if np.dtype(v) == dtype:
                return k
        raise TypeError(f"numpy dtype {dtype} has no ONNX element type")


_FLOATS = {DType.FLOAT, DType.FLOAT16, DType.DOUBLE, DType.BFLOAT16, DType.FLOAT8E4M3FN,
           DType.FLOAT8E4M3FNUZ, DType.FLOAT8E5M2, DType.FLOAT8E5M2FNUZ, DType.FLOAT4E2M1}
_INTEGERS = {DType.UINT8, DType.INT8, DType.UINT16, DType.INT16, DType.INT32, DType.INT64,
             DType.UINT32, DType.UINT64, DType.UINT4, DType.INT4}
_TO_NUMPY = {
    DType.FLOAT: np.float32, DType.UINT8: np.uint8, DType.INT8: np.int8,
    DType.UINT16: np.uint16, DType.INT16: np.int16, DType.INT32: np.int32,
    DType.INT64: np.int64, DType.STRING: np.object_, DType.BOOL: np.bool_,
    DType.FLOAT16: np.float16, DType.DOUBLE: np.float64, DType.UINT32: np.uint32,
    DType.UINT64: np.uint64, DType.COMPLEX64: np.complex64, DType.COMPLEX128: np.complex128,
}


@functools.cache
def torch_dtypes() -> dict[DType, torch.dtype]:
    """The element types PyTorch computes in, as its dtypes: the one table the torch kernels, the
    FX importer and the executor read (torch imported on first use: the IR needs none)."""
    import torch
    return {
        DType.FLOAT: torch.float32, DType.DOUBLE: torch.float64, DType.FLOAT16: torch.float16,
        DType.BFLOAT16: torch.bfloat16, DType.INT8: torch.int8, DType.INT16: torch.int16,
        DType.INT32: torch.int32, DType.INT64: torch.int64, DType.UINT8: torch.uint8,
        DType.UINT16: torch.uint16, DType.UINT32: torch.uint32, DType.UINT64: torch.uint64,
        DType.BOOL: torch.bool, DType.COMPLEX64: torch.complex64, DType.COMPLEX128: torch.complex128,
    }


@functools.cache
def dtypes_of_torch() -> dict[torch.dtype, DType]:
    """torch_dtypes read backwards: the element type of a PyTorch dtype."""
    return {t: d for d, t in torch_dtypes().items()}


def numpy_dtype_of_torch(dtype: torch.dtype) -> np.dtype:
    """The numpy dtype that holds a PyTorch dtype's values: its own; bfloat16's (numpy has none)
    float32, which holds every bfloat16 exactly."""
    import torch
    return np.dtype(np.float32) if dtype == torch.bfloat16 else torch.empty((), dtype=dtype).numpy().dtype


def tensor_to_numpy(t: torch.Tensor) -> np.ndarray:
    """A tensor's values as a numpy array, sharing its memory where it can; bfloat16 widened to
    float32 (numpy_dtype_of_torch)."""
    import torch
    t = t.detach()
    return t.float().numpy() if t.dtype == torch.bfloat16 else t.resolve_conj().resolve_neg().numpy()
