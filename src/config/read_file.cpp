#include "config/read_file.h"

#include <fstream>
#include <sstream>
#include <stdexcept>

namespace wren {

std::optional<std::string> try_read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return std::nullopt;
  return std::move(ss).str();
}

std::string read_file(const std::string& path) {
  std::optional<std::string> bytes = try_read_file(path);
  if (!bytes) throw std::runtime_error(path + ": cannot open");
  return std::move(*bytes);
}

}  // namespace wren
