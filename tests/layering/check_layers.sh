#!/usr/bin/env bash
# The library's layering and the model-family seam (docs/design.md), checked on
# the source tree: exits 1 naming every line that breaks a rule.
#   1. nothing under core, ops, attention, layers, models, io, config or data
#      includes anything from train/;
#   2. core includes nothing from ops;
#   3. no model-type comparison, and no ModelType enumerator outside the
#      families (src/train/families/): everything else asks the registry.
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
[ $bad -eq 0 ] && echo "ok   layering and the model-family seam"
exit $bad
