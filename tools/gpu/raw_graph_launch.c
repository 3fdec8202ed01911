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
