// tools/: writing a command's output files: to a temporary name in the same directory,
// then renamed, so an interrupted run never leaves a half-written file.
#pragma once

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>

namespace wren::tools {

inline void write_text_atomic(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw std::runtime_error(path + ": cannot open for writing");
    out << text;
    out.flush();
    if (!out) {
      std::remove(tmp.c_str());
      throw std::runtime_error(path + ": write failed");
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::remove(tmp.c_str());
    throw std::runtime_error(path + ": cannot rename from " + tmp + ": " + ec.message());
  }
}

}  // namespace wren::tools
