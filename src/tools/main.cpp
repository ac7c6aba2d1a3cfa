// tools/: the `wren` command line. One small file per subcommand; each registers itself
// with the CLI11 app here and does its work through the library.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>

#include "tools/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"wren: design, train and run hybrid sparse mixture-of-experts models on small devices"};
  app.require_subcommand(1);
  wren::tools::register_all(app);
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
