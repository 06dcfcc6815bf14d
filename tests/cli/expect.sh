# Shared by the CLI test scripts (sourced): `expect` runs the program under test
# ($bin) and checks its exit code and output; `failures` counts what failed.
failures=0
pass() { echo "ok   $1"; }
fail() {
  echo "FAIL $1"
  failures=$((failures + 1))
}
expect() {  # expect <name> <expected exit code> <text the output must contain> -- <args...>
  local name=$1 code=$2 text=$3
  shift 4
  local out rc
  out=$("$bin" "$@" 2>&1)
  rc=$?
  if [ "$rc" -ne "$code" ] || ! grep -qF -- "$text" <<<"$out"; then
    echo "$out" | tail -20
    fail "$name: exit $rc (want $code), want text '$text'"
  else
    pass "$name"
  fi
}
