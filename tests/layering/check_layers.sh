#!/usr/bin/env bash
# The library's layering and the model-family seam (docs/design.md), checked on
# the source tree: exits 1 naming every line that breaks a rule.
#   1. nothing under core, ops, attention, layers, models, io, config or data
#      includes anything from train/;
#   2. core includes nothing from ops;
#   3. no model-type comparison, and no ModelType enumerator outside the
#      families (src/train/families/): everything else asks the registry;
#   4. a family added since the seam (every folder of src/train/families/ but
#      the three that predate it) is named nowhere but in its folder, its model
#      (src/models/<folder>.cpp, include/reformer/models/<folder>.hpp) and the
#      registry: its model.type name (its name() in the folder) and its
#      folder's name, as whole words, in src/ and include/.
set -u
root=${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
cd "$root" || exit 2
bad=0
report() {  # report RULE LINES: prints the offending lines under the rule
  local rule=$1 lines=$2
  if [ -n "$lines" ]; then
    echo "FAIL $rule:"
    echo "$lines" | sed 's/^/  /'
    bad=1
  fi
}
below_train=()
for layer in core ops attention layers models io config data; do
  below_train+=("src/$layer" "include/reformer/$layer")
done
report "a layer below train/ includes train/" \
  "$(grep -rnE '#include "(reformer/)?train/' "${below_train[@]}")"
report "core includes ops/" "$(grep -rnE '#include "(reformer/)?ops/' src/core include/reformer/core)"
report "a model type compared (ask model_family(config) instead)" \
  "$(grep -rnE 'model_type *[!=]=|[!=]= *[a-z_.]*model_type\b' src include)"
report "a ModelType enumerator outside src/train/families/" \
  "$(grep -rn 'ModelType::' src | grep -v '^src/train/families/')"
for folder in src/train/families/*/; do
  family=$(basename "$folder")
  case $family in reformer_lm | encoder_decoder | transformer_xl) continue ;; esac
  name=$(sed -n 's/.*const char\* name() const override { return "\([a-z_0-9]*\)"; }.*/\1/p' \
    "$folder"*.cpp | head -1)
  if [ -z "$name" ]; then
    report "a family folder whose name() cannot be read" "$folder"
    continue
  fi
  report "the family '$name' named outside its folder, its model and the registry" \
    "$(grep -rnwi -e "$name" -e "$family" src include |
      grep -v -e "^src/train/families/$family/" -e '^src/train/families/registry.cpp:' \
        -e "^src/models/$family.cpp:" -e "^include/reformer/models/$family.hpp:")"
done
[ $bad -eq 0 ] && echo "ok   layering and the model-family seam"
exit $bad
