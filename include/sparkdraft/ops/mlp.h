// The contract of the SwiGLU activation.
//   gu is [rows, 2I] (gate in [0, I), up in [I, 2I));
//   y = bf16(silu_f32(f32(g)) * f32(u))      (silu_f32 from core/math.h, one rounding)
#pragma once
