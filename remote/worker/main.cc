#include "remote/worker/device_kinds.h"
#include "remote/worker/session_worker.h"

int main(int argc, char** argv) {
  gpupool::worker::RegisterDeviceKinds();  // before any thread: the start message names one
  return gpupool::worker::RunSessionWorker(argc, argv);
}
