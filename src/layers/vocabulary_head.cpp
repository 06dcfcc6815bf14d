#include "reformer/layers/vocabulary_head.hpp"

#include "reformer/core/error.hpp"
#include "reformer/core/initializers.hpp"
#include "reformer/ops/gemm.hpp"
#include "reformer/ops/linear.hpp"

#include <algorithm>

namespace reformer::layers {

template <class T>
VocabularyHead<T>::VocabularyHead(const std::string& prefix, const VocabularyHeadConfig& config,
                                  ParameterSet<param_t<T>>& params, Parameter<param_t<T>>* tied)
    : config_(config), tied_(tied != nullptr) {
  require<ConfigError>(config.loss_chunk >= 0, "VocabularyHead: loss_chunk is ", config.loss_chunk,
                       " but must be >= 0 (0: all rows at once)",
                       config.loss_chunk == kAutoChunk ? unresolved_auto_chunk() : "");
  weight_ = tied ? tied : &params.add(prefix + ".w", {config.d_in, config.vocab});
  bias_ = &params.add(prefix + ".b", {config.vocab});
}

template <class T>
void VocabularyHead<T>::init(RandomKey key) {
  if (!tied_) init_xavier_uniform(*weight_, key);
  init_constant(*bias_, 0.0);
}

template <class T>
void VocabularyHead<T>::logits(In2<T> hidden, View2<T> logits) const {
  ops::matmul<T>(hidden, ops::Trans::No, weight_->matrix(),
                 tied_ ? ops::Trans::Yes : ops::Trans::No, logits);
  ops::add_bias<T>(logits, bias_->value);
}

template <class T>
bool VocabularyHead<T>::step_logits(In2<T> hidden, const ops::RowNorm<T>& norm,
                                    View2<T> logits) const {
  if constexpr (is_reduced_precision<T>) {
    return false;
  } else {
    if (tied_ || !ops::fused_step_rows(hidden.extent(0))) return false;
    ops::rows_linear<T>(hidden, norm, {{weight_->matrix(), bias_->value, logits}}, std::nullopt,
                        T(0));
    return true;
  }
}

template <class T>
ops::CrossEntropyOptions VocabularyHead<T>::options(Index rows, int ignore_id, double loss_scale,
                                                    Workspace* workspace) const {
  ops::CrossEntropyOptions options;
  options.pad_id = ignore_id;
  options.smoothing = config_.label_smoothing;
  options.chunk_rows = config_.loss_chunk > 0 ? config_.loss_chunk : std::max<Index>(1, rows);
  options.weight_is_embedding = tied_;
  options.gradient_scale = loss_scale;
  options.workspace = workspace;
  return options;
}

template <class T>
ops::CrossEntropyResult VocabularyHead<T>::forward(In2<T> hidden, In1<int> targets, int ignore_id,
                                                   Workspace* workspace) const {
  return ops::cross_entropy_forward<T>(hidden, weight_->matrix(), bias_->value, targets,
                                       options(hidden.extent(0), ignore_id, 1.0, workspace));
}

template <class T>
ops::CrossEntropyResult VocabularyHead<T>::forward_backward(In2<T> hidden, In1<int> targets,
                                                            int ignore_id, double loss_scale,
                                                            View2<T> dhidden,
                                                            Workspace* workspace) const {
  return ops::cross_entropy_forward_backward<T>(
      hidden, weight_->matrix(), bias_->value, targets,
      options(hidden.extent(0), ignore_id, loss_scale, workspace), dhidden, weight_->grad_matrix(),
      bias_->grad);
}

template class VocabularyHead<float>;
template class VocabularyHead<double>;
// bf16 activations on float32 parameters: the training calls (logits run the
// float32 model).
template VocabularyHead<bf16>::VocabularyHead(const std::string&, const VocabularyHeadConfig&,
                                              ParameterSet<float>&, Parameter<float>*);
template void VocabularyHead<bf16>::init(RandomKey);
template ops::CrossEntropyResult VocabularyHead<bf16>::forward(In2<bf16>, In1<int>, int,
                                                               Workspace*) const;
template ops::CrossEntropyResult VocabularyHead<bf16>::forward_backward(In2<bf16>, In1<int>, int,
                                                                        double, View2<bf16>,
                                                                        Workspace*) const;

}  // namespace reformer::layers
