// fused_test: 2 op(s) over [1, 8, 6, 6]
static void kernel_0_0(const float* const* in, float* const* out, const int64_t* d) {
  const float* in0 = in[0];
  const float* in1 = in[1];
  float* out0 = out[0];
  float* out1 = out[1];
  for (int64_t i0 = 0; i0 < 8; ++i0) {
    #pragma omp simd
    for (int64_t i1 = 0; i1 < 36; ++i1) {
      const float x0 = in0[i0 * 36 + i1];
      const float x1 = in1[i0];
      const float t0 = af_sigmoid(x1);   // Sigmoid
      const float t1 = (x0 * t0);   // Mul
      out0[i0 * 36 + i1] = t1;
    }
    {
      const float x0 = in0[i0 * 36];
      const float x1 = in1[i0];
      const float t0 = af_sigmoid(x1);   // Sigmoid
      const float t1 = (x0 * t0);   // Mul
      out1[i0] = t0;
    }
  }
}
