// fused_test: 6 op(s) over [128, 768], 128 row(s) of 768
static void kernel_0_0(const float* const* in, float* const* out, const int64_t* d) {
  const float* in0 = in[0];
  const float* in1 = in[1];
  float* out0 = out[0];
  float* out1 = out[1];
  #pragma omp parallel for schedule(static)
  for (int64_t r0 = 0; r0 < 128; ++r0) {
    float a1_0 = 0.f;
    #pragma omp simd reduction(+ : a1_0)
    for (int64_t c0 = 0; c0 < 768; ++c0) {
      const float x0 = in0[r0 * 768 + c0];
      const float t0 = (x0 * x0);   // Mul
      a1_0 += t0;
    }
    const float t1 = (a1_0 / 768.0f);   // ReduceMean
    const float t2 = (t1 + 9.999999974752427e-07f);   // Add
    const float t3 = powf(t2, -0.5f);   // Pow
    #pragma omp simd
    for (int64_t c0 = 0; c0 < 768; ++c0) {
      const float x0 = in0[r0 * 768 + c0];
      const float x1 = in1[c0];
      const float t4 = (x0 * t3);   // Mul
      const float t5 = (t4 * x1);   // Mul
      out0[r0 * 768 + c0] = t5;
    }
    out1[r0] = t1;
  }
}
