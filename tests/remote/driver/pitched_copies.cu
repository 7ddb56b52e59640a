// Pitched allocations and 2D/3D copies (host to device, device to device, device to host,
// sub-rectangles at offsets, synchronous and on a stream), 2D memset and batches of copies,
// each checked against the same operation done on the CPU.
#include <cstdint>
#include <cstring>
#include <vector>

#include "../programs/check.h"

namespace {

uint8_t Pattern(size_t i) { return static_cast<uint8_t>((i * 2654435761u) >> 13); }

}  // namespace

int main() {
  CHECK(cudaSetDevice(0));
  // A 2D image of width*height bytes, held densely on the host.
  const size_t width = 1000, height = 37;
  std::vector<uint8_t> image(width * height);
  for (size_t i = 0; i < image.size(); ++i) image[i] = Pattern(i);

  void* pitched = nullptr;
  size_t pitch = 0;
  CHECK(cudaMallocPitch(&pitched, &pitch, width, height));
  EXPECT(pitch >= width && pitch % 128 == 0);
  CHECK(cudaMemset2D(pitched, pitch, 0xee, pitch, height));  // the gaps too
  CHECK(cudaMemcpy2D(pitched, pitch, image.data(), width, width, height, cudaMemcpyHostToDevice));

  // Read back with the pitch: the rows, and the gaps left as set.
  std::vector<uint8_t> raw(pitch * height);
  CHECK(cudaMemcpy(raw.data(), pitched, raw.size(), cudaMemcpyDeviceToHost));
  for (size_t y = 0; y < height; ++y) {
    EXPECT(std::memcmp(&raw[y * pitch], &image[y * width], width) == 0);
    for (size_t x = width; x < pitch; ++x) EXPECT(raw[y * pitch + x] == 0xee);
  }
  std::vector<uint8_t> back(width * height);
  CHECK(cudaMemcpy2D(back.data(), width, pitched, pitch, width, height, cudaMemcpyDeviceToHost));
  EXPECT(back == image);

  // A sub-rectangle at (x0, y0), device to device into a second pitched image at (x1, y1),
  // on a stream; then read back and compare with the CPU doing the same.
  const size_t x0 = 13, y0 = 5, x1 = 100, y1 = 2, w = 301, h = 20;
  void* other = nullptr;
  size_t other_pitch = 0;
  CHECK(cudaMallocPitch(&other, &other_pitch, width, height));
  CHECK(cudaMemset2D(other, other_pitch, 0, width, height));
  cudaStream_t stream;
  CHECK(cudaStreamCreate(&stream));
  CHECK(cudaMemcpy2DAsync(static_cast<char*>(other) + y1 * other_pitch + x1, other_pitch,
                          static_cast<char*>(pitched) + y0 * pitch + x0, pitch, w, h, cudaMemcpyDeviceToDevice,
                          stream));
  std::vector<uint8_t> expected(width * height, 0);
  for (size_t y = 0; y < h; ++y) {
    std::memcpy(&expected[(y1 + y) * width + x1], &image[(y0 + y) * width + x0], w);
  }
  std::vector<uint8_t> got(width * height);
  CHECK(cudaMemcpy2DAsync(got.data(), width, other, other_pitch, width, height, cudaMemcpyDeviceToHost, stream));
  CHECK(cudaStreamSynchronize(stream));
  EXPECT(got == expected);

  // Host to device into a sub-rectangle with a host pitch wider than the copy.
  std::vector<uint8_t> patch(64 * 10);
  for (size_t i = 0; i < patch.size(); ++i) patch[i] = static_cast<uint8_t>(255 - i);
  CHECK(cudaMemcpy2D(static_cast<char*>(other) + 30 * other_pitch + 500, other_pitch, patch.data() + 3, 64, 50, 7,
                     cudaMemcpyHostToDevice));
  for (size_t y = 0; y < 7; ++y) std::memcpy(&expected[(30 + y) * width + 500], &patch[y * 64 + 3], 50);
  CHECK(cudaMemcpy2D(got.data(), width, other, other_pitch, width, height, cudaMemcpyDeviceToHost));
  EXPECT(got == expected);

  // 2D memset of a sub-rectangle.
  CHECK(cudaMemset2D(static_cast<char*>(other) + 1 * other_pitch + 7, other_pitch, 0x42, 9, 4));
  for (size_t y = 0; y < 4; ++y) std::memset(&expected[(1 + y) * width + 7], 0x42, 9);
  CHECK(cudaMemcpy2D(got.data(), width, other, other_pitch, width, height, cudaMemcpyDeviceToHost));
  EXPECT(got == expected);

  // 3D: a volume with a pitched layout, a box copied in at an offset and read back.
  const cudaExtent extent = make_cudaExtent(200, 9, 6);  // bytes, rows, slices
  cudaPitchedPtr volume{};
  CHECK(cudaMalloc3D(&volume, extent));
  EXPECT(volume.pitch >= extent.width);
  CHECK(cudaMemset3D(volume, 0, extent));
  const size_t bw = 50, bh = 4, bd = 3, bx = 20, by = 3, bz = 2;
  std::vector<uint8_t> box(bw * bh * bd);
  for (size_t i = 0; i < box.size(); ++i) box[i] = Pattern(i + 7);
  cudaMemcpy3DParms in{};
  in.srcPtr = make_cudaPitchedPtr(box.data(), bw, bw, bh);
  in.dstPtr = volume;
  in.dstPos = make_cudaPos(bx, by, bz);
  in.extent = make_cudaExtent(bw, bh, bd);
  in.kind = cudaMemcpyHostToDevice;
  CHECK(cudaMemcpy3D(&in));
  std::vector<uint8_t> dense(extent.width * extent.height * extent.depth);
  cudaMemcpy3DParms out{};
  out.srcPtr = volume;
  out.dstPtr = make_cudaPitchedPtr(dense.data(), extent.width, extent.width, extent.height);
  out.extent = extent;
  out.kind = cudaMemcpyDeviceToHost;
  CHECK(cudaMemcpy3DAsync(&out, stream));
  CHECK(cudaStreamSynchronize(stream));
  std::vector<uint8_t> volume_expected(dense.size(), 0);
  for (size_t z = 0; z < bd; ++z) {
    for (size_t y = 0; y < bh; ++y) {
      std::memcpy(&volume_expected[((bz + z) * extent.height + by + y) * extent.width + bx], &box[(z * bh + y) * bw],
                  bw);
    }
  }
  EXPECT(dense == volume_expected);

  // Stream-ordered allocation and a peer copy (both sides on this device here).
  uint8_t* ordered = nullptr;
  CHECK(cudaMallocAsync(&ordered, image.size(), stream));
  CHECK(cudaMemcpyAsync(ordered, image.data(), image.size(), cudaMemcpyHostToDevice, stream));
  uint8_t* peer = nullptr;
  CHECK(cudaMalloc(&peer, image.size()));
  CHECK(cudaStreamSynchronize(stream));
  CHECK(cudaMemcpyPeer(peer, 0, ordered, 0, image.size()));
  CHECK(cudaFreeAsync(ordered, stream));
  std::vector<uint8_t> peer_back(image.size());
  CHECK(cudaMemcpy(peer_back.data(), peer, peer_back.size(), cudaMemcpyDeviceToHost));
  EXPECT(peer_back == image);
  CHECK(cudaStreamSynchronize(stream));
  cudaPointerAttributes freed{};
  EXPECT(cudaPointerGetAttributes(&freed, ordered) != cudaSuccess || freed.type != cudaMemoryTypeDevice);
  cudaGetLastError();
  CHECK(cudaFree(peer));

  // A batch of copies (cudaMemcpyBatchAsync, CUDA 12.8): host to device with one set of
  // attributes, then device to device and device to host with another; bad attributes
  // and the legacy default stream are refused with nothing copied.
  {
    const size_t bytes = 4096;
    std::vector<uint8_t> first(bytes), second(bytes / 2), back(bytes), back2(bytes / 2, 0);
    for (size_t i = 0; i < bytes; ++i) first[i] = Pattern(i + 7);
    for (size_t i = 0; i < bytes / 2; ++i) second[i] = Pattern(i + 99);
    uint8_t *a, *b, *c;
    CHECK(cudaMalloc(&a, bytes));
    CHECK(cudaMalloc(&b, bytes / 2));
    CHECK(cudaMalloc(&c, bytes));
    void* dsts[] = {a, b};
    const void* srcs[] = {first.data(), second.data()};
    size_t sizes[] = {bytes, bytes / 2};
    cudaMemcpyAttributes attrs[2] = {};
    attrs[0].srcAccessOrder = cudaMemcpySrcAccessOrderDuringApiCall;
    attrs[1].srcAccessOrder = cudaMemcpySrcAccessOrderStream;
    size_t attr_from[] = {0, 1};
    CHECK(cudaMemcpyBatchAsync(dsts, srcs, sizes, 2, attrs, attr_from, 2, stream));
    void* dsts2[] = {c, back.data(), back2.data()};
    const void* srcs2[] = {a, c, b};
    size_t sizes2[] = {bytes, bytes, bytes / 2};
    size_t one[] = {0};
    CHECK(cudaMemcpyBatchAsync(dsts2, srcs2, sizes2, 1, attrs + 1, one, 1, stream));
    CHECK(cudaMemcpyBatchAsync(dsts2 + 1, srcs2 + 1, sizes2 + 1, 2, attrs + 1, one, 1, stream));
    CHECK(cudaStreamSynchronize(stream));
    EXPECT(back == first && back2 == second);
    // Refused batches copying a (other bytes than b) into back2 leave it as it is.
    std::vector<uint8_t> untouched = back2;
    void* dst3[] = {back2.data()};
    const void* src3[] = {a};
    size_t size3[] = {bytes / 2};
    size_t bad_from[] = {1};  // the first attribute must apply from copy 0
    EXPECT(cudaMemcpyBatchAsync(dst3, src3, size3, 1, attrs, bad_from, 1, stream) == cudaErrorInvalidValue);
    cudaMemcpyAttributes no_order = {};
    EXPECT(cudaMemcpyBatchAsync(dst3, src3, size3, 1, &no_order, one, 1, stream) == cudaErrorInvalidValue);
    EXPECT(cudaMemcpyBatchAsync(dst3, src3, size3, 1, attrs, one, 1, cudaStreamLegacy) == cudaErrorInvalidValue);
    cudaGetLastError();
    CHECK(cudaStreamSynchronize(stream));
    EXPECT(back2 == untouched);
    CHECK_FREE(a, b, c);
  }

  CHECK(cudaStreamDestroy(stream));
  CHECK(cudaFree(volume.ptr));
  CHECK_FREE(other, pitched);
  std::printf("pitched copies: ok (pitch %zu)\n", pitch);
  return 0;
}
