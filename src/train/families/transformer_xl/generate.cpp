#include "train/families/transformer_xl/transformer_xl.hpp"

#include "reformer/core/error.hpp"
#include "reformer/data/tasks.hpp"
#include "reformer/io/checkpoint.hpp"
#include "reformer/models/transformer_xl.hpp"
#include "train/memory_check.hpp"
#include "train/sampling.hpp"

#include <algorithm>
#include <chrono>
#include <map>
#include <set>

namespace reformer::train {
namespace {

using IdView = Kokkos::View<int**, Layout, MemSpace>;
using HostIds = Kokkos::View<int**, Layout, HostSpace>;

// Columns [begin, begin + count) of host ids, on the device.
IdView upload(const HostIds& host, Index begin, Index count) {
  HostIds part("xl_generate_part", host.extent(0), count);
  for (Index b = 0; b < Index(host.extent(0)); ++b)
    for (Index t = 0; t < count; ++t) part(b, t) = host(b, begin + t);
  IdView ids("xl_generate_ids", host.extent(0), count);
  Kokkos::deep_copy(ids, part);
  return ids;
}

// The reading of a stream that evaluation uses: segments of eval.tgt_len
// (or data.length) and its memory settings.
struct Reading {
  Index segment = 0, mem_len = 0, clamp_len = -1;
  int same_length = -1;
};

Reading reading_of(const config::RunConfig& config) {
  const auto& e = config.eval;
  Reading r;
  r.segment = e.tgt_len > 0 ? e.tgt_len : config.data.length;
  r.mem_len = e.mem_len >= 0 ? e.mem_len : config.xl.mem_len;
  r.clamp_len = e.clamp_len;
  r.same_length = e.same_length == "on" ? 1 : e.same_length == "off" ? 0 : -1;
  return r;
}

// Decodes the prompts `rows` (global row numbers; all of one length) as one
// batch, writing their generations into result.generations.
template <class T>
void decode(const models::TransformerXL<T>& model, const Reading& reading,
            const std::vector<Index>& rows, Index budget, const GenerateOptions& options,
            GenerateResult& result) {
  const Index batch = Index(rows.size()), vocab = model.config().vocab;
  const Index prompt = Index(result.prompts[std::size_t(rows[0])].size());
  const Index capacity = prompt + budget, length = reading.segment;
  // The ids so far, on the host ([batch, capacity]).
  HostIds host("xl_generate_ids", batch, capacity);
  for (Index b = 0; b < batch; ++b)
    for (Index t = 0; t < prompt; ++t)
      host(b, t) = result.prompts[std::size_t(rows[std::size_t(b)])][std::size_t(t)];
  models::TransformerXLMemory<T> memory;
  memory.mem_len = reading.mem_len;
  memory.clamp_len = reading.clamp_len;
  memory.same_length = reading.same_length;
  View2<T> logits("xl_generate_logits", batch, vocab);
  auto host_logits = Kokkos::create_mirror_view(logits);
  // Cached: one generation over the segments. Rerunning: `memory` follows
  // the complete segments of the first `rolled` ids (forward on each), and
  // the logits after `fed` ids come from forward on the current segment so
  // far over a copy of it.
  models::TransformerXLGeneration<T> generation;
  models::TransformerXLState<T> state;
  models::ModelCall call;
  call.training = false;
  Index rolled = 0;
  auto rerun = [&](Index fed) {
    const Index start = (fed - 1) / length * length;
    for (; rolled < start; rolled += length)
      model.forward(upload(host, rolled, length), call, memory, state, false);
    auto scratch = memory.copy();
    model.forward(upload(host, start, fed - start), call, scratch, state, false);
    model.logits_at(state, fed - start - 1, logits);
  };
  if (options.cache) {
    model.start_generation(batch, length, memory, generation);
    model.generation_step(upload(host, 0, prompt), generation, logits);
  } else {
    rerun(prompt);
  }
  const std::set<int> stop(options.stop.begin(), options.stop.end());
  std::vector<bool> done(std::size_t(batch), false);
  for (Index step = 0; step < budget; ++step) {
    Kokkos::deep_copy(host_logits, logits);
    const Index position = prompt + step;
    bool any = false;
    for (Index b = 0; b < batch; ++b) {
      if (done[std::size_t(b)]) {
        host(b, position) = 0;  // fed, never read
        continue;
      }
      const auto row = std::uint64_t(rows[std::size_t(b)]);
      // The language model's draws: one per position and row.
      const int token =
          pick(row_of(host_logits, b), options, std::uint64_t(position) + (row << 32));
      host(b, position) = token;
      result.generations[row].push_back(token);
      done[std::size_t(b)] = stop.count(token) > 0;
      any = any || !done[std::size_t(b)];
    }
    if (!any || step + 1 == budget) break;
    if (options.cache)
      model.generation_step(upload(host, position, 1), generation, logits);
    else
      rerun(position + 1);
  }
}

}  // namespace

template <class T>
GenerateResult generate_transformer_xl(const std::string& checkpoint,
                                       const config::RunConfig& config,
                                       const GenerateOptions& options) {
  const char* op = "generate";
  // The sampling options were checked by train::generate.
  require<ConfigError>(options.tokens >= 0, op, ": tokens is ", options.tokens,
                       " but must be >= 0 (0: up to data.length)");
  const auto model_config = config::xl_config(config);
  const Index vocab = model_config.vocab, length = config.data.length;
  const Reading reading = reading_of(config);
  GenerateResult result;
  result.prompts = options.prompts;
  if (result.prompts.empty()) result.prompts.push_back(options.prompt);
  if (result.prompts.size() == 1 && result.prompts[0].empty()) {
    // The start of the validation text (one stream), cut after its first half.
    const auto task = data::make_task(config.data);
    const auto text = task->segments(data::Split::Valid, 0, 0, 1, 1, length);
    const Index cut = length / 2 + 1;
    for (Index t = 0; t < length; ++t)
      (t < cut ? result.prompts[0] : result.expected).push_back(text.inputs(0, t));
  }
  Index longest = 0;
  std::map<Index, std::vector<Index>> by_length;  // rows of each prompt length, in order
  for (std::size_t b = 0; b < result.prompts.size(); ++b) {
    const auto& prompt = result.prompts[b];
    require<ConfigError>(!prompt.empty(), op, ": prompt ", b + 1,
                         " is empty; a prompt needs at least one token");
    for (std::size_t t = 0; t < prompt.size(); ++t)
      require<ConfigError>(prompt[t] >= 0 && prompt[t] < vocab, op, ": prompt token ", prompt[t],
                           " (prompt ", b + 1, ", position ", t, ") is outside the vocabulary [0, ",
                           vocab, ") of model.vocab");
    by_length[Index(prompt.size())].push_back(Index(b));
    longest = std::max(longest, Index(prompt.size()));
  }
  for (int id : options.stop)
    require<ConfigError>(id >= 0 && id < vocab, op, ": stop id ", id,
                         " is outside the vocabulary [0, ", vocab, ") of model.vocab");
  // Every row gets the same budget; a stream has no length limit.
  const Index budget =
      options.tokens > 0 ? Index(options.tokens) : std::max<Index>(1, length - longest);
  // A stream has no length limit: the ids asked for must fit the host.
  require_generated_ids_fit(std::int64_t(result.prompts.size()), std::int64_t(longest) + budget,
                            op);
  // The largest batch decodes like an evaluation batch of its rows.
  std::size_t widest = 0;
  for (const auto& group : by_length) widest = std::max(widest, group.second.size());
  ParameterSet<T> params;
  const models::TransformerXL<T> model(
      config::xl_config(require_memory_fits(config, Index(widest), false, op)), params);
  io::load_checkpoint<T>(checkpoint, params, nullptr);
  result.generations.assign(result.prompts.size(), {});
  const auto start = std::chrono::steady_clock::now();
  for (const auto& group : by_length)
    decode<T>(model, reading, group.second, budget, options, result);
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  result.prompt = result.prompts[0];
  result.generated = result.generations[0];
  if (result.expected.size() > result.generated.size())
    result.expected.resize(result.generated.size());
  return result;
}

template GenerateResult generate_transformer_xl<float>(const std::string&, const config::RunConfig&,
                                                       const GenerateOptions&);
template GenerateResult generate_transformer_xl<double>(const std::string&,
                                                        const config::RunConfig&,
                                                        const GenerateOptions&);

}  // namespace reformer::train
