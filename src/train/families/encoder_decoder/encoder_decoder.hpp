// What the files of the family's folder share (private to the library).
#pragma once

#include "reformer/train/model_family.hpp"
#include "train/workload.hpp"

#include <memory>
#include <string>

namespace reformer::train {

// The family, for the registry (src/train/families/registry.cpp).
const ModelFamily& encoder_decoder_family();

// Its workload on the run's data (workload.cpp).
template <class T>
std::unique_ptr<Workload<T>> make_encoder_decoder_workload(const config::RunConfig& config);

// Its generation from a checkpoint (generate.cpp).
template <class T>
GenerateResult generate_encoder_decoder(const std::string& checkpoint,
                                        const config::RunConfig& config,
                                        const GenerateOptions& options);

}  // namespace reformer::train
