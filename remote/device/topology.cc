#include "remote/device/topology.h"

#include <hwloc.h>

#include <cstdio>

namespace gpupool::device {

struct Topology::Impl {
  hwloc_topology_t topo = nullptr;
  ~Impl() {
    if (topo != nullptr) hwloc_topology_destroy(topo);
  }
};

Topology::Topology(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Topology::~Topology() = default;

std::unique_ptr<Topology> Topology::Load(bool with_pci) {
  auto impl = std::make_unique<Impl>();
  if (hwloc_topology_init(&impl->topo) != 0) {
    impl->topo = nullptr;
  } else {
    if (with_pci) {
      hwloc_topology_set_io_types_filter(impl->topo, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
    }
    if (hwloc_topology_load(impl->topo) != 0) {
      hwloc_topology_destroy(impl->topo);
      impl->topo = nullptr;
    }
  }
  return std::unique_ptr<Topology>(new Topology(std::move(impl)));
}

int Topology::NumaNodeCount() const {
  if (impl_->topo == nullptr) return 1;
  int n = hwloc_get_nbobjs_by_type(impl_->topo, HWLOC_OBJ_NUMANODE);
  return n > 0 ? n : 1;
}

int Topology::NumaNodeOfPci(const std::string& pci_bus_id) const {
  if (impl_->topo == nullptr) return -1;
  unsigned domain = 0, bus = 0, dev = 0, func = 0;
  if (std::sscanf(pci_bus_id.c_str(), "%x:%x:%x.%x", &domain, &bus, &dev, &func) != 4) return -1;
  hwloc_obj_t pci = hwloc_get_pcidev_by_busid(impl_->topo, domain, bus, dev, func);
  if (pci == nullptr) return -1;
  hwloc_obj_t parent = hwloc_get_non_io_ancestor_obj(impl_->topo, pci);
  if (parent == nullptr || parent->nodeset == nullptr) return -1;
  // A device attached to several nodes (rare) is reported on the first of them.
  int first = hwloc_bitmap_first(parent->nodeset);
  if (first < 0) return -1;
  hwloc_obj_t node = hwloc_get_numanode_obj_by_os_index(impl_->topo, static_cast<unsigned>(first));
  return node != nullptr ? static_cast<int>(node->os_index) : first;
}

int SimNumaNode(int index, int gpu_count, int numa_nodes) {
  if (gpu_count <= 0 || numa_nodes <= 1 || index < 0) return 0;
  return static_cast<int>(static_cast<long long>(index) * numa_nodes / gpu_count);
}

}  // namespace gpupool::device
