#include "remote/worker/session_worker.h"

int main(int argc, char** argv) { return gpupool::worker::RunSessionWorker(argc, argv); }
