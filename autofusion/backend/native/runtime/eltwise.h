// Generated from autofusion/ir/activations.py (ELTWISE) by `python -m autofusion.backend.native.eltwise`:
// edit the table there, not this file (tests/backend/native/test_eltwise.py checks the two agree).
//
// The runtime's elementwise functions, each X(name, oneDNN's algorithm, gate): a gate, last in a
// step, is computed by the runtime's own loop after the step's primitive (gated.h).
#pragma once

#define AF_ALGS(X) \
  X(None, undef, 0) \
  X(Relu, eltwise_relu, 0) \
  X(Clip, eltwise_clip_v2, 0) \
  X(Logistic, eltwise_logistic, 0) \
  X(Tanh, eltwise_tanh, 0) \
  X(HardSigmoid, eltwise_hardsigmoid, 0) \
  X(HardSwish, eltwise_hardswish, 0) \
  X(Elu, eltwise_elu, 0) \
  X(SiLU, eltwise_swish, 1) \
  X(GeluErf, eltwise_gelu_erf, 0) \
  X(GeluTanh, eltwise_gelu_tanh, 1) \
  X(Exp, eltwise_exp, 0) \
  X(Log, eltwise_log, 0) \
  X(Sqrt, eltwise_sqrt, 0) \
  X(Abs, eltwise_abs, 0) \
  X(Linear, eltwise_linear, 0) \
  X(SoftRelu, eltwise_soft_relu, 0) \
  X(Round, eltwise_round, 0) \
  X(Mish, eltwise_mish, 0) \
  X(Square, eltwise_square, 0) \

