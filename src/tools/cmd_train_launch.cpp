// wren train: the trainer is its own binary, wren-train (tools/cmd_train.cpp, built only with
// libtorch), so that `wren` and the engine never load torch. This subcommand executes the
// wren-train beside the running wren with the same arguments.
#include <CLI/CLI.hpp>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "tools/commands.h"

namespace wren::tools {

namespace {

std::filesystem::path trainer_path() {
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) throw std::runtime_error("train: cannot find the running binary (/proc/self/exe): " + ec.message());
  return self.parent_path() / "wren-train";
}

[[noreturn]] void run_trainer(const std::vector<std::string>& args) {
  const std::filesystem::path trainer = trainer_path();
  if (!std::filesystem::exists(trainer))
    throw std::runtime_error(trainer.string() +
                             " is absent: this build has no trainer (it needs libtorch: run scripts/bootstrap, "
                             "then rebuild with -DWREN_TRAIN=ON)");
  std::vector<std::string> argv_text{trainer.string()};
  argv_text.insert(argv_text.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : argv_text) argv.push_back(a.data());
  argv.push_back(nullptr);
  ::execv(argv[0], argv.data());
  throw std::runtime_error("train: cannot run " + trainer.string() + ": " + std::strerror(errno));
}

}  // namespace

void register_train(CLI::App& app) {
  auto* cmd = app.add_subcommand("train", "train a model on text files and export a model directory (runs wren-train)");
  cmd->prefix_command();  // every argument, --help included, is wren-train's
  cmd->set_help_flag();
  cmd->callback([cmd] { run_trainer(cmd->remaining()); });
}

}  // namespace wren::tools
