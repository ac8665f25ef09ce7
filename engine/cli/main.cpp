// engine/cli/main.cpp — the ds4-offload program: dispatches to the registered subcommands.
// Every error, from the command line or from a subcommand, is printed as one line
// "ds4-offload CMD: error: ..." and exits with kExitBadInput (1).
#include <cstdio>
#include <cstring>
#include <exception>
#include <new>
#include <string>
#include <vector>
#include <string_view>

#include "ds4/mapped_files.h"
#include "ds4/oom_message.h"
#include "engine/cli/command.h"

namespace ds4::cli {
std::vector<Command>& commands() {
  static std::vector<Command> c;
  return c;
}
}  // namespace ds4::cli

namespace {

/// The names of all subcommands, comma-separated, in registration order.
std::string command_list() {
  std::string s;
  for (const auto& c : ds4::cli::commands()) s += (s.empty() ? "" : ", ") + c.name;
  return s;
}

/// llama.cpp spellings CLI11 cannot declare (its short names are one letter): rewritten to the
/// long option before parsing.
std::vector<std::string> normalized_args(int argc, char** argv) {
  std::vector<std::string> a;
  for (int i = 1; i < argc; ++i) {
    std::string s = argv[i];
    if (s == "-ngl") s = "--n-gpu-layers";
    else if (s.rfind("-ngl=", 0) == 0) s = "--n-gpu-layers=" + s.substr(5);
    else if (s == "-cnv") s = "--conversation";
    a.push_back(std::move(s));
  }
  // `run -cnv` (llama.cpp's conversation mode) is the chat command.
  if (!a.empty() && a[0] == "run") {
    const size_t before = a.size();
    std::erase(a, std::string("--conversation"));
    if (a.size() != before) a[0] = "chat";
  }
  return a;
}

/// The first argument after the command word that looks like an option but is none of `sub`'s
/// (nor the program's), e.g. `score -o F`: CLI11 reports a missing required option before an
/// unknown one, which would hide the real mistake, and lists extras value first ("F -o"). Values such as "-1" or "-" are not options;
/// "--name=value" and CLI11's attached short form "-n32" are checked by their option part.
/// Returns "" when every option-looking argument is known.
std::string unknown_option(const CLI::App& app, const CLI::App& sub, const std::vector<std::string>& args) {
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--") break;  // everything after it is positional
    if (a.size() < 2 || a[0] != '-' || (a[1] >= '0' && a[1] <= '9') || a[1] == '.') continue;
    std::string name = a.substr(0, a.find('='));
    if (name.size() > 2 && name[1] != '-') name = name.substr(0, 2);  // -n32 = -n 32
    bool known = false;
    for (const CLI::App* owner : {&sub, &app})
      for (const CLI::Option* o : owner->get_options())
        known = known || o->check_name(name);
    if (!known) return a;
  }
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  using ds4::cli::kExitBadInput;
  // A model file cut or rewritten while mapped: one error naming it, not a silent SIGBUS death.
  ds4::mapped_files::install_sigbus_report("ds4-offload", kExitBadInput);
  CLI::App app{"ds4-offload: DeepSeek-V4-Flash on consumer GPUs with expert offload"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "ds4-offload 0.1.0");
  std::vector<std::pair<CLI::App*, ds4::cli::Command*>> subs;
  for (auto& c : ds4::cli::commands()) subs.emplace_back(c.setup(app), &c);
  std::vector<std::string> args = normalized_args(argc, argv);
  // CLI11 allows one-character short names only: llama.cpp's `-np N` (serve) is read as `--np N`.
  for (auto& a : args)
    if (a == "-np") a = "--np";
  // llama.cpp's `-fa` / `--flash-attn [on|off|auto]` (CLI11 would read `-fa` as `-f a`, a prompt
  // file named "a"): noted and dropped, since attention here always runs this runtime's own ops.
  for (size_t i = 0; i < args.size();) {
    if (args[i] != "-fa" && args[i] != "--flash-attn") {
      ++i;
      continue;
    }
    size_t n = 1;
    if (i + 1 < args.size() && (args[i + 1] == "on" || args[i + 1] == "off" || args[i + 1] == "auto" ||
                                args[i + 1] == "1" || args[i + 1] == "0"))  // llama-bench's -fa 0|1
      n = 2;
    std::fprintf(stderr, "ds4-offload: note: %s is llama.cpp's flash-attention switch; ignored here (attention always "
                         "runs ds4-offload's own sparse-attention ops)\n", args[i].c_str());
    args.erase(args.begin() + long(i), args.begin() + long(i + n));
  }
  // An unknown first word is named as an unknown command, with the list (CLI11 would call it an
  // unexpected argument).
  if (!args.empty() && !args[0].empty() && args[0][0] != '-') {
    bool known = false;
    for (auto& [sub, cmd] : subs) known = known || cmd->name == args[0];
    if (!known) {
      std::fprintf(stderr, "ds4-offload: error: unknown command '%s'; expected one of: %s (ds4-offload --help)\n",
                   args[0].c_str(), command_list().c_str());
      return kExitBadInput;
    }
  }
  if (args.empty()) {
    std::fprintf(stderr, "ds4-offload: error: a command is required: %s (ds4-offload --help; ds4-offload CMD --help)\n",
                 command_list().c_str());
    return kExitBadInput;
  }
  try {
    std::vector<std::string> rev(args.rbegin(), args.rend());  // CLI11 parses a reversed vector
    app.parse(rev);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::string name;
    std::string what = e.what();
    for (auto& [sub, cmd] : subs)
      if (sub->parsed()) {
        name = " " + cmd->name;
        const bool required = dynamic_cast<const CLI::RequiredError*>(&e) != nullptr;
        if (required || dynamic_cast<const CLI::ExtrasError*>(&e))
          if (const std::string u = unknown_option(app, *sub, args); !u.empty())
            what = "unknown option '" + u + "': not an option of '" + cmd->name + "'" +
                   (required ? " (and " + what + ")" : "");
      }
    std::fprintf(stderr, "ds4-offload%s: error: %s (ds4-offload%s --help)\n", name.c_str(), what.c_str(), name.c_str());
    return kExitBadInput;
  }
  for (auto& [sub, cmd] : subs)
    if (sub->parsed()) {
      // The SIGBUS report in the commands' error style ("ds4-offload CMD: error: ...").
      ds4::mapped_files::install_sigbus_report(("ds4-offload " + cmd->name).c_str(), kExitBadInput);
      try {
        return cmd->run();
      } catch (const std::bad_alloc&) {
        std::fprintf(stderr, "ds4-offload %s: error: %s\n", cmd->name.c_str(),
                     ds4::out_of_memory_message("running '" + cmd->name + "'").c_str());
        return kExitBadInput;
      } catch (const std::exception& e) {
        std::fprintf(stderr, "ds4-offload %s: error: %s\n", cmd->name.c_str(), e.what());
        return kExitBadInput;
      }
    }
  return kExitBadInput;
}
