// Kept only for tests/cli/test_cli.cpp (sparkdraft::testing::TempDir) until that
// file moves to tests/common/ and the one test namespace, sparkdraft::test.
#pragma once

#include "common/files.h"

namespace sparkdraft::testing {
using test::TempDir;
}  // namespace sparkdraft::testing
