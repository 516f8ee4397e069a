#include "cli/parse_error_message.h"

#include <vector>

#include "cli/nearest_names.h"
#include "core/error.h"

namespace mt {

namespace {

std::vector<const CLI::App*> subcommands_of(const CLI::App& app) {
  std::vector<const CLI::App*> out;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; }))
    out.push_back(sub);
  return out;
}

std::vector<std::string> command_names(const CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::App* sub : subcommands_of(app)) names.push_back(sub->get_name());
  return names;
}

std::vector<std::string> option_names(const CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::Option* opt : app.get_options()) {
    for (const std::string& l : opt->get_lnames()) names.push_back("--" + l);
    for (const std::string& s : opt->get_snames()) names.push_back("-" + s);
  }
  return names;
}

// The commands the user selected, from the top: {meshtrain, train} or {meshtrain,
// checkpoint, verify}. CLI11 records a subcommand as parsed as soon as it meets its name.
std::vector<const CLI::App*> selected_chain(const CLI::App& app) {
  std::vector<const CLI::App*> chain{&app};
  while (true) {
    const std::vector<CLI::App*> subs = chain.back()->get_subcommands();
    if (subs.empty()) return chain;
    chain.push_back(subs.front());
  }
}

std::string command_path(const std::vector<const CLI::App*>& chain, size_t last) {
  std::string path;
  for (size_t i = 0; i <= last; ++i) path += (i ? " " : "") + chain[i]->get_name();
  return path;
}

std::string help_pointer(const std::string& path) {
  return " (see '" + path + " --help')";
}

// The word to name among the unexpected ones: the first that looks like a flag (a value
// follows its unknown flag), else the first.
std::string first_unexpected(const std::vector<std::string>& extras) {
  for (const std::string& w : extras)
    if (w.size() > 1 && w[0] == '-') return w.substr(0, w.find('='));
  return extras.front();
}

std::string unexpected_message(const std::vector<const CLI::App*>& chain, size_t at) {
  const CLI::App& cmd = *chain[at];
  const std::string path = command_path(chain, at);
  const std::string word = first_unexpected(cmd.remaining(false));
  if (word[0] == '-')
    return str("unknown option ", word, did_you_mean(word, option_names(cmd)), help_pointer(path));
  // The command words the user typed before it, without "meshtrain".
  const std::string under = at == 0 ? "" : path.substr(chain[0]->get_name().size() + 1) + " ";
  if (!subcommands_of(cmd).empty())
    return str("unknown command '", under, word, "'", did_you_mean(word, command_names(cmd)),
               help_pointer(path));
  return str("unexpected argument '", word, "'", help_pointer(path));
}

}  // namespace

std::string parse_error_message(const CLI::App& app, const CLI::ParseError& e) {
  const std::vector<const CLI::App*> chain = selected_chain(app);
  // Words left over explain the error best, whichever CLI11 reports: "The following
  // arguments were not expected" (from the first command from the top that has some, as
  // CLI11's _process_extras checks), or "A subcommand is required" after a misspelt one.
  for (size_t i = 0; i < chain.size(); ++i)
    if (chain[i]->remaining_size() > 0) return unexpected_message(chain, i);
  std::string msg = e.what();
  if (msg.empty()) msg = "bad command line";
  return msg + help_pointer(command_path(chain, chain.size() - 1));
}

std::string unknown_command_message(const CLI::App& app, const std::string& word) {
  std::string known;
  for (const std::string& name : command_names(app)) known += (known.empty() ? "" : ", ") + name;
  return str("unknown command '", word, "'", did_you_mean(word, command_names(app)),
             " (commands: ", known, "; see '", app.get_name(), " --help')");
}

}  // namespace mt
