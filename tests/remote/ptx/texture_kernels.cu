// Kernels of texture_test.cc: texture fetches and surface loads and stores through texture
// and surface objects, each lane at the coordinates the test gives it.
#include <cuda_runtime.h>

extern "C" __global__ void Sample1D(cudaTextureObject_t t, const float* x, float4* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = tex1D<float4>(t, x[i]);
}
extern "C" __global__ void Sample2D(cudaTextureObject_t t, const float2* c, float4* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = tex2D<float4>(t, c[i].x, c[i].y);
}
extern "C" __global__ void Sample2DInt(cudaTextureObject_t t, const float2* c, int4* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = tex2D<int4>(t, c[i].x, c[i].y);
}
extern "C" __global__ void Sample3D(cudaTextureObject_t t, const float4* c, float4* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = tex3D<float4>(t, c[i].x, c[i].y, c[i].z);
}
// c.w: the layer.
extern "C" __global__ void SampleLayered2D(cudaTextureObject_t t, const float4* c, float4* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = tex2DLayered<float4>(t, c[i].x, c[i].y, static_cast<int>(c[i].w));
}
extern "C" __global__ void SampleLayered1D(cudaTextureObject_t t, const float2* c, float4* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = tex1DLayered<float4>(t, c[i].x, static_cast<int>(c[i].y));
}
extern "C" __global__ void SampleCube(cudaTextureObject_t t, const float4* c, float4* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = texCubemap<float4>(t, c[i].x, c[i].y, c[i].z);
}
extern "C" __global__ void Fetch1D(cudaTextureObject_t t, const int* x, float4* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = tex1Dfetch<float4>(t, x[i]);
}
extern "C" __global__ void Gather2D(cudaTextureObject_t t, const float2* c, float4* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = tex2Dgather<float4>(t, c[i].x, c[i].y, 0);
}
// txq and suq (no CUDA C function asks them): width, height, depth/array size.
extern "C" __global__ void Query(cudaTextureObject_t t, cudaSurfaceObject_t s, int* out) {
  int w, h, a, sw, sh;
  asm("txq.width.b32 %0, [%1];" : "=r"(w) : "l"(t));
  asm("txq.height.b32 %0, [%1];" : "=r"(h) : "l"(t));
  asm("txq.array_size.b32 %0, [%1];" : "=r"(a) : "l"(t));
  asm("suq.width.b32 %0, [%1];" : "=r"(sw) : "l"(s));
  asm("suq.height.b32 %0, [%1];" : "=r"(sh) : "l"(s));
  out[0] = w;
  out[1] = h;
  out[2] = a;
  out[3] = sw;
  out[4] = sh;
}
// Each lane reads the float at element (c.x, c.y) of surface `s` (x in bytes: 4 * c.x) and
// writes it + 1 at the same place of `d`, under the boundary mode of its name.
#define SURFACE_COPY(NAME, MODE)                                                                                    \
  extern "C" __global__ void NAME(cudaSurfaceObject_t s, cudaSurfaceObject_t d, const int2* c, float* out, int n) { \
    int i = blockIdx.x * blockDim.x + threadIdx.x;                                                                  \
    if (i >= n) return;                                                                                             \
    float v = surf2Dread<float>(s, c[i].x * 4, c[i].y, MODE);                                                       \
    out[i] = v;                                                                                                     \
    surf2Dwrite(v + 1, d, c[i].x * 4, c[i].y, MODE);                                                                \
  }
SURFACE_COPY(SurfaceClamp, cudaBoundaryModeClamp)
SURFACE_COPY(SurfaceZero, cudaBoundaryModeZero)
SURFACE_COPY(SurfaceTrap, cudaBoundaryModeTrap)
// A layered surface of uchar4: each lane writes its texel (x, y, layer) = (x, y, layer, 7),
// then reads it back through a 3D-shaped read of the same bytes.
extern "C" __global__ void SurfaceLayered(cudaSurfaceObject_t s, uchar4* out, int w, int h) {
  int x = threadIdx.x, y = threadIdx.y, layer = blockIdx.x;
  if (x >= w || y >= h) return;
  surf2DLayeredwrite(make_uchar4(x, y, layer, 7), s, x * 4, y, layer);
  __syncthreads();
  out[(layer * h + y) * w + x] = surf2DLayeredread<uchar4>(s, x * 4, y, layer);
}
