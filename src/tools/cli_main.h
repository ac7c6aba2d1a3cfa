// tools/: what the main() of both binaries (wren, wren-train) does with a configured CLI11
// app: parse and run the chosen callback; a usage error prints CLI11's message, any other
// error "wren: error: <message>", each with a non-zero exit status.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>

namespace wren::tools {

inline int run_cli(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "wren: error: %s\n", e.what());
    return 1;
  }
  return 0;
}

}  // namespace wren::tools
