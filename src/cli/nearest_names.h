// "Did you mean": the valid names nearest a word the user typed (a flag or a command).
//
// Distance is optimal string alignment (Levenshtein plus one transposition of neighbours,
// the commonest typo: "trian" is one edit from "train"). A name is offered when it is within
// a distance that grows with the word (1 up to 4 letters, 2 up to 8, else 3), or when the
// word is a prefix of it of at least 3 letters ("--warm" -> "--warmup"; ranked after one
// edit and before two). Only the nearest ones are offered, at most three, so a wild word
// gets no suggestion rather than a list.
#pragma once

#include <string>
#include <vector>

namespace mt {

size_t edit_distance(const std::string& a, const std::string& b);

// The names nearest `word`, best first (ties in the order of `names`); empty when none is
// near. Leading dashes are ignored on both sides, so "--step" and "steps" compare as words.
std::vector<std::string> nearest_names(const std::string& word,
                                       const std::vector<std::string>& names);

// "; did you mean --steps?" or "; did you mean --beta1 or --beta2?"; empty when none is near.
std::string did_you_mean(const std::string& word, const std::vector<std::string>& names);

}  // namespace mt
