// The public headers keep platform headers (<unistd.h>, <sys/syscall.h>, ...)
// out of users' code: names POSIX takes are free for the user at global
// scope. Built with the test suite (a clash fails the build) where the C++
// standard library allows it: with USER_NAMES_STD_ONLY, CMake first compiles
// it against the standard headers dflash uses, alone (libstdc++ 12-14's
// <atomic> and <thread> include <unistd.h> themselves in C++20).
#ifdef USER_NAMES_STD_ONLY
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>
#else
#include <dflash/dflash.hpp>
#endif

using pipe = int;                                      // POSIX: int pipe(int[2])
void read(int, void*, unsigned long) {}                // POSIX: ssize_t read(int, void*, size_t)
void write(int, const void*, unsigned long) {}         // POSIX: ssize_t write(int, const void*, size_t)
void close(int) {}                                     // POSIX: int close(int)
void sleep(unsigned) {}                                // POSIX: unsigned sleep(unsigned)
using getpid = long;                                   // POSIX: pid_t getpid(void)
using syscall = long;                                  // glibc: long syscall(long, ...)

int main() {
  pipe p = 0;
  read(p, nullptr, 0);
  write(p, nullptr, 0);
  close(p);
  sleep(0);
  getpid g = 0;
  syscall s = 0;
  return static_cast<int>(g + s);
}
