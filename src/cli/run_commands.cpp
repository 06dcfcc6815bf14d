// `reformer train`, `reformer eval` and `reformer generate`.
//
// Configs are read and checked before Kokkos starts: an unknown key, a value of
// the wrong type or out of range, contradictory settings or a missing data file
// print one message naming the key and the value and exit with 2.
#include "cli/commands.hpp"

#include "reformer/config/run_config.hpp"
#include "reformer/core/distributed.hpp"
#include "reformer/core/error.hpp"
#include "reformer/core/runtime.hpp"
#include "reformer/data/pairs.hpp"
#include "reformer/io/checkpoint.hpp"
#include "reformer/train/model_family.hpp"
#include "reformer/train/trainer.hpp"

#include <cctype>
#include <climits>
#include <cstdio>
#include <iostream>
#include <limits>
#include <memory>
#include <sstream>

namespace reformer::cli {
namespace {

struct RunArgs {
  std::string target;  // config file (train) or run folder / checkpoint (eval, generate)
  std::vector<std::string> overrides;
  bool resume = false;
  std::string init_from;  // train --init-from: train.init_from
  std::string split = "valid";
  std::int64_t batches = train::kDefaultEvalBatches;  // 8, at most the split
  std::vector<std::string> prompts;
  std::int64_t tokens = 0;
  double temperature = 0;
  std::int64_t top_k = 0;
  double top_p = 1.0;
  std::vector<std::int64_t> stop;
  bool no_cache = false;
  std::int64_t seed = std::int64_t(train::GenerateOptions{}.seed);
  bool seed_given = false;  // --seed was on the command line
  std::int64_t beam = 1;
  double length_penalty = 0.6;
};

int config_error(const std::exception& e) {
  std::fprintf(stderr, "reformer: error: %s\n", e.what());
  return 2;
}

int run_train(const GlobalOptions& global, const RunArgs& args) {
  config::RunConfig config;
  try {
    require<ConfigError>(args.init_from.empty() || !args.resume, "train: --init-from \"",
                         args.init_from,
                         "\" starts a new run from a checkpoint's weights, and --resume "
                         "continues this run from its own newest checkpoint; give one of them");
    config = config::load_run_config(args.target, args.overrides, !args.resume);
    if (!args.init_from.empty()) config.train.init_from = args.init_from;
    config.validate();
    // A missing, special or malformed data file fails here, and so does a
    // missing or damaged checkpoint to start from.
    train::check_run_data(config);
    // Before any work, as eval and generate read theirs: a damaged or missing
    // checkpoint to resume from or start from exits with 2.
    if (args.resume)
      train::check_resume(config);
    else
      train::check_init_from(config);
  } catch (const ConfigError& e) {
    return config_error(e);
  } catch (const IoError& e) {
    return config_error(e);
  }
  Runtime runtime({global.threads, -1, true});
  train::TrainOptions options;
  options.resume = args.resume;
  train::TrainSummary summary;
  try {
    summary = train::run_training(config, options);
  } catch (const ConfigError& e) {  // a resumed run whose config differs
    return config_error(e);
  }
  // This invocation's steps; a resumed run names where it began and ended.
  std::string resumed;
  if (summary.first_step > 0)
    resumed = summary.steps > summary.first_step
                  ? detail::concat(" (steps ", summary.first_step + 1, " to ", summary.steps,
                                   ", resumed after step ", summary.first_step, ")")
                  : detail::concat(" (the run had reached step ", summary.steps, ")");
  if (Communicator::world().rank() == 0)  // under mpirun: process 0 reports
    std::printf("trained %lld steps in %.1f s%s%s\n",
                static_cast<long long>(summary.steps - summary.first_step), summary.seconds,
                resumed.c_str(), summary.interrupted ? " (interrupted)" : "");
  return summary.interrupted ? 130 : 0;
}

data::Split parse_split(const std::string& name) {
  if (name == "train") return data::Split::Train;
  if (name == "valid") return data::Split::Valid;
  if (name == "test") return data::Split::Test;
  throw ConfigError("eval: --split is '" + name + "' but must be train, valid or test");
}

int run_eval(const GlobalOptions& global, const RunArgs& args) {
  data::Split split;
  try {
    split = parse_split(args.split);
    const auto checkpoint = train::resolve_checkpoint(args.target);
    const auto meta = io::read_target_meta(args.target, checkpoint);
    train::check_checkpoint_name(checkpoint, meta.step);
    const auto config = config::parse_run_config(meta.config, checkpoint, args.overrides);
    config.validate();
    // The data as train checks it: a missing, special or malformed file exits
    // with 2 here as there.
    train::check_run_data(config);
  } catch (const ConfigError& e) {
    return config_error(e);
  } catch (const IoError& e) {
    return config_error(e);
  }
  Runtime runtime({global.threads, -1, true});
  const auto r = train::evaluate_checkpoint(args.target, args.overrides, split, args.batches);
  // Per scored target: a token, or an example (a family that labels sequences).
  const char* unit = r.unit.c_str();
  std::printf("%s on %s (%lld %ss): loss %.5f, bits/%s %.5f, accuracy %.5f",
              train::resolve_checkpoint(args.target).c_str(), args.split.c_str(),
              static_cast<long long>(r.tokens), unit, r.loss, unit, r.bits_per_token, r.accuracy);
  if (r.exact_match >= 0) std::printf(", exact match %.5f", r.exact_match);
  std::printf(" (%.3f s, %.0f %ss/s)\n", r.seconds,
              r.seconds > 0 ? double(r.tokens) / r.seconds : 0.0, unit);
  return 0;
}

int run_generate(const GlobalOptions& global, const RunArgs& args) {
  train::GenerateOptions options;
  try {
    // A missing run or checkpoint, or a config that no longer parses, exits 2
    // before anything starts.
    const auto checkpoint = train::resolve_checkpoint(args.target);
    const auto meta = io::read_target_meta(args.target, checkpoint);
    train::check_checkpoint_name(checkpoint, meta.step);
    const auto config = config::parse_run_config(meta.config, checkpoint, args.overrides);
    config.validate();
    // An empty or blank prompt is refused: the family would read it as no
    // prompt and silently continue the validation text instead.
    for (std::size_t i = 0; i < args.prompts.size(); ++i) {
      const auto& text = args.prompts[i];
      const bool blank = text.find_first_not_of(" \t\n\r\v\f") == std::string::npos;
      require<ConfigError>(!blank, "generate: --prompt number ", i + 1, " is ",
                           text.empty() ? "empty" : "only white space ('" + text + "')",
                           ": a prompt needs at least one token (token ids such as --prompt '5 17 "
                           "3', or text for a byte-level model); leave --prompt out to continue "
                           "the validation text");
    }
    const auto& family = train::model_family(config);
    family.read_prompts(config, args.prompts, options);
    for (const auto id : args.stop) options.stop.push_back(int(id));
    options.tokens = args.tokens;
    options.temperature = args.temperature;
    options.top_k = args.top_k;
    options.top_p = args.top_p;
    options.cache = !args.no_cache;
    options.seed = std::uint64_t(args.seed);
    options.seed_given = args.seed_given;
    options.beam = args.beam;
    options.length_penalty = args.length_penalty;
    train::check_generate_options(options, family.decodes_by_beam_search());
  } catch (const ConfigError& e) {
    return config_error(e);
  } catch (const IoError& e) {
    return config_error(e);
  }
  Runtime runtime({global.threads, -1, true});
  const auto r = train::generate(args.target, args.overrides, options);
  std::fputs(r.report.c_str(), stdout);
  return 0;
}

}  // namespace

void add_run_commands(CLI::App& app, const GlobalOptions& global, std::function<int()>& run) {
  static RunArgs args;
  auto overrides = [](CLI::App* sub) {
    sub->add_option("overrides", args.overrides,
                    "Config overrides as section.key=value (train: e.g. train.steps=100; "
                    "eval and generate: model.*, data.*, eval.*, train.batch, train.seed, "
                    "train.precision, e.g. model.lsh.n_hashes=8)");
  };
  CLI::App* train = app.add_subcommand("train", "Train a model from a TOML config");
  train->add_option("config", args.target, "Run config (TOML)")->required();
  overrides(train);
  train->add_flag("--resume", args.resume, "Continue from the newest checkpoint of the run");
  train->add_option("--init-from", args.init_from,
                    "Start a new run from the weights of a checkpoint file or of a run folder's "
                    "newest checkpoint (train.init_from): the step, data, optimizer and "
                    "learning-rate schedule start afresh, e.g. to fine-tune at another rate or "
                    "on other data");
  train->callback([&run, &global] { run = [&global] { return run_train(global, args); }; });

  CLI::App* eval = app.add_subcommand("eval", "Evaluate a run's newest checkpoint (or a file)");
  eval->add_option("run", args.target, "Run folder or checkpoint file")->required();
  overrides(eval);
  eval->add_option("--split", args.split, "train, valid or test (default valid)");
  eval->add_option("--batches", args.batches,
                   "Batches to evaluate (default 8, or the whole split if it holds fewer; 0: the "
                   "whole split of a run whose splits end: Transformer-XL, a classification "
                   "task's valid and test, which refuse more than they hold)")
      ->check(CLI::Range(0, 1 << 30));
  eval->callback([&run, &global] { run = [&global] { return run_eval(global, args); }; });

  CLI::App* gen = app.add_subcommand("generate", "Generate tokens from a run's checkpoint");
  gen->add_option("run", args.target, "Run folder or checkpoint file")->required();
  overrides(gen);
  gen->add_option("--prompt", args.prompts,
                  "Text (byte-level models) or token ids separated by spaces; repeat it to "
                  "decode several prompts as one batch; default: the first half of a "
                  "validation sequence of the run's task");
  gen->add_option("--tokens", args.tokens,
                  "New tokens per prompt (default, or 0: up to data.length; a language model "
                  "refuses more than model.max_length leaves after the longest prompt)")
      ->check(CLI::Range(std::int64_t(0), std::int64_t(1) << 40));
  gen->add_option("--top-p", args.top_p,
                  "Sample among the most likely tokens that hold this much probability "
                  "(in (0, 1]; default 1: all)")
      ->check(CLI::Range(0.0, 1.0));
  gen->add_option("--stop", args.stop, "A token id that ends a prompt's generation (repeatable)")
      ->check(CLI::Range(std::int64_t(0), std::int64_t(1) << 30));
  gen->add_flag("--no-cache", args.no_cache,
                "Rerun the model on the whole prefix for every token instead of decoding with "
                "key/value caches (for comparison)");
  gen->add_option("--temperature", args.temperature, "0 = greedy (default)")
      ->check(CLI::Range(0.0, 1e6));
  gen->add_option("--top-k", args.top_k, "Sample among the k most likely (0 = all)")
      ->check(CLI::Range(std::int64_t(0), std::int64_t(1) << 40));
  gen->add_option("--beam", args.beam,
                  "Encoder-decoder: beam size (default 1: greedy); the search of a source stops "
                  "when `beam` hypotheses have ended")
      ->check(CLI::Range(std::int64_t(1), std::int64_t(1024)));
  gen->add_option("--length-penalty", args.length_penalty,
                  "Encoder-decoder beam search: alpha of ((5 + length) / 6)^alpha (default 0.6)")
      ->check(CLI::Range(0.0, 10.0));
  CLI::Option* seed = gen->add_option("--seed", args.seed, "Sampling seed, in [0, 2^63)");
  seed->check(CLI::Range(std::int64_t(0), std::numeric_limits<std::int64_t>::max()));
  gen->callback([&run, &global, seed] {
    args.seed_given = seed->count() > 0;
    run = [&global] { return run_generate(global, args); };
  });
}

}  // namespace reformer::cli
