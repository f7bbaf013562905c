// The floor of one verify call (bench/verify/verify_floor.h): the bytes worked out
// by hand for the bench's shapes.
#include <gtest/gtest.h>

#include "verify/verify_floor.h"

namespace sparkdraft {
namespace {

// V 151936, N 7, one row, bf16: target 8 x 151936 x 2 = 2 430 976, cache
// 7 x 151936 x 2 = 2 127 104. V 202048, N 7, 32 rows, fp32 target: 32 x 8 x
// 202048 x 4 = 206 897 152, cache 32 x 7 x 202048 x 2 = 90 517 504.
TEST(VerifyFloor, TheBenchShapesByHand) {
  const bench::VerifyFloorBytes one = bench::verify_floor_bytes(1, 7, 151936, LogitsDType::bf16);
  EXPECT_EQ(one.target_logits, 2430976.0);
  EXPECT_EQ(one.draft_logits, 2127104.0);
  EXPECT_EQ(one.total(), 4558080.0);
  const bench::VerifyFloorBytes big = bench::verify_floor_bytes(32, 7, 202048, LogitsDType::f32);
  EXPECT_EQ(big.target_logits, 206897152.0);
  EXPECT_EQ(big.draft_logits, 90517504.0);
  EXPECT_EQ(big.total(), 297414656.0);
  // Linear in the rows; the target's dtype doubles only its own part.
  const bench::VerifyFloorBytes eight = bench::verify_floor_bytes(8, 7, 151936, LogitsDType::bf16);
  EXPECT_EQ(eight.total(), 8 * one.total());
  const bench::VerifyFloorBytes f32 = bench::verify_floor_bytes(1, 7, 151936, LogitsDType::f32);
  EXPECT_EQ(f32.target_logits, 2 * one.target_logits);
  EXPECT_EQ(f32.draft_logits, one.draft_logits);
}

}  // namespace
}  // namespace sparkdraft
