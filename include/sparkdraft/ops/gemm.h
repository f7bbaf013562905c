// The contract of the matrix products (SPEC section 3).
//   y[m][n] = bf16( sum_k f32(x[m][k]) * f32(w[n][k]) )      fp32 accumulation
// x: [M, x_stride], w: [N, K] (a Linear weight), y: [M, y_stride].
// Today the backbone's products are cuBLASLt on the GPU and a plain fp32 loop on the
// CPU, held to each other within a bf16-ulp budget; the tensor-core chain of SPEC
// section 3 (core/mma.h) replaces both in the issue "own GEMMs and attention". The
// Markov bias already is that chain (ops/markov.h).
#pragma once
