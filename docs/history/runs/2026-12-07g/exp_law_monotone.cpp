// 2026-12-07g (sitting 30): exp_law over every float of [-87, 0] in increasing order;
// prints each place where it decreases. Build from the repository root, F this file:
//   g++ -O2 -std=c++20 -Iinclude -Isrc "$F" -o /tmp/mono
// Output on this machine (27 s), recorded below the code.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include "sparkdraft/core/verify_math.h"
using namespace sparkdraft;
int main() {
  // every float of [-87, 0], in increasing order: from -87 (bits 0xc2ae0000) down in bits to -0
  uint32_t lo = 0xc2ae0000u;
  float prev = exp_law(bits_f32(lo));
  long bad = 0;
  long n = 0;
  for (uint32_t b = lo - 1; b >= 0x80000000u; --b) {
    float e = exp_law(bits_f32(b));
    ++n;
    if (e < prev) {
      if (bad < 5) printf("non-monotone at %a: %a < %a\n", bits_f32(b), e, prev);
      ++bad;
    }
    prev = e;
    if (b == 0x80000000u) break;
  }
  // then +0
  printf("n %ld bad %ld\n", n, bad);
}
// Output:
//   non-monotone at -0x1.ffff74p-3: 0x1.8ebf14p-1 < 0x1.8ebf16p-1
//   non-monotone at -0x1.fffe92p-3: 0x1.8ebf4p-1 < 0x1.8ebf42p-1
//   non-monotone at -0x1.fffdbp-3: 0x1.8ebf6cp-1 < 0x1.8ebf6ep-1
//   non-monotone at -0x1.fff7cap-3: 0x1.8ec092p-1 < 0x1.8ec094p-1
//   non-monotone at -0x1.fff6e8p-3: 0x1.8ec0bep-1 < 0x1.8ec0cp-1
//   n 1118699520 bad 2878
