// The contract of the embedding and of the residual's widening.
//   embed: out[r] = table[ids[r]]              (exact bf16 copies of rows of H)
//   widen: out[i] = f32(x[i])                  (exact: the fp32 residual starts as the
//                                               embedding)
#pragma once
