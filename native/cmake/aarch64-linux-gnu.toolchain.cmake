# Cross-compiles the adapter (and the C++ reference runner) for aarch64 Linux
# on an x86_64 host with Debian/Ubuntu's g++-aarch64-linux-gnu:
#
#   cmake -S native -B build/native-aarch64 \
#         -DCMAKE_TOOLCHAIN_FILE=native/cmake/aarch64-linux-gnu.toolchain.cmake \
#         -Dexecutorch_DIR=<unpacked aarch64 executorch wheel>/executorch/lib/cmake/executorch
#
# executorch_DIR must name the aarch64 wheel's CMake package: the host's
# executorch is an x86_64 library and would not link. tools/release/ does this.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)

set(_etrt_triple aarch64-linux-gnu)
find_program(CMAKE_C_COMPILER ${_etrt_triple}-gcc REQUIRED)
find_program(CMAKE_CXX_COMPILER ${_etrt_triple}-g++ REQUIRED)

# Libraries and headers come from the target (the cross toolchain's sysroot
# and the paths the project names), never from the host; programs such as
# Python (which generates the blob constants) run on the host.
set(CMAKE_FIND_ROOT_PATH /usr/${_etrt_triple})
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
# Packages are found by explicit *_DIR (executorch_DIR, executorch_tensorrt_DIR)
# that point outside the sysroot, so package lookup is not confined to it.
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)

# Emulated runs of try_run/tests, when qemu-user is installed.
find_program(_etrt_qemu qemu-${CMAKE_SYSTEM_PROCESSOR})
if(_etrt_qemu)
  set(CMAKE_CROSSCOMPILING_EMULATOR "${_etrt_qemu};-L;/usr/${_etrt_triple}")
endif()
