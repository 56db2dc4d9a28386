#pragma once
// The few operating-system calls dflash's headers make, declared here rather
// than through <unistd.h>, <sys/syscall.h> or <linux/membarrier.h>: a public
// header's includes land in every user's translation unit, and those would
// take names such as pipe, read, write, close and sleep at global scope (a
// user's `using pipe = ...;` then fails to compile). An extern "C"
// declaration inside a namespace names the C function itself, and agrees with
// the system's own declaration where a user includes it.

namespace dflash::detail::os {

#if defined(__unix__) || defined(__APPLE__)
extern "C" int getpid() noexcept;  // pid_t is int on Linux (glibc, musl), macOS and the BSDs
#define DFLASH_HAS_GETPID 1
#else
#define DFLASH_HAS_GETPID 0
#endif

// membarrier(2): the Linux kernel ABI's numbers (linux/membarrier.h,
// asm/unistd.h), for the architectures dflash knows; elsewhere none.
#if defined(__linux__) && (defined(__x86_64__) || defined(__aarch64__))
extern "C" long syscall(long number, ...) noexcept;
#define DFLASH_HAS_MEMBARRIER 1
#if defined(__x86_64__)
inline constexpr long nr_membarrier = 324;
#else
inline constexpr long nr_membarrier = 283;  // aarch64 (the generic syscall table)
#endif
inline constexpr int membarrier_cmd_query = 0;
inline constexpr int membarrier_cmd_private_expedited = 1 << 3;
inline constexpr int membarrier_cmd_register_private_expedited = 1 << 4;
#else
#define DFLASH_HAS_MEMBARRIER 0
#endif

/// The process id (for trace files); 1 where there is no getpid.
inline long process_id() noexcept {
#if DFLASH_HAS_GETPID
  return static_cast<long>(getpid());
#else
  return 1;
#endif
}

}  // namespace dflash::detail::os
