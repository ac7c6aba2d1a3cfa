// tools/: the `wren` command line. One small file per subcommand; each registers itself
// with the CLI11 app here and does its work through the library.
#include <CLI/CLI.hpp>

#include "tools/cli_main.h"
#include "tools/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"wren: design, train and run hybrid sparse mixture-of-experts models on small devices"};
  app.require_subcommand(1);
  wren::tools::register_all(app);
  return wren::tools::run_cli(app, argc, argv);
}
