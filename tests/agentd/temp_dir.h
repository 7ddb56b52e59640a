// A fresh directory for one agentd test: /tmp/PREFIX.XXXXXX made by mkdtemp, so that tests
// running at once never share one. Returns its path, or "" when it cannot be made (the
// caller asserts it is not empty).
#pragma once

#include <stdlib.h>

#include <string>

namespace gpupool::agentd::testing_env {

inline std::string MakeTempDir(const std::string& prefix) {
  std::string path = "/tmp/" + prefix + ".XXXXXX";
  return mkdtemp(path.data()) != nullptr ? path : std::string();
}

}  // namespace gpupool::agentd::testing_env
