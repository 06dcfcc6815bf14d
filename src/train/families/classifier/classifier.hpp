// What the files of the classifier family's folder share (private to the
// library). The family: model.type = "classifier", an encoder over any
// attention kind with a pooled linear head (models/classifier.hpp), on the
// sequence classification tasks (data/classification.hpp).
#pragma once

#include "reformer/data/classification.hpp"
#include "reformer/models/classifier.hpp"
#include "reformer/train/model_family.hpp"
#include "train/workload.hpp"

#include <memory>
#include <string>

namespace reformer::train {

// The family, for the registry (src/train/families/registry.cpp).
const ModelFamily& classifier_family();

namespace classifier {

// Sequences of one example of a task: 2 for retrieval (pairs), else 1.
Index task_documents(data::TaskKind task);
// The data task of a run: data.task, data.length, data.seed, data.vocab,
// data.path and the family's [data.examples] and [data.listops] keys.
data::ClassDataConfig data_config(const config::RunConfig& config);
// The model of a run: [model] (the encoder; LSH buckets resolved at
// data.length as the LM's) and [model.classifier] (documents: the key, or the
// task's when it is 0); `classes` the task's
// (0: model.classifier.classes, or 2 when that is 0 too, for predictions made
// before the task is read).
models::ClassifierConfig model_config(const config::RunConfig& config, Index classes = 0);

// Its workload on the run's data (workload.cpp).
template <class T>
std::unique_ptr<Workload<T>> make_workload(const config::RunConfig& config);

// Its memory (memory.cpp): what `reformer memory --model classifier` sweeps
// and the trainer checks before it allocates.
const char* sweep_base();
const std::vector<std::string>& sweep_variants();
std::unique_ptr<SweepModel> make_sweep(const std::vector<std::string>& overrides);
RunMemory predict_run_memory(const models::ClassifierConfig& config, Index batch, Index length,
                             std::int64_t scalar_bytes, bool training,
                             std::int64_t activation_bytes = 0);
std::int64_t predict_state_bytes(const models::ClassifierConfig& config, std::int64_t scalar_bytes);
StepMemory predict_step_memory(const models::ClassifierConfig& config, Index batch, Index length,
                               std::int64_t scalar_bytes, std::int64_t activation_bytes = 0);

}  // namespace classifier
}  // namespace reformer::train
