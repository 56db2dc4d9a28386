#pragma once
// Console: the run's terminal output. Progress lines and profile tables share
// it, so their output never interleaves.

#include <cstdio>
#include <mutex>
#include <string>
#include <string_view>

namespace dflash_example {

class Console {
 public:
  Console(std::FILE* out, bool tty, bool quiet) : out_(out), tty_(tty), quiet_(quiet) {}
  /// A progress line: rewritten in place on a terminal, one line each otherwise.
  void progress(const std::string& line) {
    if (quiet_) return;
    std::lock_guard lk(m_);
    if (tty_) {
      std::fprintf(out_, "\r%s\033[K", line.c_str());
      pending_ = true;
    } else {
      std::fprintf(out_, "%s\n", line.c_str());
    }
    std::fflush(out_);
  }
  /// A block of text (a profile table), starting on a fresh line.
  void block(std::string_view text) {
    std::lock_guard lk(m_);
    if (pending_) std::fputc('\n', out_);
    pending_ = false;
    std::fwrite(text.data(), 1, text.size(), out_);
    if (text.empty() || text.back() != '\n') std::fputc('\n', out_);
    std::fflush(out_);
  }

 private:
  std::mutex m_;
  std::FILE* out_;
  bool tty_, quiet_;
  bool pending_ = false;
};

}  // namespace dflash_example
