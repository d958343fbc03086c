# Cross build for 64-bit Arm Linux with Debian's cross toolchain (g++-aarch64-linux-gnu), its
# binaries run under qemu-user (qemu-aarch64). tools/arm64/test.sh configures with it:
#   cmake -S . -B build-arm64 -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake -DDEEPINFER_KERNELS_ONLY=ON
# The target's libraries and headers come from the cross toolchain's sysroot
# (/usr/aarch64-linux-gnu); nothing of the host's /usr/include or /usr/lib is searched for them
# (the header-only JSON library is taken from the host by the top-level CMakeLists.txt, and
# GoogleTest is compiled from Debian's sources in /usr/src/googletest).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)

set(DI_CROSS_TRIPLE aarch64-linux-gnu)
set(DI_CROSS_SYSROOT /usr/${DI_CROSS_TRIPLE})
set(CMAKE_C_COMPILER ${DI_CROSS_TRIPLE}-gcc)
set(CMAKE_CXX_COMPILER ${DI_CROSS_TRIPLE}-g++)

set(CMAKE_FIND_ROOT_PATH ${DI_CROSS_SYSROOT})
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)  # host programs (ccache, python)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)

# Test binaries (and anything CMake runs for the target) go through the emulator; -L points
# the emulated dynamic loader at the cross sysroot's libc / libstdc++.
find_program(DI_QEMU_AARCH64 qemu-aarch64)
if(DI_QEMU_AARCH64)
  set(CMAKE_CROSSCOMPILING_EMULATOR ${DI_QEMU_AARCH64} -L ${DI_CROSS_SYSROOT})
endif()
