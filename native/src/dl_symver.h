/*
 * Binds the dl* functions the adapter calls to their pre-2.34 glibc
 * versions. The wheel's libexecutorch.so needs at most GLIBC_2.27; glibc 2.34
 * moved these into libc under a new version (GLIBC_2.34), so a plain build on
 * a newer glibc would not load beside it. The old versions still exist in
 * every newer glibc. Include this in each source file that calls them.
 */
#ifndef EXECUTORCH_TENSORRT_DL_SYMVER_H
#define EXECUTORCH_TENSORRT_DL_SYMVER_H

#if defined(__GLIBC__) && defined(__x86_64__)
__asm__(".symver dladdr,dladdr@GLIBC_2.2.5");
__asm__(".symver dlopen,dlopen@GLIBC_2.2.5");
__asm__(".symver dlsym,dlsym@GLIBC_2.2.5");
__asm__(".symver dlerror,dlerror@GLIBC_2.2.5");
#elif defined(__GLIBC__) && defined(__aarch64__)
__asm__(".symver dladdr,dladdr@GLIBC_2.17");
__asm__(".symver dlopen,dlopen@GLIBC_2.17");
__asm__(".symver dlsym,dlsym@GLIBC_2.17");
__asm__(".symver dlerror,dlerror@GLIBC_2.17");
#endif

#endif
