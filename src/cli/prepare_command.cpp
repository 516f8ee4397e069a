// `meshtrain prepare`: the user's text into a dataset directory (data/prepare.h).
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <memory>

#include "cli/commands.h"
#include "cli/flag_set.h"
#include "core/error.h"
#include "core/timer.h"
#include "data/prepare.h"

namespace mt {

namespace {

struct PrepareArgs {
  PrepareOptions o;
  std::vector<std::string> positional, flagged;
  bool quiet = false;
  bool no_shuffle = false;
};

std::string mb(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MB", double(bytes) / 1e6);
  return buf;
}

int run_prepare(PrepareArgs& a) {
  a.o.inputs = a.positional;
  a.o.inputs.insert(a.o.inputs.end(), a.flagged.begin(), a.flagged.end());
  const bool bar = !a.quiet && ::isatty(2);
  const double t0 = now_seconds();
  double last = 0;
  auto progress = [&](const PrepareProgress& p) {
    const double t = now_seconds() - t0;
    if (!bar || t - last < 0.2) return;
    last = t;
    std::string where = mb(p.bytes_read);
    if (p.total_bytes) {
      char pct[16];
      std::snprintf(pct, sizeof pct, "%3.0f%% ",
                    100.0 * double(p.bytes_read) / double(p.total_bytes));
      where = pct + where + " of " + mb(p.total_bytes);
    }
    std::fprintf(stderr, "\r\033[Kprepare: %s %s, %.1f MB/s, %lld documents, %lld tokens", p.phase,
                 where.c_str(), double(p.bytes_read) / 1e6 / std::max(t, 1e-9),
                 (long long)p.documents, (long long)p.tokens);
    std::fflush(stderr);
  };
  const Dataset d = prepare_dataset(a.o, progress);
  if (bar) std::fputs("\r\033[K", stderr);
  if (!a.quiet) {
    const double t = now_seconds() - t0;
    const uint64_t bytes = d.train.bytes + d.val.bytes;
    std::printf("prepared %s in %.1f s (%.1f MB/s): tokenizer %s\n", a.o.out.c_str(), t,
                double(bytes) / 1e6 / std::max(t, 1e-9), d.tokenizer.describe().c_str());
    for (const auto& [name, s] : {std::pair{"train", &d.train}, std::pair{"val", &d.val}}) {
      if (s->shards.empty()) continue;
      std::printf("  %-5s %lld documents, %lld tokens in %zu shard%s, %.3f bytes/token\n", name,
                  (long long)s->documents, (long long)s->tokens, s->shards.size(),
                  s->shards.size() == 1 ? "" : "s", s->bytes_per_token());
    }
    for (const std::string& dir : d.skipped_outputs)
      std::printf(
          "  left out %s: a dataset of meshtrain prepare (its manifest and shards are "
          "not text)\n",
          dir.c_str());
    if (d.skipped_binary)
      std::printf("  left out %d binary file%s (--skip-binary)\n", d.skipped_binary,
                  d.skipped_binary == 1 ? "" : "s");
    std::printf("train on it with: meshtrain train --data %s\n", a.o.out.c_str());
  }
  return 0;
}

}  // namespace

CommandRunner add_prepare_command(CLI::App& app) {
  auto a = std::make_shared<PrepareArgs>();
  PrepareOptions& o = a->o;
  CLI::App* cmd = app.add_subcommand(
      "prepare", "turn text (files, directories, - for stdin) into a dataset of token shards");
  cmd->add_option("inputs", a->positional, "text files, directories or - (stdin)");
  cmd->add_option("--input", a->flagged, "same as the positional inputs")->expected(1, -1);
  cmd->add_option("--out", o.out, "dataset directory to write (replaced atomically)");
  cmd->add_option("--tokenizer", o.tokenizer,
                  "byte, bpe or unigram (SentencePiece, trained on the text), or a .model file")
      ->capture_default_str();
  CLI::Option* vocab =
      cmd->add_option("--vocab-size", o.vocab_size, "pieces of a trained bpe/unigram tokenizer");
  vocab->capture_default_str();
  cmd->add_option("--documents", o.documents,
                  "where documents end: file (one per input), separator (a line holding "
                  "--separator), blank (blank lines)")
      ->capture_default_str();
  cmd->add_option("--separator", o.separator, "separator line for --documents separator")
      ->capture_default_str();
  cmd->add_option("--val-fraction", o.val_fraction,
                  "share of documents for validation (0: no validation split)")
      ->capture_default_str();
  add_checked_uint(*cmd, "--seed", &o.seed, "seed of the train/validation split", kSeedRange);
  CLI::Option* shuffle_seed =
      add_checked_uint(*cmd, "--shuffle-seed", &o.shuffle_seed,
                       "seed of the order of the documents in each split", kSeedRange);
  cmd->add_flag("--no-shuffle", a->no_shuffle, "keep the documents in input order");
  cmd->add_option("--shard-tokens", o.shard_tokens, "tokens per shard at most")
      ->capture_default_str();
  cmd->add_option("--tokenizer-sample-mb", o.tokenizer_sample_mb,
                  "MB of text (the first documents) a bpe/unigram tokenizer trains on")
      ->capture_default_str();
  cmd->add_option("--threads", o.threads, "threads of SentencePiece training and encoding (1..256)")
      ->capture_default_str();
  cmd->add_flag("--skip-binary", o.skip_binary,
                "leave binary files inside directories out (else they are refused)");
  cmd->add_flag("--quiet", a->quiet, "no progress bar or summary");
  return [a, vocab, shuffle_seed] {
    a->o.vocab_size_given = vocab->count() > 0;
    // A seed that would be ignored is refused, not dropped.
    MT_REQUIRE(!a->no_shuffle || shuffle_seed->count() == 0,
               "--shuffle-seed orders the documents, which --no-shuffle keeps in input order: "
               "give one of them");
    a->o.shuffle = !a->no_shuffle;
    return run_prepare(*a);
  };
}

}  // namespace mt
