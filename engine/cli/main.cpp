// engine/cli/main.cpp — the ds4-offload program: dispatches to the registered subcommands.
#include <cstdio>
#include <exception>
#include <string_view>

#include "engine/cli/command.h"

namespace ds4::cli {
std::vector<Command>& commands() {
  static std::vector<Command> c;
  return c;
}
}  // namespace ds4::cli

int main(int argc, char** argv) {
  CLI::App app{"ds4-offload: DeepSeek-V4-Flash on consumer GPUs with expert offload"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "ds4-offload 0.1.0");
  std::vector<std::pair<CLI::App*, ds4::cli::Command*>> subs;
  for (auto& c : ds4::cli::commands()) subs.emplace_back(c.setup(app), &c);
  // CLI11 allows one-character short names only: llama.cpp's `-np N` (serve) is read as `--np N`.
  for (int i = 1; i < argc; ++i) if (std::string_view(argv[i]) == "-np") argv[i] = const_cast<char*>("--np");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  for (auto& [sub, cmd] : subs)
    if (sub->parsed()) {
      try {
        return cmd->run();
      } catch (const std::exception& e) {
        std::fprintf(stderr, "ds4-offload %s: error: %s\n", cmd->name.c_str(), e.what());
        return 1;
      }
    }
  return 1;
}
