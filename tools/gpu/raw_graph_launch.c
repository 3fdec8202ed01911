/* The peer of the adapter's CUDA-graph plan in tools/bench_gpu.py plan: the
 * same graph exec launched `times` times back to back from C, nothing else.
 * Built on the GPU machine: gcc -O2 -shared -fPIC -o raw_graph_launch.so
 * tools/raw_graph_launch.c -ldl (no CUDA header: the driver is dlopened). */
#include <dlfcn.h>
#include <stdint.h>

typedef int (*launch_fn)(void*, void*);

int64_t raw_graph_launch(void* graph_exec, void* stream, uint64_t times) {
  static launch_fn launch = 0;
  if (launch == 0) {
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    launch = lib ? (launch_fn)dlsym(lib, "cuGraphLaunch") : 0;
    if (launch == 0) {
      return -1;
    }
  }
  for (uint64_t i = 0; i < times; ++i) {
    if (launch(graph_exec, stream) != 0) {
      return -1;
    }
  }
  return (int64_t)times;
}

typedef int (*copy_fn)(void*, const void*, size_t, void*);
typedef int (*sync_fn)(void*);

/* What the plan does per call with host arguments, nothing else: two
 * pageable host-to-device copies, the launch when `launch` is 1 (0: the
 * copies alone), a device-to-host copy and a stream synchronize, `times`
 * times. Device pointers are CUdeviceptr values passed as void*. */
int64_t raw_host_io(void* graph_exec, void* stream, void* dx, const void* hx, void* dy,
                    const void* hy, void* hout, const void* dout, uint64_t nbytes,
                    uint64_t times, int launch) {
  static launch_fn graph_launch = 0;
  static copy_fn htod = 0, dtoh = 0;
  static sync_fn sync = 0;
  if (sync == 0) {
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == 0) return -1;
    graph_launch = (launch_fn)dlsym(lib, "cuGraphLaunch");
    htod = (copy_fn)dlsym(lib, "cuMemcpyHtoDAsync_v2");
    dtoh = (copy_fn)dlsym(lib, "cuMemcpyDtoHAsync_v2");
    sync = (sync_fn)dlsym(lib, "cuStreamSynchronize");
    if (!graph_launch || !htod || !dtoh || !sync) return -1;
  }
  for (uint64_t i = 0; i < times; ++i) {
    if (htod(dx, hx, nbytes, stream) || htod(dy, hy, nbytes, stream)) return -1;
    if (launch && graph_launch(graph_exec, stream)) return -1;
    if (dtoh(hout, dout, nbytes, stream) || sync(stream)) return -1;
  }
  return (int64_t)times;
}
