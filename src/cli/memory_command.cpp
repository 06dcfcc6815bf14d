// `reformer memory`: the memory and speed instrument (train/memory_sweep.hpp).
// Sweeps variants x lengths x depths x batch sizes, prints a table with a
// progress counter, and writes sweep.csv and sweep.json into the output folder.
#include "cli/commands.hpp"

#include "reformer/config/run_config.hpp"
#include "reformer/core/error.hpp"
#include "reformer/core/runtime.hpp"
#include "reformer/train/memory_sweep.hpp"
#include "reformer/train/model_family.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace reformer::cli {
namespace {

// A View label as --explain prints it: Kokkos leaves its host threads' team
// scratch unlabeled ("[unlabeled]" in its tools' callbacks).
std::string shown_label(const std::string& label) {
  return label.empty() || label == "[unlabeled]" ? "Kokkos thread scratch" : label;
}

struct MemoryArgs {
  std::string model = "reformer";     // a model.type name (config/model_type.hpp)
  std::vector<std::string> variants;  // empty: the family's (ModelFamily::sweep_variants)
  std::vector<std::int64_t> lengths = {1024, 2048, 4096, 8192, 16384, 32768, 65536};
  std::vector<std::int64_t> layers = {2};
  std::vector<std::int64_t> batches = {1};
  std::int64_t tokens = 0;  // > 0: batch = tokens / length (fixed tokens per batch)
  int steps = 2;
  double budget_gib = -1;
  std::string dtype = "float";
  std::vector<std::string> precisions = {"float32"};  // activations: float32 and/or bf16
  std::string out;
  bool explain = false;
  std::vector<std::string> overrides;
  std::vector<std::string> notes;  // overrides that some variants set themselves
  // The words given to --lengths, --layers and --batch (parsed in run_memory).
  std::vector<std::string> length_words, layer_words, batch_words;
};

// A multi-value option takes every word up to the next option, so an override
// written after it ("--variants lsh-2 model.d_model=32") lands in its list: such
// key=value words are moved to the overrides.
void move_overrides(std::vector<std::string>& words, std::vector<std::string>& overrides) {
  std::vector<std::string> kept;
  for (auto& word : words) (word.find('=') != std::string::npos ? overrides : kept).push_back(word);
  words = kept;
}

// An option's words split at commas ("1024,2048 4096" is three items); an empty
// item ("256,,512", a trailing comma) is refused rather than dropped. Split
// here, not by CLI11, so that an override word moved out first keeps its commas.
std::vector<std::string> comma_items(const std::vector<std::string>& words, const char* option) {
  std::vector<std::string> items;
  for (const auto& word : words) {
    std::size_t begin = 0;
    while (true) {
      const std::size_t comma = std::min(word.find(',', begin), word.size());
      require<ConfigError>(comma > begin, "memory: ", option, " has an empty item in '", word,
                           "'; separate the values by single commas (e.g. ", option, " 1024,2048)");
      items.push_back(word.substr(begin, comma - begin));
      if (comma == word.size()) break;
      begin = comma + 1;
    }
  }
  return items;
}

// The integers of an option's words; ConfigError naming the option and the word.
std::vector<std::int64_t> integers(const std::vector<std::string>& words, const char* option,
                                   const std::vector<std::int64_t>& fallback) {
  if (words.empty()) return fallback;
  std::vector<std::int64_t> values;
  for (const auto& word : words) {
    char* end = nullptr;
    errno = 0;
    const long long value = std::strtoll(word.c_str(), &end, 10);
    require<ConfigError>(!word.empty() && *end == '\0' && errno == 0, "memory: ", option, " has '",
                         word, "', which is not an integer (e.g. ", option, " 1024,2048)");
    values.push_back(value);
  }
  return values;
}

double mib(std::int64_t bytes) { return double(bytes) / (1 << 20); }

// "a, b and c".
std::string list_of(const std::vector<std::string>& names) {
  std::string out;
  for (std::size_t i = 0; i < names.size(); ++i)
    out += (i == 0 ? "" : i + 1 == names.size() ? " and " : ", ") + names[i];
  return out;
}

// A note as a CSV field ("" doubled) or a JSON string (quote, backslash and
// control characters escaped).
std::string csv_quoted(const std::string& text) {
  std::string out = "\"";
  for (const char c : text) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

std::string json_quoted(const std::string& text) {
  std::string out = "\"";
  for (const char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if ((unsigned char)c < 0x20) {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\u%04x", unsigned(c));
      out += escaped;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string default_out() {
  char stamp[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", std::localtime(&now));
  return std::string("runs/memory-") + stamp;
}

int run_memory(const GlobalOptions& global, MemoryArgs args) {
  std::unique_ptr<train::SweepModel> sweep;
  std::string out;  // the folder of sweep.csv and sweep.json, made before any work
  std::ofstream csv;
  try {
    const auto& family =
        train::model_family(config::parse_model_type(args.model, "memory: --model"));
    move_overrides(args.variants, args.overrides);
    move_overrides(args.length_words, args.overrides);
    move_overrides(args.layer_words, args.overrides);
    move_overrides(args.batch_words, args.overrides);
    move_overrides(args.precisions, args.overrides);
    args.variants = comma_items(args.variants, "--variants");
    args.length_words = comma_items(args.length_words, "--lengths");
    args.layer_words = comma_items(args.layer_words, "--layers");
    args.batch_words = comma_items(args.batch_words, "--batch");
    args.precisions = comma_items(args.precisions, "--precision");
    if (args.precisions.empty()) args.precisions = {"float32"};  // only overrides were given
    args.lengths = integers(args.length_words, "--lengths", args.lengths);
    args.layers = integers(args.layer_words, "--layers", args.layers);
    args.batches = integers(args.batch_words, "--batch", args.batches);
    if (args.variants.empty()) args.variants = family.sweep_variants();
    // Model overrides (model.d_model=512, model.lsh.chunk=128, ...) go through
    // the config parser, so a typo is named like in a config file.
    sweep = family.sweep(args.overrides);
    // An override of a key (or a section) that a point sets itself is dropped
    // at that point: refused when every variant sets it, else named below.
    for (const auto& override_ : args.overrides) {
      const auto keys = config::override_keys(override_);
      std::vector<std::string> setting;
      std::string by, what;
      for (const auto& variant : args.variants)
        for (const auto& set : sweep->keys_set(variant))
          if (std::find(keys.begin(), keys.end(), set.key) != keys.end()) {
            by = setting.empty() || by == set.by ? set.by : "each variant";
            what = set.key;
            setting.push_back(variant);
            break;
          }
      require<ConfigError>(setting.size() < args.variants.size(), "memory: the override '",
                           override_, "' would have no effect: ", by, " sets ", what,
                           " at every point; leave it out (--layers sets the depth, --lengths "
                           "the length, and --variants the attention, rounds, reversibility and "
                           "chunking: see docs/memory.md)");
      if (!setting.empty())
        args.notes.push_back(detail::concat("note: the override '", override_,
                                            "' does not apply to the points of ", list_of(setting),
                                            ", which set ", what, " themselves"));
    }
    require<ConfigError>(args.dtype == "float" || args.dtype == "double", "memory: --dtype is '",
                         args.dtype, "' but must be float or double");
    for (const auto& precision : args.precisions) {
      require<ConfigError>(precision == "float32" || precision == "bf16",
                           "memory: --precision has '", precision,
                           "' but each must be float32 or bf16");
      require<ConfigError>(precision == "float32" || args.dtype == "float",
                           "memory: --precision bf16 keeps float32 parameters; it needs --dtype "
                           "float, not ",
                           args.dtype);
    }
    // Every point's config (variant, depth, length, batch) is checked before any
    // work starts, so a bad value never leaves a half-written sweep behind.
    for (const auto length : args.lengths) {
      require<ConfigError>(length > 0, "memory: --lengths has ", length,
                           " but every length must be positive");
      require<ConfigError>(args.tokens == 0 || (args.tokens >= length && args.tokens % length == 0),
                           "memory: --tokens ", args.tokens, " is not a whole number of length ",
                           length, " sequences (batch = tokens / length); use a multiple of ",
                           length, ", e.g. --tokens ",
                           length * std::max<std::int64_t>(1, args.tokens / length));
    }
    for (const auto batch : args.batches)
      require<ConfigError>(batch > 0, "memory: --batch has ", batch,
                           " but every batch size must be positive");
    for (const auto layers : args.layers) {
      require<ConfigError>(layers > 0, "memory: --layers has ", layers,
                           " but every depth must be positive");
      for (const auto& v : args.variants)
        for (const auto length : args.lengths)
          for (const auto& precision : args.precisions) sweep->check(v, layers, length, precision);
    }
    // Before any work: --out names a folder (made when missing), not a file.
    std::error_code error;
    require<ConfigError>(args.out.empty() || !std::filesystem::exists(args.out, error) ||
                             std::filesystem::is_directory(args.out, error),
                         "memory: --out \"", args.out,
                         "\" is a file, but --out names the folder that receives sweep.csv and "
                         "sweep.json (made if missing): give a folder");
    out = args.out.empty() ? default_out() : args.out;
    std::filesystem::create_directories(out, error);
    csv.open(out + "/sweep.csv");
    require<ConfigError>(!error && csv.is_open(), "memory: --out \"", out, "\" ",
                         error ? "cannot be made (" + error.message() + ")"
                               : std::string("takes no file sweep.csv (not writable)"),
                         "; --out names the folder that receives sweep.csv and sweep.json "
                         "(default runs/memory-<time>): give a folder you can write");
  } catch (const ConfigError& e) {
    std::fprintf(stderr, "reformer: error: %s\n", e.what());
    return 2;
  }
  Runtime runtime({global.threads, -1, true});
  csv << "variant,length,layers,batch,status,seconds_per_step,tokens_per_s,"
         "forward_MiB,loss_MiB,backward_MiB,optimizer_MiB,peak_MiB,"
         "predicted_forward_MiB,predicted_loss_MiB,predicted_backward_MiB,"
         "predicted_optimizer_MiB,predicted_peak_MiB,warmup_peak_MiB,state_MiB,predicted_state_MiB,"
         "backend_MiB,launches_per_step,precision,note\n";
  std::ostringstream json;
  json << "{\n \"backend\": \"" << backend_info().default_execution_space << "\",\n \"model\": \""
       << args.model << "\",\n \"dtype\": \"" << args.dtype << "\",\n \"points\": [";
  train::SweepOptions options;
  options.timed_steps = args.steps;
  options.dtype = args.dtype;
  options.budget_bytes =
      args.budget_gib >= 0 ? std::int64_t(args.budget_gib * double(1 << 30)) : -1;
  const std::size_t total = args.variants.size() * args.lengths.size() * args.layers.size() *
                            (args.tokens ? 1 : args.batches.size()) * args.precisions.size();
  std::size_t index = 0;
  for (const auto& note : args.notes) std::printf("%s\n", note.c_str());
  std::printf("%-9s %7s %6s %5s %-9s %9s %10s %10s %8s  %s  %s\n", "variant", "length", "layers",
              "batch", "precision", "s/step", "peak MiB", "predicted", "ratio",
              "state MiB (params+grads+Adam)", "launches/step");
  bool first = true;
  std::ofstream(out + "/sweep.json") << json.str() << "\n ]\n}\n";
  for (const auto& variant : args.variants)
    for (const auto layers : args.layers)
      for (const auto length : args.lengths)
        for (std::size_t b = 0; b < (args.tokens ? 1 : args.batches.size()); ++b)
          for (const auto& precision : args.precisions) {
            const Index batch = args.tokens ? args.tokens / length : args.batches[b];
            options.precision = precision;
            // The activations' type: --dtype double keeps everything in float64.
            const std::string label = args.dtype == "double" ? "float64" : precision;
            ++index;
            train::SweepPoint p;
            try {
              p = sweep->run(variant, layers, batch, length, options);
            } catch (const MemoryError& e) {
              p.variant = variant;
              p.length = length;
              p.layers = layers;
              p.batch = batch;
              p.skipped = e.what();
            }
            const double peak = mib(p.measured.peak()), predicted = mib(p.predicted.peak());
            if (p.ran)
              std::printf(
                  "%-9s %7lld %6lld %5lld %-9s %9.3f %10.1f %10.1f %8.2f  %.1f  %lld   [%zu/%zu]\n",
                  variant.c_str(), (long long)length, (long long)layers, (long long)batch,
                  label.c_str(), p.seconds_per_step, peak, predicted,
                  predicted > 0 ? peak / predicted : 0.0, mib(p.state_bytes),
                  (long long)p.launches_per_step, index, total);
            else
              std::printf("%-9s %7lld %6lld %5lld %-9s   skipped: %s   [%zu/%zu]\n",
                          variant.c_str(), (long long)length, (long long)layers, (long long)batch,
                          label.c_str(), p.skipped.c_str(), index, total);
            if (p.ran && args.explain) {
              std::printf(
                  "          chunks: feed-forward %s, loss %lld rows\n",
                  p.ff_chunk > 0 ? (std::to_string(p.ff_chunk) + " rows").c_str() : "all rows",
                  (long long)p.loss_chunk);
              std::printf("          at the peak:");
              for (std::size_t i = 0; i < p.composition.size() && i < 8; ++i)
                std::printf(" %s %.1f MiB (%lld)%s", shown_label(p.composition[i].label).c_str(),
                            mib(p.composition[i].bytes), (long long)p.composition[i].allocations,
                            i + 1 < p.composition.size() && i < 7 ? "," : "\n");
            }
            std::fflush(stdout);
            const double tokens_per_s =
                p.ran && p.seconds_per_step > 0 ? double(batch * length) / p.seconds_per_step : 0;
            char row[1024];
            std::snprintf(row, sizeof row,
                          "%s,%lld,%lld,%lld,%s,%.6f,%.1f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,"
                          "%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%lld,%s,",
                          variant.c_str(), (long long)length, (long long)layers, (long long)batch,
                          p.ran ? "ran" : "skipped", p.seconds_per_step, tokens_per_s,
                          mib(p.measured.forward), mib(p.measured.loss), mib(p.measured.backward),
                          mib(p.measured.optimizer), peak, mib(p.predicted.forward),
                          mib(p.predicted.loss), mib(p.predicted.backward),
                          mib(p.predicted.optimizer), predicted, mib(p.warmup_peak),
                          mib(p.state_bytes), mib(p.predicted_state_bytes), mib(p.backend_bytes),
                          (long long)p.launches_per_step, label.c_str());
            csv << row << csv_quoted(p.skipped) << '\n';
            csv.flush();
            json << (first ? "\n  " : ",\n  ") << "{\"variant\": \"" << variant
                 << "\", \"length\": " << length << ", \"layers\": " << layers
                 << ", \"batch\": " << batch << ", \"precision\": \"" << label
                 << "\", \"ran\": " << (p.ran ? "true" : "false")
                 << ", \"seconds_per_step\": " << p.seconds_per_step
                 << ", \"measured_MiB\": {\"forward\": " << mib(p.measured.forward)
                 << ", \"loss\": " << mib(p.measured.loss)
                 << ", \"backward\": " << mib(p.measured.backward)
                 << ", \"optimizer\": " << mib(p.measured.optimizer)
                 << "}, \"predicted_MiB\": {\"forward\": " << mib(p.predicted.forward)
                 << ", \"loss\": " << mib(p.predicted.loss)
                 << ", \"backward\": " << mib(p.predicted.backward)
                 << ", \"optimizer\": " << mib(p.predicted.optimizer)
                 << "}, \"warmup_peak_MiB\": " << mib(p.warmup_peak)
                 << ", \"state_MiB\": " << mib(p.state_bytes)
                 << ", \"predicted_state_MiB\": " << mib(p.predicted_state_bytes)
                 << ", \"backend_MiB\": " << mib(p.backend_bytes)
                 << ", \"launches_per_step\": " << p.launches_per_step
                 << ", \"ff_chunk\": " << p.ff_chunk << ", \"loss_chunk\": " << p.loss_chunk
                 << ", \"skipped\": " << json_quoted(p.skipped) << "}";
            first = false;
            // Rewritten after every point: a sweep stopped midway keeps what ran.
            std::ofstream(out + "/sweep.json") << json.str() << "\n ]\n}\n";
          }
  std::printf("wrote %s/sweep.csv and %s/sweep.json\n", out.c_str(), out.c_str());
  return 0;
}

}  // namespace

void add_memory_command(CLI::App& app, const GlobalOptions& global, std::function<int()>& run) {
  static MemoryArgs args;
  CLI::App* sub = app.add_subcommand(
      "memory", "Measure (and predict) the memory and time of a training step per variant");
  // The families and their variants, from the registry (train/model_family.hpp).
  std::string models, variants;
  for (std::size_t i = 0; i < config::model_type_names().size(); ++i) {
    const auto& family = train::model_family(config::ModelType(i));
    std::string names;
    for (const auto& v : family.sweep_variants()) names += (names.empty() ? "" : ", ") + v;
    models += std::string(i ? "; " : "") + family.name() + " (" + family.description() +
              (i == 0 ? ", default" : "") + ")";
    variants += std::string(i ? "; " : "") + family.name() + ": " + names;
  }
  sub->add_option("--model", args.model, "The model family: " + models);
  sub->add_option("--variants", args.variants,
                  "Variants (default: all of the family's): " + variants);
  sub->add_option("--lengths", args.length_words, "Sequence lengths (default 1024,...,65536)");
  sub->add_option("--layers", args.layer_words, "Depths (default 2)");
  sub->add_option("--batch", args.batch_words, "Batch sizes (default 1)");
  sub->add_option("--tokens", args.tokens,
                  "Fixed tokens per batch: batch = tokens / length (overrides --batch)")
      ->check(CLI::Range(std::int64_t(0), std::int64_t(1) << 40));
  sub->add_option("--steps", args.steps,
                  "Timed steps after the measured one (default 2; 0: time the measured step)")
      ->check(CLI::Range(0, 1000));
  sub->add_option("--budget-gib", args.budget_gib,
                  "Skip points predicted above this (default: the free memory)")
      ->check(CLI::Validator(
          [](std::string& value) -> std::string {
            char* end = nullptr;
            const double gib = std::strtod(value.c_str(), &end);
            if (end != value.c_str() && *end == '\0' && std::isfinite(gib) && gib > 0 && gib < 1e9)
              return "";
            return "'" + value +
                   "' is not a positive number of GiB (finite, below 1e9; e.g. 0.5 or 16)";
          },
          "GiB > 0"));
  sub->add_option("--dtype", args.dtype, "float or double (default float)");
  sub->add_option("--precision", args.precisions,
                  "Activations: float32, bf16 or both (default float32); bf16: bf16 activations "
                  "on float32 parameters, gradients and Adam (train.precision), every model");
  sub->add_option("--out", args.out, "Output folder (default runs/memory-<time>)");
  sub->add_flag("--explain", args.explain, "Print what was live at each point's peak");
  sub->add_option("overrides", args.overrides,
                  "Model overrides, e.g. model.d_model=512 (and the family's own model.* "
                  "keys, e.g. model.seq2seq.* or model.xl.*)");
  sub->callback([&global, &run] { run = [&global] { return run_memory(global, args); }; });
}

}  // namespace reformer::cli
