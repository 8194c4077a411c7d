// fused_test: 7 op(s) over [2, 4, 8, 64], 64 row(s) of 64
static void kernel_0_0(const float* const* in, float* const* out, const int64_t* d) {
  const float* in0 = in[0];
  const float* in1 = in[1];
  float* out0 = out[0];
  for (int64_t r0 = 0; r0 < 2; ++r0) {
    for (int64_t r1 = 0; r1 < 32; ++r1) {
      float a2_0 = (-af::inf);
      #pragma omp simd reduction(af_max : a2_0)
      for (int64_t c0 = 0; c0 < 64; ++c0) {
        const float x0 = in0[r0 * 2048 + r1 * 64 + c0];
        const float x1 = in1[r0 * 64 + c0];
        const float t0 = (x0 * 0.125f);   // Mul
        const float t1 = (t0 + x1);   // Add
        a2_0 = af_max(a2_0, t1);
      }
      const float t2 = a2_0;   // ReduceMax
      float a5_0 = 0.f;
      #pragma omp simd reduction(+ : a5_0)
      for (int64_t c0 = 0; c0 < 64; ++c0) {
        const float x0 = in0[r0 * 2048 + r1 * 64 + c0];
        const float x1 = in1[r0 * 64 + c0];
        const float t0 = (x0 * 0.125f);   // Mul
        const float t1 = (t0 + x1);   // Add
        const float t3 = (t1 - t2);   // Sub
        const float t4 = expf(t3);   // Exp
        a5_0 += t4;
      }
      const float t5 = a5_0;   // ReduceSum
      #pragma omp simd
      for (int64_t c0 = 0; c0 < 64; ++c0) {
        const float x0 = in0[r0 * 2048 + r1 * 64 + c0];
        const float x1 = in1[r0 * 64 + c0];
        const float t0 = (x0 * 0.125f);   // Mul
        const float t1 = (t0 + x1);   // Add
        const float t3 = (t1 - t2);   // Sub
        const float t4 = expf(t3);   // Exp
        const float t6 = (t4 / t5);   // Div
        out0[r0 * 2048 + r1 * 64 + c0] = t6;
      }
    }
  }
}
