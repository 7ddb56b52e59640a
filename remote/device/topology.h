// Topology: the NUMA locality of this machine's PCI devices, read with hwloc.
//
// The cuda backend asks which NUMA node a GPU (by PCI bus id) hangs off; the sim backend
// asks how many NUMA nodes the machine has, to spread simulated GPUs over them as a real
// multi-socket server would. Loading the topology takes milliseconds: do it once.
#pragma once

#include <memory>
#include <string>

namespace gpupool::device {

class Topology {
 public:
  // Never fails: without hwloc data every answer is "unknown" (-1) or 1 node.
  // `with_pci`: also discover PCI devices (slower; only the cuda backend needs it).
  static std::unique_ptr<Topology> Load(bool with_pci);
  ~Topology();
  Topology(const Topology&) = delete;
  Topology& operator=(const Topology&) = delete;

  int NumaNodeCount() const;  // >= 1
  // NUMA node (os index) nearest to the PCI device "dddd:bb:dd.f" (or "dddddddd:bb:dd.f"
  // as NVML prints it); -1 when unknown or on a single-node machine without locality.
  int NumaNodeOfPci(const std::string& pci_bus_id) const;

 private:
  struct Impl;
  explicit Topology(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// NUMA node of the index-th of `gpu_count` simulated GPUs on a machine with `numa_nodes`
// nodes: consecutive blocks, as on a 2-socket 8-GPU server (0-3 → node 0, 4-7 → node 1).
int SimNumaNode(int index, int gpu_count, int numa_nodes);

}  // namespace gpupool::device
