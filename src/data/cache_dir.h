// The user's cache folder for what meshtrain derives and can always derive again (the
// prepared default corpus, shuffled sample indexes): never the working directory, so a run
// leaves nothing where the user did not ask for it.
#pragma once

#include <string>

namespace mt {

// meshtrain under the XDG Base Directory cache: $XDG_CACHE_HOME when it is an absolute path
// (the spec calls a relative one invalid), else $HOME/.cache; with neither, the system temp
// folder. Arguments null or empty: unset.
std::string meshtrain_cache_dir(const char* xdg_cache_home, const char* home);
// The same from this process's environment.
std::string meshtrain_cache_dir();

}  // namespace mt
