// main() of the agentd tests that talk HTTP with MUNGE credentials: a private munged for
// the whole binary (test_env.h, PrivateMunged), then every test.
#include <gtest/gtest.h>

#include "tests/agentd/test_env.h"

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  testing::AddGlobalTestEnvironment(new gpupool::agentd::testing_env::PrivateMunged);
  return RUN_ALL_TESTS();
}
