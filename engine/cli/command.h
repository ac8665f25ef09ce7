// engine/cli/command.h — subcommand registry of the ds4-offload program.
// Each engine/cli/cmd_<name>.cpp defines one subcommand and registers it with a static
// CommandRegistrar, so subcommands are added without editing main.cpp.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace ds4::cli {

/// Exit code of every input error (bad flags, files, models): one code, as llama.cpp tools use.
inline constexpr int kExitBadInput = 1;

/// One subcommand: `setup` adds it to the app (options bound to variables it owns) and returns
/// the CLI::App*; `run` is called when the subcommand was chosen and returns the exit code.
struct Command {
  std::string name;
  std::function<CLI::App*(CLI::App& app)> setup;
  std::function<int()> run;
};

/// All registered subcommands, in registration order.
std::vector<Command>& commands();

/// Registers a subcommand at static-initialisation time.
struct CommandRegistrar {
  explicit CommandRegistrar(Command c) { commands().push_back(std::move(c)); }
};

}  // namespace ds4::cli
