// What a generated kernel is (backend/native/kernels.py, rows.py): a function over the dense
// float32 operands of a step, in and out by position, with `d` the sizes its code reads at run
// time (the symbolic dims of its loops and strides, evaluated for the call's input sizes; unused
// where every size is static). A library of them ends with AF_KERNELS(kernel_0_0, ...): the
// table the runtime and Python read them from.
#pragma once

#include <cstdint>

namespace af {

using KernelFn = void (*)(const float* const* in, float* const* out, const int64_t* d);

}  // namespace af

#define AF_KERNELS(...) extern "C" const af::KernelFn af_kernels[] = {__VA_ARGS__};
