// gpupoolctl: the admin tool for gpupoold, in the style of scontrol. See gpupoolctl(1).
#include <iostream>
#include <string>
#include <vector>

#include "poold/ctl/ctl.h"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  return gpupool::ctl::Main(args, gpupool::ctl::CtlEnv::FromProcess(), std::cout, std::cerr);
}
