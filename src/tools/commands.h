// tools/: every subcommand's registration function. A subcommand's callback throws on
// error; main() prints the message and exits non-zero.
#pragma once

namespace CLI { class App; }

namespace wren::tools {

void register_explore(CLI::App& app);

inline void register_all(CLI::App& app) {
  register_explore(app);
}

}  // namespace wren::tools
