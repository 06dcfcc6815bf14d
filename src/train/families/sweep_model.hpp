// A family's `reformer memory` sweep over a base model of type Config (private
// to the library): the depth set by SetLayers, each point built by the
// family's variant_config and run by its run_sweep_point (memory_sweep.hpp).
#pragma once

#include "reformer/train/model_family.hpp"

#include <utility>

namespace reformer::train {

template <class Config, class SetLayers>
class SweepOf final : public SweepModel {
 public:
  SweepOf(Config base, SetLayers set_layers)
      : base_(std::move(base)), set_layers_(std::move(set_layers)) {}
  void check(const std::string& variant, Index layers, Index length,
             const std::string& precision) const override {
    variant_config(variant, at_depth(layers), length);  // a ConfigError if it does not fit
    check_sweep_precision(precision);
  }
  std::vector<SweepSetKey> keys_set(const std::string& variant) const override {
    return variant_keys(variant, base_);
  }
  SweepPoint run(const std::string& variant, Index layers, Index batch, Index length,
                 const SweepOptions& options) const override {
    return run_sweep_point(variant, at_depth(layers), batch, length, options);
  }

 private:
  Config at_depth(Index layers) const {
    Config config = base_;
    set_layers_(config, layers);
    return config;
  }
  Config base_;
  SetLayers set_layers_;
};

template <class Config, class SetLayers>
std::unique_ptr<SweepModel> make_sweep(Config base, SetLayers set_layers) {
  return std::make_unique<SweepOf<Config, SetLayers>>(std::move(base), std::move(set_layers));
}

}  // namespace reformer::train
