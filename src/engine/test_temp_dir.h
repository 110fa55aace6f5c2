// Test-only: folders of generated models that a test binary removes when it exits. CTest runs
// every test case in its own process, and a generated model is MBs to tens of MBs: left
// behind, a full run fills the disk (it did: 60 GB of /tmp).
#pragma once

#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <string>
#include <vector>

namespace prefixd::engine::testing {

// Registers `dir` for removal at exit (std::atexit); returns it.
inline const std::string& RemoveAtExit(const std::string& dir) {
  static std::mutex mu;
  static std::vector<std::string>* dirs = new std::vector<std::string>();
  std::lock_guard<std::mutex> lock(mu);
  if (dirs->empty()) {
    std::atexit([] {
      for (const std::string& d : *dirs) {
        std::error_code ec;
        std::filesystem::remove_all(d, ec);
      }
    });
  }
  dirs->push_back(dir);
  return dir;
}

}  // namespace prefixd::engine::testing
