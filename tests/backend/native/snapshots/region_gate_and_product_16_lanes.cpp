// fused_test: 2 op(s) over [1, 8, 6, 6], 16 elements at a time, up to 2 vectors a step
static void kernel_0_0(const float* const* in, float* const* out, const int64_t* d) {
  const float* in0 = in[0];
  const float* in1 = in[1];
  float* out0 = out[0];
  float* out1 = out[1];
  for (int64_t i0 = 0; i0 < 8; ++i0) {
    for (int64_t i1 = 0; i1 < 32; i1 += 32) {
      vec16 x0[2], t1[2];
      AF_EACH(2) x0[u] = load16(&in0[i0 * 36 + i1 + 16 * u], ALL_LANES);
      const float x1 = in1[i0];
      const float t0 = af_sigmoid(x1);   // Sigmoid
      AF_EACH(2) t1[u] = (x0[u] * t0);   // Mul
      AF_EACH(2) store16(&out0[i0 * 36 + i1 + 16 * u], t1[u], ALL_LANES);
    }
    for (int64_t i1 = 32; i1 < 36; i1 += 16) {
      const __mmask16 live = lanes_from(36 - i1);
      const vec16 x0 = load16(&in0[i0 * 36 + i1], live);
      const float x1 = in1[i0];
      const auto t0 = af_sigmoid(x1);   // Sigmoid
      const auto t1 = (x0 * t0);   // Mul
      store16(&out0[i0 * 36 + i1], t1, live);
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
