"""What this CPU has, for the tests of kernels only some CPUs run (CI's may lack AVX-512)."""
import pytest

from autofusion.backend.native import build
from autofusion.backend.precision import has_bf16

AVX512 = " avx512f " in f" {build._cpu().split('|')[-1]} "

# the runtime's own loops (softmax, layer norm, gates, channel scales, depthwise) are built only
# with AVX-512 (runtime/vector.h VECTORISED); so are the oneDNN brgemm kernels some tests name
own_loops = pytest.mark.skipif(not AVX512, reason="the runtime's own loops need AVX-512")
avx512 = pytest.mark.skipif(not AVX512, reason="oneDNN's AVX-512 kernels")
# bf16 dot products (avx512_bf16 or AMX): without them precision="bf16" runs fp32
bf16_dots = pytest.mark.skipif(not has_bf16(), reason="no bf16 dot products on this CPU")
