// autofusion: native partitions of small_cnn, generated
#include "native.h"
#include "scalar.h"

using namespace af;

// partition 0: 5 node(s); inputs x; outputs PoolGemm_out0, Sigmoid_out0
static void partition_0(Partition& p) {
  p.input(0, 0, {1, 3, 8, 8});   // x
  p.output(1, 0, {1, 4});   // PoolGemm_out0
  p.output(2, 1, {1, 512});   // Sigmoid_out0
  p.value(3, {1, 8, 8, 8}, 0, 1, Layout::Any);   // FusedConv_out0
  p.value(4, {1, 8, 8, 8}, 1, 3, Layout::Plain);   // FusedConv_1_out0
  p.value(5, {1, 512}, 3, 4, Layout::Any);   // Flatten_out0
  p.constant(6, 0, {8, 3, 3, 3});   // w
  p.constant(7, 1, {8});   // w_1
  p.constant(8, 2, {8, 8, 3, 3});   // w_2
  p.constant(9, 3, {8});   // w_3
  p.value(10, {1, 8, 1, 1}, 2, 2, Layout::Plain);   // temporary of step 2
  p.value(11, {1, 8}, 2, 2, Layout::Plain);   // temporary of step 2
  p.constant(12, 4, {4});   // w_5
  p.constant(13, 5, {8, 4});   // w_4
  p.node("FusedConv");   // step 0: autofusion::FusedConv
  p.conv(3, 0, 6, 7, -1, {1, 1}, {1, 1}, {1, 1}, {1, 1}, 1, {{Alg::Relu, 0.0f, 0.0f}}, false);
  p.node("FusedConv_1");   // step 1: autofusion::FusedConv
  p.conv(4, 3, 8, 9, 3, {1, 1}, {1, 1}, {1, 1}, {1, 1}, 1, {{Alg::Relu, 0.0f, 0.0f}}, false);
  p.node("PoolGemm");   // step 2: autofusion::PoolGemm
  p.pool(10, 4, Pool::AvgExcludePad, {8, 8}, {1, 1}, {1, 1}, {0, 0}, {0, 0});
  p.reshape(11, 10);
  p.linear(1, 11, 13, 12, {});
  p.node("Flatten");   // step 3: Flatten
  p.reshape(5, 4);
  p.node("Sigmoid");   // step 4: Sigmoid
  p.eltwise(2, 5, {{Alg::Logistic, 0.0f, 0.0f}}, false);
}

AF_PARTITIONS(partition_0)
