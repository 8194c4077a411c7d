// autofusion: native partitions of residual_linear, generated
#include "native.h"
#include "scalar.h"

using namespace af;

// partition 0: 1 node(s); inputs x, r; outputs FusedMatMul_out0
static void partition_0(Partition& p) {
  p.input(0, 0, {1, 6, 16});   // x
  p.input(1, 1, {1, 6, 8});   // r
  p.output(2, 0, {1, 6, 8});   // FusedMatMul_out0
  p.constant(3, 0, {16, 8});   // w
  p.constant(4, 1, {8});   // FusedMatMul_bias
  p.node("FusedMatMul");   // step 0: autofusion::FusedMatMul
  p.linear(2, 0, 3, 4, {}, 1);
}

AF_PARTITIONS(partition_0)
