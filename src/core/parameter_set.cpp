#include "reformer/core/parameter_set.hpp"

#include "reformer/core/error.hpp"
#include "reformer/core/instantiate.hpp"

#include <sstream>

namespace reformer {

std::string shape_string(const std::vector<Index>& shape) {
  std::ostringstream out;
  out << "[";
  for (std::size_t r = 0; r < shape.size(); ++r) out << (r ? ", " : "") << shape[r];
  out << "]";
  return out.str();
}

namespace {

bool is_name_character(char c) {
  return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '.';
}

// Names are segments of [a-z0-9_] joined by single dots.
void check_name(const std::string& name) {
  const char* op = "ParameterSet::add";
  require<ConfigError>(!name.empty(), op, ": the parameter name is empty");
  for (std::size_t i = 0; i < name.size(); ++i)
    require<ConfigError>(is_name_character(name[i]), op, ": name \"", name, "\" has '", name[i],
                         "' at position ", i, "; names use only the characters [a-z0-9_.]");
  const bool empty_segment =
      name.front() == '.' || name.back() == '.' || name.find("..") != std::string::npos;
  require<ConfigError>(!empty_segment, op, ": name \"", name,
                       "\" has an empty segment; names are non-empty parts joined by single dots, "
                       "like \"layers.3.attn.w_qk\"");
}

}  // namespace

template <class T>
Index Parameter<T>::size() const {
  Index n = 1;
  for (const Index d : shape) n *= d;
  return n;
}

template <class T>
View2<T> Parameter<T>::matrix() const {
  require<ShapeError>(shape.size() == 2, "Parameter::matrix: ", name, " has shape ",
                      shape_string(shape), " but a matrix view needs rank 2");
  return View2<T>(value.data(), shape[0], shape[1]);
}

template <class T>
View2<T> Parameter<T>::grad_matrix() const {
  require<ShapeError>(shape.size() == 2, "Parameter::grad_matrix: ", name, " has shape ",
                      shape_string(shape), " but a matrix view needs rank 2");
  return View2<T>(grad.data(), shape[0], shape[1]);
}

template <class T>
Parameter<T>& ParameterSet<T>::add(const std::string& name, const std::vector<Index>& shape) {
  check_name(name);
  require<ConfigError>(!contains(name), "ParameterSet::add: name \"", name,
                       "\" is already registered; names must be unique");
  require<ShapeError>(!shape.empty(), "ParameterSet::add: ", name,
                      " has an empty shape; a parameter needs at least one dimension");
  for (const Index d : shape)
    require<ShapeError>(d > 0, "ParameterSet::add: ", name, " has shape ", shape_string(shape),
                        "; every dimension must be positive");
  // Each parameter starts on a 64-byte boundary; the padding stays zero.
  constexpr Index kAlign = Index(64 / sizeof(T) > 0 ? 64 / sizeof(T) : 1);
  const Index offset = (Index(values_.extent(0)) + kAlign - 1) / kAlign * kAlign;
  Parameter<T> p{name, shape, offset, {}, {}};
  const Index total = offset + p.size();
  // Grow both buffers, keep the contents, and re-point every parameter.
  View1<T> values("parameters", total);
  View1<T> grads("parameter_grads", total);
  if (values_.extent(0)) {
    const auto old = std::make_pair(Index(0), Index(values_.extent(0)));
    Kokkos::deep_copy(Kokkos::subview(values, old), values_);
    Kokkos::deep_copy(Kokkos::subview(grads, old), grads_);
  }
  values_ = values;
  grads_ = grads;
  index_.emplace(name, parameters_.size());
  parameters_.push_back(std::move(p));
  for (auto& q : parameters_) {
    const auto span = std::make_pair(q.offset, q.offset + q.size());
    q.value = Kokkos::subview(values_, span);
    q.grad = Kokkos::subview(grads_, span);
  }
  return parameters_.back();
}

template <class T>
std::size_t ParameterSet<T>::position(const std::string& name) const {
  const auto it = index_.find(name);
  require<ConfigError>(it != index_.end(), "ParameterSet::get: no parameter is named \"", name,
                       "\"");
  return it->second;
}

template <class T>
Parameter<T>& ParameterSet<T>::get(const std::string& name) {
  return parameters_[position(name)];
}

template <class T>
const Parameter<T>& ParameterSet<T>::get(const std::string& name) const {
  return parameters_[position(name)];
}

template <class T>
bool ParameterSet<T>::contains(const std::string& name) const {
  return index_.count(name) != 0;
}

template <class T>
std::vector<std::string> ParameterSet<T>::names() const {
  std::vector<std::string> out;
  out.reserve(parameters_.size());
  for (const auto& p : parameters_) out.push_back(p.name);
  return out;
}

template <class T>
Index ParameterSet<T>::total_elements() const {
  Index n = 0;
  for (const auto& p : parameters_) n += p.size();
  return n;
}

template <class T>
void ParameterSet<T>::zero_grad() {
  if (grads_.extent(0)) Kokkos::deep_copy(grads_, T(0));
}

#define REFORMER_INSTANTIATE(T) \
  template struct Parameter<T>; \
  template class ParameterSet<T>;
REFORMER_INSTANTIATE_FLOAT_AND_DOUBLE(REFORMER_INSTANTIATE)

}  // namespace reformer
