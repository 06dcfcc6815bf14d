#include "train/families/reformer_lm/reformer_lm.hpp"

#include "reformer/core/error.hpp"
#include "reformer/core/memory_tracker.hpp"
#include "reformer/data/tasks.hpp"
#include "reformer/io/checkpoint.hpp"
#include "reformer/models/reformer_lm.hpp"

#include <chrono>
#include <set>
#include "train/memory_check.hpp"
#include "train/sampling.hpp"

namespace reformer::train {

template <class T>
GenerateResult generate_lm(const std::string& checkpoint, const config::RunConfig& run,
                           const GenerateOptions& options) {
  const auto config = config::lm_config(run);
  const Index length = run.data.length, vocab = config.vocab;
  GenerateResult result;
  result.prompts = options.prompts;
  if (result.prompts.empty()) result.prompts.push_back(options.prompt);
  if (result.prompts.size() == 1 && result.prompts[0].empty()) {
    // The start of a validation sequence, cut after its first half: only
    // here is the task's data read (a prompt of one's own needs no corpus).
    const auto task = data::make_task(run.data);
    const auto batch = task->batch(data::Split::Valid, 0, 1);
    const Index cut = length / 2 + 1;
    for (Index t = 0; t < length; ++t)
      (t < cut ? result.prompts[0] : result.expected).push_back(batch.inputs(0, t));
  }
  const Index rows = Index(result.prompts.size());
  Index longest = 0;
  for (std::size_t b = 0; b < result.prompts.size(); ++b) {
    const auto& prompt = result.prompts[b];
    require<ConfigError>(
        !prompt.empty() && Index(prompt.size()) < config.max_length, "generate: prompt ", b + 1,
        " has ", prompt.size(),
        " tokens but must have between 1 and model.max_length - 1 = ", config.max_length - 1);
    for (int id : prompt)
      require<ConfigError>(id >= 0 && id < vocab, "generate: prompt token ", id,
                           " is outside the vocabulary [0, ", vocab, ")");
    longest = std::max(longest, Index(prompt.size()));
  }
  for (int id : options.stop)
    require<ConfigError>(id >= 0 && id < vocab, "generate: stop id ", id,
                         " is outside the vocabulary [0, ", vocab, ")");
  // Every row gets the same budget of new tokens; the longest prompt and its
  // budget fit model.max_length (more is refused, not cut short).
  require<ConfigError>(options.tokens <= config.max_length - longest, "generate: --tokens ",
                       options.tokens, " but the longest prompt (", longest,
                       " tokens) leaves room for ", config.max_length - longest,
                       " within model.max_length = ", config.max_length, "; ask for at most ",
                       config.max_length - longest);
  const Index budget =
      std::min(options.tokens > 0 ? Index(options.tokens) : std::max<Index>(1, length - longest),
               config.max_length - longest);
  const Index capacity = longest + budget;
  // The model with its "auto" chunks resolved for these rows.
  const auto built = config::lm_config(require_memory_fits(run, rows, false, "generate"));
  struct {
    ParameterSet<T> params;
    std::unique_ptr<models::ReformerLM<T>> model;
    models::ReformerState<T> state;
  } m;
  m.model = std::make_unique<models::ReformerLM<T>>(built, m.params);
  io::load_checkpoint<T>(checkpoint, m.params, nullptr);
  result.generations.assign(std::size_t(rows), {});
  std::vector<bool> done(std::size_t(rows), false);
  const std::set<int> stop(options.stop.begin(), options.stop.end());
  // The sequences so far, on the host ([rows, capacity], 0 behind each row).
  Kokkos::View<int**, Layout, HostSpace> host("generate_ids", rows, capacity);
  std::vector<Index> lengths;
  for (Index b = 0; b < rows; ++b) {
    const auto& prompt = result.prompts[std::size_t(b)];
    for (std::size_t t = 0; t < prompt.size(); ++t) host(b, Index(t)) = prompt[t];
    lengths.push_back(Index(prompt.size()));
  }
  View2<T> logits("generate_logits", rows, vocab);
  auto host_logits = Kokkos::create_mirror_view(logits);
  // Rerunning: one row at a time, its tokens so far (padded to the chunks
  // inside the model), the logits of its last position.
  View2<T> row_logits("generate_row_logits", 1, vocab);
  // Rows [0, rows) and columns [0, n) of `host` on the device (contiguous).
  auto upload = [&](Index first, Index count, Index n) {
    Kokkos::View<int**, Layout, HostSpace> part("generate_part", count, n);
    for (Index b = 0; b < count; ++b)
      for (Index t = 0; t < n; ++t) part(b, t) = host(first + b, t);
    Kokkos::View<int**, Layout, MemSpace> ids("generate_part", count, n);
    Kokkos::deep_copy(ids, part);
    return ids;
  };
  auto rerun = [&](Index b, Index n) {
    const auto ids = upload(b, 1, n);
    m.model->logits_at(ids, n - 1, row_logits, m.state);
    Kokkos::deep_copy(Kokkos::subview(logits, Kokkos::make_pair(b, b + 1), Kokkos::ALL),
                      row_logits);
  };
  const auto start = std::chrono::steady_clock::now();
  models::ReformerGeneration<T> generation;
  const RandomKey key{};  // the calls' key: LSH rotations as in logits_at
  if (options.cache) {
    m.model->start_generation(upload(0, rows, longest), lengths, capacity, key, generation, logits,
                              m.state);
  } else {
    for (Index b = 0; b < rows; ++b) rerun(b, lengths[std::size_t(b)]);
  }
  std::int64_t step_launches = 0, steps = 0;
  for (Index step = 0; step < budget; ++step) {
    Kokkos::deep_copy(host_logits, logits);
    std::vector<int> tokens(std::size_t(rows), 0);
    bool any = false;
    for (Index b = 0; b < rows; ++b) {
      const Index position = lengths[std::size_t(b)] + step;
      if (done[std::size_t(b)]) continue;
      // Row 0 draws as a single prompt always did: one draw per position.
      const int token =
          pick(row_of(host_logits, b), options, std::uint64_t(position) + (std::uint64_t(b) << 32));
      host(b, position) = tokens[std::size_t(b)] = token;
      result.generations[std::size_t(b)].push_back(token);
      done[std::size_t(b)] = stop.count(token) > 0;
      any = any || !done[std::size_t(b)];
    }
    if (!any || step + 1 == budget) break;
    if (options.cache) {
      const std::int64_t before = MemoryTracker::instance().launches().ours();
      m.model->generation_step(tokens, generation, logits);
      step_launches += MemoryTracker::instance().launches().ours() - before;
      ++steps;
    } else {
      for (Index b = 0; b < rows; ++b)
        if (!done[std::size_t(b)]) rerun(b, lengths[std::size_t(b)] + step + 1);
    }
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (steps > 0) result.launches_per_token = double(step_launches) / double(steps);
  result.prompt = result.prompts[0];
  result.generated = result.generations[0];
  if (result.expected.size() > result.generated.size())
    result.expected.resize(result.generated.size());
  return result;
}

template GenerateResult generate_lm<float>(const std::string&, const config::RunConfig&,
                                           const GenerateOptions&);
template GenerateResult generate_lm<double>(const std::string&, const config::RunConfig&,
                                            const GenerateOptions&);

}  // namespace reformer::train
