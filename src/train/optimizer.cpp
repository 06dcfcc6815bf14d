#include "reformer/train/optimizer.hpp"

#include "reformer/core/error.hpp"
#include "reformer/core/instantiate.hpp"

#include <cmath>

namespace reformer::train {
namespace {

// Per-step constants of the update, computed on the host.
struct AdamStep {
  double lr, beta1, beta2, eps;
  double l2;           // Adam: wd, added to the gradient as wd * p; AdamW: 0
  double decay;        // AdamW: lr * wd, subtracted from p as lr * wd * p; Adam: 0
  double correction1;  // 1 - beta1^t
  double correction2;  // 1 - beta2^t
};

// The fused update of one parameter (equations in optimizer.hpp), with the bias
// corrections as reciprocals (one division per element).
template <class T>
void adam_update(View1<T> p, In1<T> grad, View1<T> m, View1<T> v, AdamStep s) {
  const T lr = s.lr, beta1 = s.beta1, beta2 = s.beta2, eps = s.eps, l2 = s.l2, decay = s.decay;
  const T inv_c1 = T(1.0 / s.correction1), inv_c2 = T(1.0 / s.correction2);
  parallel_blocks(
      "adam_update", p.extent(0), KOKKOS_LAMBDA(Index begin, Index end) {
        T* __restrict__ pp = p.data();
        T* __restrict__ mp = m.data();
        T* __restrict__ vp = v.data();
        const T* __restrict__ gp = grad.data();
        for (Index i = begin; i < end; ++i) {
          const T w = pp[i];
          const T g = gp[i] + l2 * w;
          const T mi = beta1 * mp[i] + (T(1) - beta1) * g;
          const T vi = beta2 * vp[i] + (T(1) - beta2) * g * g;
          mp[i] = mi;
          vp[i] = vi;
          pp[i] = w - decay * w - lr * (mi * inv_c1) / (compat::sqrt(vi * inv_c2) + eps);
        }
      });
}

}  // namespace

template <class T>
Adam<T>::Adam(ParameterSet<T>& params, AdamConfig config)
    : params_(params),
      config_(config),
      m_("adam_m", params.values().extent(0)),
      v_("adam_v", params.values().extent(0)),
      parameters_(params.size()) {
  validate(config_);
}

template <class T>
void Adam<T>::step(double learning_rate) {
  require<ConfigError>(std::isfinite(learning_rate) && learning_rate >= 0,
                       "Adam::step: learning rate is ", learning_rate,
                       " but must be finite and >= 0");
  require<ConfigError>(params_.size() == parameters_, "Adam::step: the parameter set has ",
                       params_.size(), " parameters but the optimizer was built for ", parameters_,
                       "; build it after registering every parameter");
  const double t = double(steps_ + 1);
  const double wd = config_.weight_decay;
  const bool decoupled = config_.decoupled_weight_decay;
  const AdamStep s{learning_rate,
                   config_.beta1,
                   config_.beta2,
                   config_.eps,
                   decoupled ? 0.0 : wd,
                   decoupled ? learning_rate * wd : 0.0,
                   1.0 - std::pow(config_.beta1, t),
                   1.0 - std::pow(config_.beta2, t)};
  // One kernel over the set's contiguous buffers (padding stays zero).
  adam_update<T>(params_.values(), params_.grads(), m_, v_, s);
  ++steps_;
}

template <class T>
void Adam<T>::set_steps(std::int64_t steps) {
  require<ConfigError>(steps >= 0, "Adam::set_steps: steps is ", steps, " but must be >= 0");
  steps_ = steps;
}

template <class T>
View1<T> Adam<T>::moment(const char* op, const View1<T>& buffer, const std::string& name) const {
  require<ConfigError>(params_.contains(name), op, ": the optimizer has no moments for \"", name,
                       "\"");
  const auto& p = params_.get(name);
  return Kokkos::subview(buffer, std::make_pair(p.offset, p.offset + p.size()));
}

template <class T>
View1<T> Adam<T>::first_moment(const std::string& name) const {
  return moment("Adam::first_moment", m_, name);
}

template <class T>
View1<T> Adam<T>::second_moment(const std::string& name) const {
  return moment("Adam::second_moment", v_, name);
}

#define REFORMER_INSTANTIATE(T) template class Adam<T>;
REFORMER_INSTANTIATE_FLOAT_AND_DOUBLE(REFORMER_INSTANTIATE)

}  // namespace reformer::train
